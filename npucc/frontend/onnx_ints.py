"""Run-time integer and boolean tensors, held as float32 values (docs/integers.md).

legalize-onnx lowers each layer with its ONNX element types in place (Div and Cast need them),
checks here that the layer's integers stay exact, and holds every integer or boolean tensor
as float32 at the end: run-time ones are retyped f32, constants converted, graph inputs and
outputs keep their type for the host to convert (npucc.ir.dtypes).
"""

from __future__ import annotations

import math

import numpy as np

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import node_error, onnx_op
from npucc.frontend.onnx_math import INTEGER_TYPES
from npucc.frontend.onnx_seq import Seq, attr, need_const
from npucc.ir.dtypes import EXACT_INTS, INDEX_DTYPE, IR_INTS, int_range
from npucc.ir.graph import Graph, Layer

# ops that move, select or order values: they never leave their integer type's range
_SELECTING = (
    "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand",
    "Tile", "Slice", "Gather", "GatherElements", "Concat", "Split", "Pad", "Compress",
    "DepthToSpace", "SpaceToDepth", "Trilu", "CenterCropPad", "Min", "Max", "Clip", "Relu",
    "Where", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK", "Mod", "MaxPool",
    "GlobalMaxPool",
)  # fmt: skip
# ops that clip their result to their integer output type's range
_SATURATING = ("QuantizeLinear", "DynamicQuantizeLinear")
# ops exact on integers held as float32 while every value stays within +-2**24 (Div and Cast
# truncate; comparisons and logic give booleans)
INTEGER_OPS = frozenset(
    (
        *_SELECTING, "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sign", "Sum", "CumSum",
        "CumProd", "MatMul", "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1",
        "Cast", "CastLike", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
        *_SATURATING, "DequantizeLinear",
    )
)  # fmt: skip
# types whose overflow onnxruntime would wrap around well within 2**24
WRAPPING = ("i8", "i16", "u8", "u16")


def check_integers(g: Graph, layer: Layer) -> None:
    """Refuse an ONNX layer whose integer tensors npucc cannot compute exactly."""
    op = onnx_op(layer)
    tensors = [t for t in (*layer.inputs, *layer.outputs) if t and not g.is_const(t)]
    for t in tensors:
        if g.tensors[t].dtype in INTEGER_TYPES and op not in INTEGER_OPS:
            raise node_error(layer, f"integer tensor '{t}' ({g.tensors[t].dtype}) is not "
                             "supported by this operator")  # fmt: skip
    for t in layer.outputs:
        dtype = g.tensors[t].dtype if t else ""
        if dtype in WRAPPING and t not in g.outputs and not _in_range(g, layer, dtype):
            raise node_error(layer, f"{dtype} result '{t}' may wrap around (npucc computes "
                             "integers as float32 and checks only graph outputs)")  # fmt: skip


def _in_range(g: Graph, layer: Layer, dtype: str) -> bool:
    """True when `layer` cannot leave the range of its narrow integer output type `dtype`."""
    op = onnx_op(layer)
    if op not in ("Cast", "CastLike"):
        return op in _SELECTING or op in _SATURATING
    src = g.tensors[layer.inputs[0]].dtype
    if src not in IR_INTS:
        return False
    (lo, hi), (want_lo, want_hi) = int_range(IR_INTS[src]), int_range(IR_INTS[dtype])
    return want_lo <= lo and hi <= want_hi


def divide(g: Graph, layer: Layer) -> list[Layer]:
    """Div: float division, or on integers truncated toward zero as (a - fmod(a, b)) / b (exact:
    the numerator is b times the quotient, an integer float32 holds)."""
    a, b = layer.inputs[:2]
    s = Seq(g, layer)
    if g.tensors[s.y].dtype not in INTEGER_TYPES:
        s.add("div", [a, b], s.y)
        return s.done()
    rest = s.add("fmod", [a, b], s.tmp(g.tensors[s.y].shape, "rest"))
    s.add("div", [s.add("sub", [a, rest]), b], s.y)
    return s.done()


# QuantizeLinear's output types (float8, int4, ... are refused on import)
QUANTIZED = ("u8", "i8", "u16", "i16")


