"""Vector lowerings of element-wise ops: binary ops and where with numpy broadcasting, unary ops.

A binary op is tiled over its (coalesced) output and reads a broadcast operand through stride-0
patterns: a small one is loaded whole, once for the layer; a large one tile by tile, only the
distinct elements each tile needs.
"""

from __future__ import annotations

import math

from npucc.backend.lower.context import LowerContext, apply_activation, emit_gelu, lowering, split
from npucc.backend.lower.layout import (
    Dims,
    boxes,
    broadcast_strides,
    budget,
    coalesce,
    load,
    offset,
    store,
)
from npucc.ir.graph import Layer, row_major_strides
from npucc.ir.isa import BINARY_OPS, BufRef, DdrRef, VBinary, VUnary

# unary ops lowered one-to-one onto a VUnary without scalars: relu is canonical; the others
# (isa.UNARY_OPS names) are ready for the frontend to map Exp, Sigmoid, Tanh, ... onto
PLAIN_UNARY = (
    "relu", "exp", "neg", "sqrt", "recip", "tanh", "erf", "sigmoid", "abs", "log", "not", "f16",
    "bf16", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
    "floor", "ceil", "round", "sign",
)  # fmt: skip
SCALAR_UNARY = ("muls", "adds", "pows")  # one scalar operand: attrs["scalar"]


def _distinct(starts: Dims, sizes: Dims, strides: Dims) -> tuple[int, Dims, Dims]:
    """DDR offset, dims and strides of the distinct elements an operand has in one tile."""
    keep = [(d, s) for d, s in zip(sizes, strides, strict=True) if s and d > 1]
    dims = tuple(d for d, _ in keep) or (1,)
    return offset(starts, strides), dims, tuple(s for _, s in keep) or (1,)


def _ub_strides(sizes: Dims, strides: Dims) -> Dims:
    """Strides that read an operand's dense UB copy through the tile's full pattern."""
    out = [0] * len(sizes)
    acc = 1
    for k in reversed(range(len(sizes))):
        if strides[k] and sizes[k] > 1:
            out[k] = acc
            acc *= sizes[k]
    return tuple(out)


class _Operand:
    """One input of a binary op: its DDR tensor, broadcast strides and whole UB copy, if any."""

    __slots__ = ("ref", "strides", "whole", "name")

    def __init__(self, ref: DdrRef, strides: Dims, name: str) -> None:
        self.ref = ref
        self.strides = strides  # per coalesced output dim; 0 where broadcast
        self.whole: BufRef | None = None  # the whole tensor, loaded once for every tile
        self.name = name

    def full(self) -> bool:
        """True when the operand is not broadcast anywhere (its tile has the output's layout)."""
        return all(self.strides)

    def fetch(self, ctx: LowerContext, box: tuple[Dims, Dims]) -> tuple[BufRef, Dims]:
        """This operand's data for tile `box` in UB, and its strides under the tile's dims."""
        starts, sizes = box
        if self.whole is not None:
            return self.whole.at(offset(starts, self.strides)), self.strides
        off, dims, strides = _distinct(starts, sizes, self.strides)
        buf = load(ctx, self.ref.at(off), dims, strides, self.name)
        return buf, _ub_strides(sizes, self.strides)


def _operands(ctx: LowerContext, layer: Layer) -> tuple[Dims, Dims, list[_Operand], int]:
    """Coalesced output dims and strides, the inputs as operands, and the per-tile budget.

    A broadcast operand of at most 1/4 of the tile budget is loaded whole, once (its buffer
    comes out of the budget); the caller frees those buffers after the last tile.
    """
    shape = ctx.shape(layer.outputs[0])
    raw = [broadcast_strides(ctx.shape(name), shape) for name in layer.inputs]
    dims, (out_strides, *strides) = coalesce(shape, row_major_strides(shape), *raw)
    ops = [
        _Operand(ctx.ddr(name), st, f"{layer.name}.{tag}")
        for name, st, tag in zip(layer.inputs, strides, "abc", strict=False)
    ]
    share = cap = budget(ctx, layer)
    for o, name in zip(ops, layer.inputs, strict=True):
        elems = math.prod(ctx.shape(name))
        # NOTE: an operand loaded once serves every tile, so only when all run on one core
        if ctx.one_core() and not o.full() and elems <= share // 4:
            o.whole = load(ctx, o.ref, (elems,), (1,), o.name)
            cap -= elems
    return dims, out_strides, ops, cap


def _free_wholes(ctx: LowerContext, ops: list[_Operand]) -> None:
    for buf in dict.fromkeys(o.whole for o in ops if o.whole is not None):
        ctx.builder.free(buf)


