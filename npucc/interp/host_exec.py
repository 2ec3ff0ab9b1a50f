"""Execution of a host record: its ONNX node as a one-node model, run by onnxruntime.

The model is built from the record alone: the node (op type, domain, typed attributes, its
input list), the default opset and the node domain's version, and per operand its ONNX element
type and shape. DDR holds every operand as float32 (integers too, exact within 2**24); the
host converts them to their types before the run and the results back after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
import onnx

from npucc.errors import NpuccError
from npucc.frontend.host_fallback import make_attributes
from npucc.ir.dtypes import EXACT_INT, NUMPY_DTYPES
from npucc.ir.isa import HostOp, Operand

# ops.View (ops imports this module on first use, so it cannot be imported from there)
View = Callable[[Operand, tuple[int, ...], tuple[int, ...]], np.ndarray]


def _elem(dtype: str) -> int:
    return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(NUMPY_DTYPES[dtype]))


def one_node_model(ins: HostOp) -> onnx.ModelProto:
    """The one-node model of a host record (inputs in0..., outputs out0...)."""
    spec = json.loads(ins.node)
    node = onnx.helper.make_node(
        spec["op"], spec["inputs"], [f"out{i}" for i in range(len(ins.outs))],
        domain=spec["domain"] or None,
    )  # fmt: skip
    node.attribute.extend(make_attributes(spec["attrs"]))
    values = [
        onnx.helper.make_tensor_value_info(f"{side}{i}", _elem(dtype), shape)
        for side, types in (("in", ins.in_types), ("out", ins.out_types))
        for i, (dtype, shape) in enumerate(types)
    ]
    graph = onnx.helper.make_graph([node], "host", values[: len(ins.ins)], values[len(ins.ins) :])
    opsets = [onnx.helper.make_opsetid("", spec["opset"])]
    if spec["domain"]:
        opsets.append(onnx.helper.make_opsetid(spec["domain"], spec["version"]))
    model = onnx.helper.make_model(graph, opset_imports=opsets)
    model.ir_version = min(model.ir_version, 10)  # what the installed onnxruntime reads
    return model


@lru_cache(maxsize=64)
def _session(ins: HostOp) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    model = one_node_model(ins).SerializeToString()
    try:
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own exception types
        raise NpuccError(f"host: onnxruntime cannot run {_name(ins)}: {exc}") from None


def _name(ins: HostOp) -> str:
    spec = json.loads(ins.node)
    return f"{spec['domain']}.{spec['op']}" if spec["domain"] else spec["op"]


def exec_host(view: View, ins: HostOp) -> None:
    """Run the record's node with onnxruntime on its DDR inputs and write its DDR outputs."""
    feeds = {}
    for i, (ref, (dtype, shape)) in enumerate(zip(ins.ins, ins.in_types, strict=True)):
        data = view(ref, (int(np.prod(shape)),), (1,)).reshape(shape)
        feeds[f"in{i}"] = data.astype(NUMPY_DTYPES[dtype])
    try:
        results = _session(ins).run(None, feeds)
    except NpuccError:
        raise
    except Exception as exc:  # onnxruntime's run-time failures
        raise NpuccError(f"host: {_name(ins)} failed in onnxruntime: {exc}") from None
    for i, (ref, (dtype, shape), value) in enumerate(
        zip(ins.outs, ins.out_types, results, strict=True)
    ):
        value = np.asarray(value)
        if value.shape != tuple(shape):
            raise NpuccError(f"host: {_name(ins)} output {i} has shape {list(value.shape)}, "
                             f"the stream declares {list(shape)}")  # fmt: skip
        if dtype != "f32" and value.size and np.abs(value.astype(np.float64)).max() > EXACT_INT:
            raise NpuccError(f"host: {_name(ins)} output {i} holds an integer beyond 2**24, "
                             "which float32 DDR cannot hold exactly")  # fmt: skip
        view(ref, (value.size,), (1,))[...] = value.reshape(-1).astype(np.float32)