def quantize(g: Graph, layer: Layer) -> list[Layer]:
    """QuantizeLinear: clip(round(x / scale) + zero_point) to the output type's range."""
    x, y = layer.inputs[0], layer.outputs[0]
    dtype = g.tensors[y].dtype
    if dtype not in QUANTIZED:
        raise node_error(layer, f"output type {dtype}: npucc quantizes to uint8, int8, uint16 "
                         "and int16")  # fmt: skip
    if g.tensors[x].dtype != "f32" or int(attr(layer, "precision", 0)) not in (0, 1):
        raise node_error(layer, "npucc quantizes float32 inputs, dividing in float32")
    s = Seq(g, layer)
    _saturate(s, x, *_params(s), dtype, s.y)
    return s.done()


def _saturate(s: Seq, x: str, scale: str, zero: str, dtype: str, out: str) -> str:
    """out = clip(round(x / scale) + zero) to the range of `dtype` (round half to even).

    A division, as onnxruntime: a product with 1/scale rounds some values apart. The zero point
    is added even when 0, which turns a -0.0 into 0.0; the clip fuses into that add.
    """
    shape = s.g.tensors[x].shape
    lo, hi = int_range(IR_INTS[dtype])
    q = s.add("round", [s.add("div", [x, scale], s.tmp(shape, "div"))], s.tmp(shape, "round"))
    q = s.add("add", [q, zero], s.tmp(shape, "add"))
    return s.add("clip", [q], out, min=float(lo), max=float(hi))


def dequantize(g: Graph, layer: Layer) -> list[Layer]:
    """DequantizeLinear: (x - zero_point) * scale, the difference exact as in onnxruntime."""
    x, y = layer.inputs[0], layer.outputs[0]
    if g.tensors[x].dtype not in (*QUANTIZED, "i32") or g.tensors[y].dtype != "f32":
        raise node_error(layer, "npucc dequantizes 8-, 16- and 32-bit integers to float32")
    s = Seq(g, layer)
    scale, zero = _params(s)
    zeros = s.g.tensors[zero].data
    if zeros is None or zeros.any():
        x = s.add("sub", [x, zero])
    s.add("mul", [x, scale], s.y)
    return s.done()


def dynamic_quantize(g: Graph, layer: Layer) -> list[Layer]:
    """DynamicQuantizeLinear as onnxruntime: scale (max(x, 0) - min(x, 0)) / 255 (1 when 0),
    zero point round(clip(0 - min(x, 0) / scale, 0, 255)), then a uint8 QuantizeLinear."""
    x, (y, scale_out, zero_out) = layer.inputs[0], layer.outputs
    axes = tuple(range(len(g.tensors[x].shape)))
    s = Seq(g, layer)
    zero = s.const(np.zeros((), np.float32), "zero")
    top = s.add("reduce", [x], s.tmp((), "max"), op="max", axes=axes)
    top = s.add("max", [top, zero], s.tmp((), "top"))
    low = s.add("reduce", [x], s.tmp((), "min"), op="min", axes=axes)
    low = s.add("min", [low, zero], s.tmp((), "low"))
    span = s.add("sub", [top, low], s.tmp((), "span"))
    wide = s.add("div", [span, s.const(np.full((), 255, np.float32), "levels")], s.tmp((), "wide"))
    empty = s.add("eq", [span, zero], s.tmp((), "empty"))
    scale = s.add("where", [empty, s.const(np.ones((), np.float32), "one"), wide], scale_out)
    shift = s.add("div", [low, scale], s.tmp((), "shift"))
    start = s.add("clip", [s.add("sub", [zero, shift], s.tmp((), "start"))], s.tmp((), "clip"),
                  min=0.0, max=255.0)  # fmt: skip
    _saturate(s, x, scale, s.add("round", [start], zero_out), "u8", y)
    return s.done()


