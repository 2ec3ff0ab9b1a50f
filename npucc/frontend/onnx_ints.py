"""Run-time integer and boolean tensors, held as float32 values (docs/integers.md).

legalize-onnx lowers each layer with its ONNX element types in place (Div and Cast need them),
checks here that the layer's integers stay exact, and holds every integer or boolean tensor
as float32 at the end: run-time ones are retyped f32, constants converted, graph inputs and
outputs keep their type for the host to convert (npucc.ir.dtypes).
"""

from __future__ import annotations

import numpy as np

from npucc.errors import NpuccError
from npucc.frontend.common import node_error, onnx_op
from npucc.frontend.onnx_ops import INTEGER_TYPES, Seq
from npucc.ir.dtypes import EXACT_INT, INDEX_DTYPE, IR_INTS, int_range
from npucc.ir.graph import Graph, Layer

# ops that move, select or order values: they never leave their integer type's range
_SELECTING = (
    "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand",
    "Tile", "Slice", "Gather", "GatherElements", "Concat", "Split", "Pad", "Compress",
    "DepthToSpace", "SpaceToDepth", "Trilu", "CenterCropPad", "Min", "Max", "Clip", "Relu",
    "Where", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK", "Mod", "MaxPool",
    "GlobalMaxPool",
)  # fmt: skip
# ops exact on integers held as float32 while every value stays within +-2**24 (Div and Cast
# truncate; comparisons and logic give booleans)
INTEGER_OPS = frozenset(
    (
        *_SELECTING, "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Sign", "Sum", "CumSum",
        "CumProd", "MatMul", "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1",
        "Cast", "CastLike", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
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
        return op in _SELECTING
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


def hold_as_floats(g: Graph) -> None:
    """Hold every integer and boolean tensor as float32 after legalize-onnx (see module doc).

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
            _check_exact(name, tensor.data)
            tensor.data = tensor.data.astype(np.float32)
        tensor.dtype = "f32"


def _check_exact(name: str, data: np.ndarray) -> None:
    """Refuse an integer constant float32 cannot hold exactly."""
    if data.size and int(np.abs(data.astype(np.int64)).max()) > EXACT_INT:
        raise NpuccError(f"constant '{name}' holds {int(np.abs(data).max())}: npucc computes "
                         f"integers as float32, exact within +-{EXACT_INT}")  # fmt: skip
