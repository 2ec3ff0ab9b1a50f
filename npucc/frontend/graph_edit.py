"""Graph-editing helpers of the frontend and the transforms: fresh names, constants, layers."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import onnx

from npucc.errors import NpuccError
from npucc.ir.dtypes import dtype_name
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_schema import ONNX_PREFIX

UNKNOWN_SHAPE = (-1,)  # before fold-constants: a shape of unknown rank (-1 marks an open dim)
# views that keep the row-major order of the values (gather-index-views looks through them)
ORDER_KEEPING_VIEWS = ("Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten")


def fresh_name(g: Graph, base: str) -> str:
    """A tensor name not yet used in `g`, derived from `base`."""
    if base not in g.tensors:
        return base
    i = 1
    while f"{base}_{i}" in g.tensors:
        i += 1
    return f"{base}_{i}"


def fresh_layer_name(g: Graph, base: str) -> str:
    """A layer name not yet used in `g`, derived from `base`."""
    name, i = base, 1
    while g.layer_name_taken(name):
        name, i = f"{base}_{i}", i + 1
    return name


def add_const(g: Graph, base: str, data: np.ndarray) -> str:
    """Register a new constant tensor holding `data`; returns its name."""
    name = fresh_name(g, base)
    g.add_tensor(Tensor(name, tuple(data.shape), dtype_name(data.dtype), data))
    return name


def const(g: Graph, name: str) -> np.ndarray:
    """The data of constant tensor `name` (it must be constant)."""
    data = g.tensors[name].data
    assert data is not None, name
    return data


def onnx_op(layer: Layer) -> str:
    """The ONNX op type of a not-yet-legalised layer ('' for canonical layers)."""
    return layer.op[len(ONNX_PREFIX) :] if layer.op.startswith(ONNX_PREFIX) else ""


def unsupported(op_type: str, node: str, opset: int) -> NpuccError:
    """The error for an operator npucc cannot compile."""
    return NpuccError(f"unsupported operator {op_type} (node '{node}', opset {opset})")


def node_error(layer: Layer, message: str) -> NpuccError:
    """An NpuccError naming the node: "node 'n' (Op): message"."""
    return NpuccError(f"node '{layer.name}' ({onnx_op(layer) or layer.op}): {message}")


def single_user(g: Graph, tensor: str) -> bool:
    """True when `tensor` is read by exactly one layer and is not a graph output."""
    return tensor not in g.outputs and len(g.users(tensor)) == 1


def sole_channel_concat(g: Graph, tensor: str) -> Layer | None:
    """The channel concat (axis 1) that writes `tensor`, when one layer alone reads `tensor`
    and layers write each of the concat's inputs, all distinct; else None."""
    concat = g.producer(tensor)
    if concat is None or concat.op != "concat" or concat.attrs["axis"] != 1:
        return None
    if not single_user(g, tensor) or len(set(concat.inputs)) != len(concat.inputs):
        return None
    if any(g.producer(t) is None for t in concat.inputs):
        return None
    return concat


def remove_layer_and_outputs(g: Graph, layer: Layer) -> None:
    """Remove `layer` and the tensors it writes."""
    g.remove_layer(layer)
    for t in layer.outputs:
        del g.tensors[t]


@dataclass(slots=True)
class Fusion:
    """A matched pattern: `keep` becomes one `op` layer, the `drop` layers go away."""

    keep: Layer  # the layer rewritten in place (it keeps its name and output)
    drop: list[Layer]  # the pattern's other layers
    op: str  # canonical op of the fused layer
    inputs: list[str]  # its inputs
    attrs: dict[str, Any]  # its attributes


def merged_src(*layers: Layer) -> tuple[str, ...]:
    """The provenance of a layer that computes all of `layers` (a fusion's or a fold's)."""
    return tuple(dict.fromkeys(s for layer in layers for s in layer.src))


def fuse_all(g: Graph, anchor_op: str, match: Callable[[Graph, Layer], Fusion | None]) -> int:
    """Rewrite every match found from a layer of `anchor_op`; returns how many were fused."""
    fused = 0
    for anchor in list(g.layers):
        if anchor.op != anchor_op or anchor.attrs.get("act") or not g.has_layer(anchor):
            continue
        found = match(g, anchor)
        if found is None:
            continue
        keep = found.keep
        keep.op, keep.attrs = found.op, found.attrs
        keep.src = merged_src(keep, *found.drop)
        g.set_inputs(keep, found.inputs)
        for layer in found.drop:
            remove_layer_and_outputs(g, layer)
        fused += 1
    return fused


M = TypeVar("M")


