"""fold-constants: evaluate ONNX layers whose inputs are all constant (and Shape of any tensor).

Any standard ONNX operator folds, also one npucc cannot run (ScatterND building a mask from
shapes); legalize-onnx reports the ones that are left.

A zero-size tensor holds no data, so it is known at compile time too: zero-size graph inputs are
read as empty constants, and a layer's zero-size outputs become empty constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from npucc.frontend.graph_edit import (
    UNKNOWN_SHAPE,
    add_const,
    fold_with_reference,
    fresh_name,
    node_error,
    onnx_op,
    value_type,
)
from npucc.ir.dtypes import NUMPY_DTYPES, dtype_name
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.passes import CompileContext, GraphPass


def _same_shape(g: Graph, layer: Layer) -> tuple[int, ...] | None:
    """The first input's shape."""
    return g.tensors[layer.inputs[0]].shape


def _compress_shape(g: Graph, layer: Layer) -> tuple[int, ...] | None:
    """A Compress's output shape when its condition is constant."""
    condition = g.tensors[layer.inputs[1]].data
    if condition is None:
        return None
    shape = g.tensors[layer.inputs[0]].shape
    kept = int(np.count_nonzero(condition))
    if "axis" not in layer.attrs:
        return (kept,)
    axis = int(layer.attrs["axis"]) % len(shape)
    return (*shape[:axis], kept, *shape[axis + 1 :])


# output shapes onnx's shape inference leaves open (function ops; data it does not propagate)
KNOWN_SHAPES = {"GroupNormalization": _same_shape, "Compress": _compress_shape}