def _params(s: Seq) -> tuple[str, str]:
    """A Q/DQ layer's scale and zero point (0 when absent), broadcastable to its input."""
    g, layer = s.g, s.layer
    x, scale, zero = [*layer.inputs, ""][:3]
    if g.tensors[scale].dtype != "f32":
        raise node_error(layer, f"scale is {g.tensors[scale].dtype}; npucc needs float32")
    shape = g.tensors[x].shape
    zero = _param(s, zero, shape) if zero else s.const(np.zeros((), np.float32), "zero_point")
    return _param(s, scale, shape), zero


def _param(s: Seq, name: str, shape: tuple[int, ...]) -> str:
    """Scale or zero point `name` as a tensor broadcastable to the input's `shape`: per tensor,
    per axis (reshaped along it) or blocked (constant, repeated along the axis)."""
    tensor, layer = s.g.tensors[name], s.layer
    axis = int(attr(layer, "axis", 1)) % max(len(shape), 1)
    block = int(attr(layer, "block_size", 0))
    if block:
        data = need_const(s.g, layer, name, "a blocked scale or zero point")
        return s.const(_blocked(layer, data, shape, axis, block), "blocked")
    want = _per_axis(layer, tensor.shape, shape, axis)
    if tensor.data is not None:
        return s.const(tensor.data.reshape(want), "param")
    return name if tensor.shape == want else s.add("reshape", [name], s.tmp(want, "param"))


def _per_axis(
    layer: Layer, have: tuple[int, ...], shape: tuple[int, ...], axis: int
) -> tuple[int, ...]:
    """The broadcastable shape of a per-tensor (one value) or per-axis parameter of shape `have`."""
    if math.prod(have) == 1:
        return ()
    if not shape or have != (shape[axis],):
        raise node_error(layer, f"scale or zero point {list(have)} is not one value per index "
                         f"of axis {axis} of input {list(shape)}")  # fmt: skip
    return tuple(n if i == axis else 1 for i, n in enumerate(shape))


def _blocked(
    layer: Layer, data: np.ndarray, shape: tuple[int, ...], axis: int, block: int
) -> np.ndarray:
    """A blocked parameter repeated `block` times along `axis`, cut to the input's `shape`."""
    want = tuple(-(-n // block) if i == axis else n for i, n in enumerate(shape))
    if data.shape != want:
        raise node_error(layer, f"blocked scale {list(data.shape)} does not match input "
                         f"{list(shape)} with block_size {block} on axis {axis}")  # fmt: skip
    return np.repeat(data, block, axis).take(range(shape[axis]), axis)


def hold_as_floats(g: Graph, storage: str = "f32") -> None:
    """Hold every integer and boolean tensor as float32 after legalize-onnx (see module doc);
    an integer constant must be exact as a `storage` (f32 or f16) value.

    A graph input read only as the indices of indirect takes stays a raw int64 input (i64).
    """
    for name in g.inputs:
        tensor = g.tensors[name]
        users = g.users(name)
        raw = all(x.op == "take" and x.inputs.index(name) == 1 for x in users)
        if tensor.dtype in ("i64", "i32") and users and raw:
            tensor.dtype = INDEX_DTYPE
        elif tensor.dtype in IR_INTS:
            tensor.dtype = IR_INTS[tensor.dtype]
    for name in g.outputs:
        tensor = g.tensors[name]
        tensor.dtype = IR_INTS.get(tensor.dtype, tensor.dtype)
    used = sorted({t for x in g.layers for t in (*x.inputs, *x.outputs) if t})
    for name in used:
        tensor = g.tensors[name]
        if name in g.inputs or name in g.outputs or tensor.dtype not in IR_INTS:
            continue
        if tensor.data is not None:
            _check_exact(name, tensor.data, storage)
            tensor.data = tensor.data.astype(np.float32)
        tensor.dtype = "f32"


def _check_exact(name: str, data: np.ndarray, storage: str) -> None:
    """Refuse an integer constant the `storage` type cannot hold exactly."""
    exact = EXACT_INTS[storage]
    if data.size and int(np.abs(data.astype(np.int64)).max()) > exact:
        kind = {"f32": "float32", "f16": "float16 (at fp16)"}[storage]
        raise NpuccError(f"constant '{name}' holds {int(np.abs(data).max())}: npucc computes "
                         f"integers as {kind}, exact within +-{exact}")  # fmt: skip