# every binary vector op but `mla` (a conv's multiply-accumulate, not a graph op)
@lowering(*(op for op in BINARY_OPS if op != "mla"), onchip=None)
def lower_binary(ctx: LowerContext, layer: Layer) -> None:
    """out = a op b with numpy broadcasting, then the fused activation.

    Broadcast operands are loaded whole or tile by tile (see `_operands`), and the result
    overwrites a non-broadcast operand's tile.
    """
    if math.prod(ctx.shape(layer.outputs[0])) == 0:
        return
    dims, out_strides, ops, cap = _operands(ctx, layer)
    tiled = [o for o in ops if o.whole is None]
    per_tile = len(tiled) + (0 if any(o.full() for o in tiled) else 1)
    for box in boxes(dims, cap // per_tile):
        ctx.next_tile()
        _binary_tile(ctx, layer, ops, box, ctx.ddr(layer.outputs[0]), out_strides)
    _free_wholes(ctx, ops)


def _binary_tile(
    ctx: LowerContext,
    layer: Layer,
    ops: list[_Operand],
    box: tuple[Dims, Dims],
    dst: DdrRef,
    out_strides: Dims,
) -> None:
    """Load the tiled operands of one tile, combine them in UB and store the result."""
    sizes = box[1]
    elems = math.prod(sizes)
    (a, a_st), (b, b_st) = (o.fetch(ctx, box) for o in ops)
    loaded = [buf for o, buf in zip(ops, (a, b), strict=True) if o.whole is None]
    full = [buf for o, buf in zip(ops, (a, b), strict=True) if o.full()]
    res = full[0] if full else ctx.builder.alloc("UB", elems, f"{layer.name}.out")
    dense = row_major_strides(sizes)
    q = layer.attrs.get("q", ())  # int8: dequantize a and b, quantize the sum
    ctx.builder.emit(VBinary(layer.op, res, a, b, sizes, dense, a_st, b_st, q))
    apply_activation(ctx, res, elems, layer.attrs)
    store(ctx, dst.at(offset(box[0], out_strides)), res, sizes, out_strides)
    for buf in dict.fromkeys((res, *loaded)):
        ctx.builder.free(buf)


@lowering("where", onchip=None)
def lower_where(ctx: LowerContext, layer: Layer) -> None:
    """out = x where c != 0, else y (numpy broadcasting): mask(x, c) + maskn(y, c) per tile.

    Exact for every value, inf and NaN included, except that a selected -0.0 becomes +0.0.
    """
    if math.prod(ctx.shape(layer.outputs[0])) == 0:
        return
    dims, out_strides, ops, cap = _operands(ctx, layer)
    c, x, y = ops
    per_tile = sum(o.whole is None for o in ops) + (not x.full()) + (not y.full())
    bld, dst = ctx.builder, ctx.ddr(layer.outputs[0])
    for box in boxes(dims, cap // per_tile):
        ctx.next_tile()
        sizes = box[1]
        elems = math.prod(sizes)
        dense = row_major_strides(sizes)
        (cb, c_st), (xb, x_st), (yb, y_st) = (o.fetch(ctx, box) for o in ops)
        res = xb if x.full() else bld.alloc("UB", elems, f"{layer.name}.out")
        other = yb if y.full() else bld.alloc("UB", elems, f"{layer.name}.else")
        bld.emit(VBinary("mask", res, xb, cb, sizes, dense, x_st, c_st))
        bld.emit(VBinary("maskn", other, yb, cb, sizes, dense, y_st, c_st))
        bld.emit(VBinary("add", res, res, other, sizes, dense, dense, dense))
        apply_activation(ctx, res, elems, layer.attrs)
        store(ctx, dst.at(offset(box[0], out_strides)), res, sizes, out_strides)
        loaded = [buf for o, buf in zip(ops, (cb, xb, yb), strict=True) if o.whole is None]
        for buf in dict.fromkeys((res, other, *loaded)):
            bld.free(buf)
    _free_wholes(ctx, ops)


@lowering("clip", *PLAIN_UNARY, *SCALAR_UNARY, onchip=None)
def lower_unary(ctx: LowerContext, layer: Layer) -> None:
    """out = op(x) over the flattened tensor, in place in UB, then the fused activation."""
    attrs = layer.attrs
    scalars: tuple[float, ...] = ()
    if layer.op == "clip":
        scalars = (float(attrs.get("min", -math.inf)), float(attrs.get("max", math.inf)))
    elif layer.op in SCALAR_UNARY:
        scalars = (float(attrs["scalar"]),)
    total = math.prod(ctx.shape(layer.outputs[0]))
    src, dst = ctx.ddr(layer.inputs[0]), ctx.ddr(layer.outputs[0])
    for start, n in split(total, budget(ctx, layer)):
        ctx.next_tile()
        buf = load(ctx, src.at(start), (n,), (1,), f"{layer.name}.x")
        ctx.builder.emit(VUnary(layer.op, buf, buf, (n,), (1,), (1,), scalars))
        apply_activation(ctx, buf, n, attrs)
        store(ctx, dst.at(start), buf, (n,), (1,))
        ctx.builder.free(buf)


@lowering("gelu", onchip=None)
def lower_gelu(ctx: LowerContext, layer: Layer) -> None:
    """gelu (context.emit_gelu: the erf form or the tanh approximation) on flat UB tiles."""
    total = math.prod(ctx.shape(layer.outputs[0]))
    src, dst = ctx.ddr(layer.inputs[0]), ctx.ddr(layer.outputs[0])
    bld = ctx.builder
    for start, n in split(total, budget(ctx, layer, least=2) // 2):
        ctx.next_tile()
        x = load(ctx, src.at(start), (n,), (1,), f"{layer.name}.x")
        t = bld.alloc("UB", n, f"{layer.name}.t")
        emit_gelu(ctx, t, x, t, n, layer.attrs.get("approximate", "none"))
        apply_activation(ctx, t, n, layer.attrs)
        store(ctx, dst.at(start), t, (n,), (1,))
        bld.free(x)
        bld.free(t)