def rewrite_all(
    g: Graph, match: Callable[[Graph, Layer], M | None], rewrite: Callable[[Graph, Layer, M], None]
) -> int:
    """`rewrite(g, layer, found)` for every layer of `g` (as it was on entry) that `match`
    finds something for, in graph order; returns how many were rewritten.

    NOTE: a rewrite that keeps its layer (unlike `fuse_all`'s) may change what the next
    layers match: each is matched on the graph as the earlier rewrites left it."""
    done = 0
    for layer in list(g.layers):
        found = match(g, layer)
        if found is not None:
            rewrite(g, layer, found)
            done += 1
    return done


def value_type(v: onnx.ValueInfoProto | None) -> tuple[tuple[int, ...], str]:
    """Shape and IR dtype of a value; dims left open are -1, an unknown rank is UNKNOWN_SHAPE."""
    if v is None or not v.type.tensor_type.elem_type:
        return UNKNOWN_SHAPE, "f32"
    tt = v.type.tensor_type
    dtype = dtype_name(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    if not tt.HasField("shape"):
        return UNKNOWN_SHAPE, dtype
    return tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim), dtype


def single_producer(g: Graph, tensor: str, op: str) -> Layer | None:
    """The `op` layer writing `tensor` when it has no fused activation and `tensor` one reader."""
    layer = g.producer(tensor)
    if layer is None or layer.op != op or layer.attrs.get("act") or not single_user(g, tensor):
        return None
    return layer


def scalar_const(g: Graph, name: str) -> float | None:
    """The value of a one-element constant, else None."""
    if not g.is_const(name) or const(g, name).size != 1:
        return None
    return float(const(g, name).reshape(-1)[0])


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (whitespace runs become one space)."""
    return " ".join(str(exc).split())


def node_names(graph: onnx.GraphProto) -> list[str]:
    """Unique, deterministic node names: the ONNX name, else `Op_index`; repeats get `_k`."""
    taken: set[str] = set()
    names = []
    for index, node in enumerate(graph.node):
        base = node.name or f"{node.op_type}_{index}"
        unique, i = base, 1
        while unique in taken:
            unique, i = f"{base}_{i}", i + 1
        taken.add(unique)
        names.append(unique)
    return names


def foldable(op_type: str) -> bool:
    """A standard ONNX operator without subgraphs: fold-constants can evaluate it."""
    if not onnx.defs.has(op_type):
        return False
    graph_attrs = (onnx.defs.OpSchema.AttrType.GRAPH, onnx.defs.OpSchema.AttrType.GRAPHS)
    attrs = onnx.defs.get_schema(op_type).attributes.values()
    return not any(a.type in graph_attrs for a in attrs)


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every value's type inferred afresh (declared shapes may name fixed dims).

    NOTE: the declared types of what nodes of an unknown schema (another domain's operators,
    which the host may run) write are kept: ONNX cannot infer them.
    """
    opaque = {
        out
        for node in model.graph.node
        if not onnx.defs.has(node.op_type, node.domain)
        for out in node.output
    }
    kept = [v for v in model.graph.value_info if v.name in opaque]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    ranks = {}
    for v in model.graph.output:
        ranks[v.name] = len(v.type.tensor_type.shape.dim)
        if v.name not in opaque:
            v.type.tensor_type.ClearField("shape")
    try:
        model = onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as exc:  # InferenceError
        raise NpuccError(f"shape inference failed: {one_line(exc)}") from None
    for v in model.graph.output:  # one inference left open (a Loop's) keeps its rank, dims open
        if not v.type.tensor_type.HasField("shape"):
            v.type.tensor_type.shape.dim.extend(
                onnx.TensorShapeProto.Dimension() for _ in range(ranks[v.name])
            )
    return model


def fold_with_reference(
    proto: onnx.ModelProto | onnx.GraphProto,
    feeds: Mapping[str, Any],
    where: str,
    opsets: dict[str, int] | None = None,
) -> list[np.ndarray]:
    """Outputs of onnx's reference evaluator on constant inputs; an NpuccError naming `where`
    ("node 'n' (Op)") when it fails. Floating-point warnings are silenced: log(0) = -inf and
    the like are the values ONNX defines, not faults of the model."""
    from onnx.reference import ReferenceEvaluator  # NOTE: deferred: few models fold (start-up)

    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            results = ReferenceEvaluator(proto, opsets=opsets).run(None, dict(feeds))
    except Exception as exc:  # the evaluator raises many types
        raise NpuccError(f"{where}: constant folding failed: {one_line(exc)}") from None
    return [np.asarray(r) for r in results]