def _attr_proto_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return numpy_helper.from_array(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _shape_of(g: Graph, layer: Layer) -> np.ndarray:
    shape = g.tensors[layer.inputs[0]].shape
    if onnx_op(layer) == "Size":
        return np.asarray(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start, end = layer.attrs.get("start", 0), layer.attrs.get("end", len(shape))
    return np.asarray(shape[start:end], dtype=np.int64)


def _one_node_model(g: Graph, layer: Layer, consts_as_inits: bool) -> onnx.ModelProto:
    """A model holding just `layer`; constant inputs become initializers when asked."""
    # an empty list attribute has no inferable type; every ONNX default for one is "absent"
    attrs = {
        k: _attr_proto_value(v)
        for k, v in layer.attrs.items()
        if not (isinstance(v, tuple) and not v)
    }
    node = onnx.helper.make_node(onnx_op(layer), layer.inputs, layer.outputs, **attrs)
    inputs, inits = [], []
    for name in dict.fromkeys(t for t in layer.inputs if t):
        t = g.tensors[name]
        if consts_as_inits and t.data is not None:
            inits.append(numpy_helper.from_array(t.data, name))
            continue
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(NUMPY_DTYPES[t.dtype]))
        inputs.append(onnx.helper.make_tensor_value_info(name, elem, t.shape))
    outputs = [onnx.helper.make_empty_tensor_value_info(t) for t in layer.outputs]
    graph = onnx.helper.make_graph([node], "fold", inputs, outputs, inits)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", g.opset)])


def _gather_elements(layer: Layer, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """GatherElements (negative indices count from the end)."""
    axis = int(layer.attrs.get("axis", 0)) % data.ndim
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    return np.take_along_axis(data, indices, axis=axis)


# ops folded with numpy: onnx 1.23's reference GatherElements fails when the data's leading dim
# is 1 (a Hugging Face BERT's token-type ids)
NUMPY_FOLDS = {"GatherElements": _gather_elements}


# ops onnx 1.23's reference evaluator implements only from a later opset, which computes the
# earlier versions' types alike (QuantizeLinear and DequantizeLinear: from 19)
REFERENCE_OPSETS = {"QuantizeLinear": 19, "DequantizeLinear": 19}


def _evaluate(g: Graph, layer: Layer) -> list[np.ndarray]:
    """Run one layer on its constant inputs with onnx's reference evaluator."""
    feeds = {t: g.tensors[t].data for t in layer.inputs if t}
    fold = NUMPY_FOLDS.get(onnx_op(layer))
    if fold is not None:
        return [fold(layer, *(np.asarray(feeds[t]) for t in layer.inputs))]
    where = f"node '{layer.name}' ({onnx_op(layer) or layer.op})"
    model = _one_node_model(g, layer, False)
    model.opset_import[0].version = max(g.opset, REFERENCE_OPSETS.get(onnx_op(layer), 0))
    return fold_with_reference(model, feeds, where)


def _same_type_cast(g: Graph, layer: Layer) -> bool:
    """A CastLike of a constant to the type it has (its second input only gives the type)."""
    if onnx_op(layer) != "CastLike" or not g.is_const(layer.inputs[0]):
        return False
    return g.tensors[layer.inputs[0]].dtype == g.tensors[layer.inputs[1]].dtype


def _open(g: Graph, tensor: str) -> bool:
    return any(d < 0 for d in g.tensors[tensor].shape)


def _infer(g: Graph, layer: Layer) -> None:
    """Static output shapes of a layer whose constant inputs are now known."""
    try:
        model = onnx.shape_inference.infer_shapes(
            _one_node_model(g, layer, True), strict_mode=True, data_prop=True
        )
    except Exception as exc:  # InferenceError
        raise node_error(layer, f"shape inference failed: {exc}") from None
    found = {v.name: value_type(v) for v in model.graph.output}
    for out in layer.outputs:
        t = g.tensors[out]
        t.shape, t.dtype = found[out]
        known = KNOWN_SHAPES.get(onnx_op(layer))
        if _open(g, out) and known:
            t.shape = known(g, layer) or t.shape
        if _open(g, out):
            raise node_error(layer, f"cannot infer a static shape for '{out}'")


def _ort_pool_shape(g: Graph, layer: Layer) -> tuple[int, ...]:
    """A ceil_mode pool's output shape as onnxruntime computes it.

    onnxruntime drops a last window that starts in the bottom/right padding, which ONNX shape
    inference may keep (H=11, kernel 2, stride 3, pads 1/1: 4 rows, not 5); npucc follows it.
    """
    shape = list(g.tensors[layer.outputs[0]].shape)
    x = g.tensors[layer.inputs[0]].shape
    a = layer.attrs
    spatial = len(x) - 2
    pads = a.get("pads", (0,) * 2 * spatial)
    strides = a.get("strides", (1,) * spatial)
    if a.get("auto_pad", "NOTSET") != "NOTSET" or min(shape) < 0:
        return tuple(shape)
    for i in range(spatial):
        if shape[2 + i] > 1 and (shape[2 + i] - 1) * strides[i] >= x[2 + i] + pads[i]:
            shape[2 + i] -= 1
    return tuple(shape)


def _follow_onnxruntime(g: Graph, layer: Layer) -> None:
    """Fix a ceil_mode pool's output shape; later layers' shapes are then inferred afresh."""
    out = g.tensors[layer.outputs[0]]
    fixed = _ort_pool_shape(g, layer)
    if fixed == out.shape:
        return
    out.shape = fixed
    for t in {t for other in g.layers_after(layer) for t in other.outputs}:
        g.tensors[t].shape = UNKNOWN_SHAPE


def _empty(g: Graph, tensor: str) -> bool:
    """True when `tensor` has a zero-size dimension (it holds no data)."""
    return 0 in g.tensors[tensor].shape


def _empty_value(g: Graph, tensor: str) -> np.ndarray:
    """The (empty) value of a zero-size tensor, of its shape and dtype."""
    t = g.tensors[tensor]
    return np.zeros(t.shape, NUMPY_DTYPES[t.dtype])


def _read_empty_inputs_as_constants(g: Graph) -> None:
    """Make the readers of each zero-size graph input read an empty constant instead."""
    for name in g.inputs:
        if _empty(g, name):
            empty = add_const(g, f"{name}.empty", _empty_value(g, name))
            for layer in g.users(name):
                g.set_inputs(layer, [empty if t == name else t for t in layer.inputs])


def _split_off_empty_outputs(g: Graph, layer: Layer) -> None:
    """Turn the zero-size outputs of `layer` into empty constants (it writes a dummy instead)."""
    outputs = list(layer.outputs)
    for index, out in enumerate(layer.outputs):
        if _empty(g, out):
            t = g.tensors[out]
            outputs[index] = fresh_name(g, f"{out}.empty")
            g.add_tensor(Tensor(outputs[index], t.shape, t.dtype))
            t.data = _empty_value(g, out)
    if outputs != layer.outputs:
        g.set_outputs(layer, outputs)


@dataclass(frozen=True, slots=True)
class FoldConstants(GraphPass):
    """Replace layers computable at compile time by constant tensors."""

    name = "fold-constants"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fold every foldable layer, in order (folding enables later folds)."""
        folded = 0
        _read_empty_inputs_as_constants(ir)
        for layer in list(ir.layers):
            op = onnx_op(layer)
            if op in ("Shape", "Size"):
                values = [_shape_of(ir, layer)]
            elif _same_type_cast(ir, layer):  # a CastLike of a constant to its own type
                data = ir.tensors[layer.inputs[0]].data
                assert data is not None  # NOTE: a constant holds its data
                values = [data]
            elif op and all(not t or ir.is_const(t) for t in layer.inputs):
                values = _evaluate(ir, layer)
            else:
                if any(_open(ir, t) for t in layer.outputs):
                    _infer(ir, layer)
                if op in ("MaxPool", "AveragePool") and layer.attrs.get("ceil_mode", 0):
                    _follow_onnxruntime(ir, layer)
                if not layer.outputs or not all(_empty(ir, t) for t in layer.outputs):
                    _split_off_empty_outputs(ir, layer)
                    continue
                values = [_empty_value(ir, t) for t in layer.outputs]
            ir.remove_layer(layer)
            for name, value in zip(layer.outputs, values, strict=False):
                t = ir.tensors[name]
                t.data, t.shape, t.dtype = value, tuple(value.shape), dtype_name(value.dtype)
            folded += 1
        ctx.stats["fold-constants.folded"] = folded
        return ir
