"""What `npucc inspect` says about an ONNX model: I/O, opset, MACs, weights, operator support."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

import onnx

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import foldable, node_names
from npucc.frontend.onnx_import import read_model
from npucc.frontend.op_support import FOLDS, HOST, LOWERS, REFUSES, op_support

Info = dict[str, Any]
_SHAPE_OPS = ("Shape", "Size")  # fold-constants folds these on any tensor of a static shape


def _dtype(elem_type: int) -> str:
    """numpy's name of an ONNX element type (float32, int64, ...)."""
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # UNDEFINED, STRING, or a type numpy lacks
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _value(v: onnx.ValueInfoProto) -> Info:
    """A graph input's or output's name, dtype and shape (symbolic dims by name, '?' unknown)."""
    tt = v.type.tensor_type
    dims: list[int | str] = [
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim
    ]
    shape = dims if tt.HasField("shape") else None  # None: the model declares no shape
    return {"name": v.name, "dtype": _dtype(tt.elem_type), "shape": shape}


def format_value(v: Info) -> str:
    """`float32[1,3,N,N]`-style type of an `_value`."""
    if v["shape"] is None:
        return f"{v['dtype']} (no shape declared)"
    return f"{v['dtype']}[{','.join(map(str, v['shape']))}]"


def _tensor_bytes(t: onnx.TensorProto) -> int:
    try:
        item = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except Exception:  # strings: count their stored bytes
        return sum(len(s) for s in t.string_data)
    return math.prod(t.dims) * item


def _weights(graph: onnx.GraphProto) -> tuple[int, int, int]:
    """(tensors, elements, bytes) of the initializers and Constant nodes' values."""
    tensors = list(graph.initializer)
    tensors += [a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.t.dims]
    return len(tensors), sum(math.prod(t.dims) for t in tensors), sum(map(_tensor_bytes, tensors))


def _static_shapes(model: onnx.ModelProto) -> dict[str, bool]:
    """Per tensor, whether ONNX shape inference gives it a fully static shape."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference fails on this model: assume nothing
        return {}
    g = inferred.graph
    return {
        v.name: v.type.tensor_type.HasField("shape")
        and all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
        for v in (*g.input, *g.value_info, *g.output)
    }


def classify_nodes(model: onnx.ModelProto) -> list[Info]:
    """Per node: its name, op, domain and whether npucc lowers, folds or refuses it (why)."""
    graph = model.graph
    const = {i.name for i in graph.initializer} | {""}  # "" is an absent optional input
    static = _static_shapes(model)
    nodes = []
    for name, node in zip(node_names(graph), graph.node, strict=True):
        domain = node.domain or "ai.onnx"
        status, reason = LOWERS, ""
        inputs_const = all(t in const for t in node.input)
        if node.op_type in _SHAPE_OPS and node.input and static.get(node.input[0], False):
            inputs_const = True
        if domain != "ai.onnx":
            status = REFUSES
            reason = f"operator of domain '{domain}' (npucc runs the standard ai.onnx operators)"
        elif node.op_type == "Constant" or (inputs_const and foldable(node.op_type)):
            status = FOLDS
        else:
            support = op_support(node.op_type)
            if support.status == FOLDS:
                status = REFUSES
                runtime = next(t for t in node.input if t not in const)
                reason = (
                    f"npucc only folds {node.op_type}: its inputs must be constant, but "
                    f"'{runtime}' is computed at run time"
                )
            elif support.status == REFUSES:
                status, reason = REFUSES, f"npucc has no lowering of {node.op_type}"
        if status == FOLDS:
            const.update(node.output)
        nodes.append(
            {"name": name, "op": node.op_type, "domain": domain, "status": status, "reason": reason}
        )
    return nodes


def _op(node: Info) -> str:
    return node["op"] if node["domain"] == "ai.onnx" else f"{node['domain']}.{node['op']}"


def _per_op(nodes: list[Info]) -> list[Info]:
    """Nodes grouped by operator: count, nodes per status, and the reasons of refusals."""
    ops: dict[tuple[str, str], Info] = {}
    for n in nodes:
        row = ops.setdefault(
            (n["domain"], n["op"]),
            {"op": n["op"], "domain": n["domain"], "count": 0, "status": Counter(), "reasons": []},
        )
        row["count"] += 1
        row["status"][n["status"]] += 1
        if n["reason"] and n["reason"] not in row["reasons"]:
            row["reasons"].append(n["reason"])
    for row in ops.values():
        row["status"] = dict(sorted(row["status"].items()))
        row["limits"] = op_support(row["op"]).limits if row["domain"] == "ai.onnx" else ""
    return [ops[k] for k in sorted(ops)]


def _macs(
    path: str, shapes: Mapping[str, tuple[int, ...]], nodes: list[Info], fallback: str
) -> Info:
    """MACs of the canonical graph (the frontend run for real), or the error it stopped at.

    With `fallback` "host", the nodes the frontend made host segments of get status HOST.
    """
    from npucc.backend.hypercut.workload import workload_from_graph
    from npucc.ir.graph_schema import HOST_OP
    from npucc.transforms.graph_pipeline import import_model

    try:
        graph = import_model(path, shapes, fallback)
    except NpuccError as exc:
        message = str(exc)
        named = re.search(r"node '([^']*)'", message)
        for n in nodes:  # the node the frontend names is refused, for that reason
            if named and n["name"] == named.group(1):
                n["status"], n["reason"] = REFUSES, message
        return {"macs": None, "error": message}
    hosted = {s for layer in graph.layers if layer.op == HOST_OP for s in layer.src}
    for n in nodes:
        if n["name"] in hosted:
            n["status"] = HOST
            n["reason"] = n["reason"] or "npucc cannot lower it here"
    wl = workload_from_graph(graph)  # per-sample loads of its batch
    return {"macs": sum(layer.macs for layer in wl.layers) * wl.batch, "error": None}


def inspect_model(
    path: str,
    input_shapes: Mapping[str, tuple[int, ...]],
    batch: int | None = None,
    fallback: str = "error",
) -> Info:
    """Everything `npucc inspect` prints about the model at `path`, as JSON-ready data."""
    from npucc.compiler import batch_input_shapes

    model = read_model(path, external_data=False)
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    inputs = [_value(v) for v in graph.input if v.name not in inits]
    shapes = dict(batch_input_shapes(model, input_shapes, batch))
    symbolic = []
    for v in inputs:  # symbolic dims not fixed by the options count as 1 for the MACs
        if v["name"] not in shapes and v["shape"] is not None:
            if any(not isinstance(d, int) for d in v["shape"]):
                symbolic.append(v["name"])
            shapes[v["name"]] = tuple(d if isinstance(d, int) else 1 for d in v["shape"])
    nodes = classify_nodes(model)
    count, elems, nbytes = _weights(graph)
    macs = _macs(path, shapes, nodes, fallback)
    return {
        "model": path,
        "graph": graph.name,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": inputs,
        "outputs": [_value(v) for v in graph.output],
        "macs": macs["macs"],
        "macs_shapes": {k: list(v) for k, v in shapes.items()},
        "symbolic_set_to_1": symbolic,
        "weights": {"tensors": count, "elements": elems, "bytes": nbytes},
        "compile_error": macs["error"],
        "operators": _per_op(nodes),
        "nodes": nodes,
        "fallback": fallback,
        "host_segments": [
            {"name": n["name"], "op": _op(n), "reason": n["reason"]}
            for n in nodes
            if n["status"] == HOST
        ],
    }
