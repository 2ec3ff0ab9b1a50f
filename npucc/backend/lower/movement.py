"""Data-movement lowerings: slice, take (gather along an axis), expand and pad.

Slice, take and expand are strided DMA copies through L1 (see layout.move); pad fills each
output tile in UB with the pad value and copies the input elements it holds into place, which
also inserts the zeros of a transposed convolution (`strides` spreads the input out).
"""

from __future__ import annotations

import math

from npucc.backend.lower.context import LowerContext, lowering
from npucc.backend.lower.layout import Dims, boxes, broadcast_strides, budget, move, offset, store
from npucc.ir.dtypes import INDEX_DTYPE
from npucc.ir.graph import Layer, row_major_strides, runs
from npucc.ir.isa import GATHER_INDEX, Copy, Gather, VFill


@lowering("slice", onchip=None)
def lower_slice(ctx: LowerContext, layer: Layer) -> None:
    """out[i] = x[starts + i * steps] (all steps positive)."""
    x, y = layer.inputs[0], layer.outputs[0]
    in_strides = row_major_strides(ctx.shape(x))
    starts, steps = layer.attrs["starts"], layer.attrs["steps"]
    src = ctx.ddr(x).at(offset(starts, in_strides))
    strides = tuple(s * st for s, st in zip(in_strides, steps, strict=True))
    shape = ctx.shape(y)
    move(ctx, layer, src, ctx.ddr(y), shape, strides, row_major_strides(shape))


@lowering("take")
def lower_take(ctx: LowerContext, layer: Layer) -> None:
    """out = np.take(x, indices, axis): one strided copy per run of evenly spaced indices.

    With a second input (run-time indices) it is an indirect gather instead.
    """
    if len(layer.inputs) > 1:
        lower_take_indirect(ctx, layer)
        return
    x, y = layer.inputs[0], layer.outputs[0]
    shape = ctx.shape(x)
    axis, indices = layer.attrs["axis"], tuple(layer.attrs["indices"])
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    src, dst = ctx.ddr(x), ctx.ddr(y)
    for pos, first, step, length in runs(indices):
        move(
            ctx,
            layer,
            src.at(first * inner),
            dst.at(pos * inner),
            (outer, length, inner),
            (shape[axis] * inner, step * inner, 1),
            (len(indices) * inner, inner, 1),
        )


def lower_take_indirect(ctx: LowerContext, layer: Layer) -> None:
    """out[o, i, ...] = x[o, ids[i], ...]: per outer index and tile of ids, `gather` into UB.

    The dims of x after `axis` form one row; the ids index `axis`: an i64 graph input (two words
    each), or float32 values (computed indices, or an integer input held as float32).
    """
    (x, ids), y = layer.inputs[:2], layer.outputs[0]
    shape, axis = ctx.shape(x), layer.attrs["axis"]
    outer, rows, row = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    n = math.prod(ctx.shape(ids))
    per_tile = budget(ctx, layer, least=row) // row
    bld = ctx.builder
    table, idx, dst = ctx.ddr(x), ctx.ddr(ids), ctx.ddr(y)
    index = INDEX_DTYPE if ctx.graph.tensors[ids].dtype == INDEX_DTYPE else ctx.target.dtype
    words = GATHER_INDEX[index]
    for o in range(outer):
        for start in range(0, n, per_tile):
            count = min(per_tile, n - start)
            ctx.next_tile()
            buf = bld.alloc("UB", count * row, f"{layer.name}.tile")
            src = table.at(o * rows * row)
            bld.emit(Gather(buf, src, idx.at(words * start), count, row, rows, index))
            store(ctx, dst.at((o * n + start) * row), buf, (count * row,), (1,))
            bld.free(buf)


@lowering("expand", "copy", onchip=None)
def lower_expand(ctx: LowerContext, layer: Layer) -> None:
    """Broadcast x to the output shape (numpy rules) with stride-0 reads; copy: same shape."""
    x, y = layer.inputs[0], layer.outputs[0]
    shape = ctx.shape(y)
    strides = broadcast_strides(ctx.shape(x), shape)
    move(ctx, layer, ctx.ddr(x), ctx.ddr(y), shape, strides, row_major_strides(shape))


def _inside(o0: int, ol: int, begin: int, step: int, n: int) -> tuple[int, int]:
    """First input index and count of inputs landing in output range [o0, o0 + ol)."""
    lo = max(0, -((begin - o0) // step))
    hi = min(n - 1, (o0 + ol - 1 - begin) // step)
    return lo, max(0, hi - lo + 1)


@lowering("pad", onchip=None)
def lower_pad(ctx: LowerContext, layer: Layer) -> None:
    """out = value everywhere, with x[i] at begin + i * strides (per dim)."""
    x, y = layer.inputs[0], layer.outputs[0]
    in_shape, shape = ctx.shape(x), ctx.shape(y)
    rank = len(shape)
    begin = layer.attrs["pads"][:rank]
    steps = layer.attrs["strides"]
    value = float(layer.attrs["value"])
    in_strides, out_strides = row_major_strides(in_shape), row_major_strides(shape)
    bld = ctx.builder
    for starts, sizes in boxes(shape, budget(ctx, layer)):
        ctx.next_tile()
        buf = bld.alloc("UB", math.prod(sizes), f"{layer.name}.tile")
        spans = [
            _inside(o0, ol, b, st, n)
            for o0, ol, b, st, n in zip(starts, sizes, begin, steps, in_shape, strict=True)
        ]
        counts: Dims = tuple(c for _, c in spans)
        if counts != tuple(sizes):
            bld.emit(VFill(buf, (math.prod(sizes),), (1,), value))
        if all(counts):
            dense = row_major_strides(sizes)
            at = [
                b + lo * st - o0
                for (lo, _), b, st, o0 in zip(spans, begin, steps, starts, strict=True)
            ]
            dst_strides = tuple(d * st for d, st in zip(dense, steps, strict=True))
            src = ctx.ddr(x).at(offset(tuple(lo for lo, _ in spans), in_strides))
            bld.emit(Copy(buf.at(offset(tuple(at), dense)), src, counts, dst_strides, in_strides))
        store(ctx, ctx.ddr(y).at(offset(starts, out_strides)), buf, sizes, out_strides)
        bld.free(buf)
