"""Layout lowerings (concat, transpose) and the access-pattern helpers the vector lowerings share.

Layout ops move data without computing on it: each tile is DMA'd DDR -> L1 with one pattern and
L1 -> DDR with another, so a permutation or an offset costs nothing beyond the two copies.
"""

from __future__ import annotations

import functools
import itertools
import math

from npucc.backend.lower.context import TILE_SHARE, LowerContext, lowering, split
from npucc.ir.graph import Layer, row_major_strides
from npucc.ir.isa import BufRef, Copy, DdrRef, Instr, VFill

MAX_TILE_BUFFERS = 4  # most buffers a vector tile keeps live at once (softmax: x, max, sum, part)
STAGE_TIER = "L1"  # where layout ops stage their tiles (keeps UB free for vector work)

Dims = tuple[int, ...]
Box = tuple[Dims, Dims]  # (starts, sizes) of a row-major tile


def budget(ctx: LowerContext, layer: Layer, tier: str = "UB", least: int = 1) -> int:
    """Elements one tile of `layer` may hold in `tier` (all its live buffers together).

    The share (1/TILE_SHARE of the tier) is reduced by the alignment padding of
    MAX_TILE_BUFFERS buffers, so that rounded buffer sizes still stay within it. A share below
    `least` elements (the layer's smallest tile) refuses the layer, naming the capacity that
    would give `least`.
    """
    eb = ctx.target.tier_bytes(tier)
    slack = MAX_TILE_BUFFERS * ctx.target.memory.alignment // eb
    share = ctx.capacity(tier) // TILE_SHARE - slack
    if share < least:
        raise ctx.fit_error(layer, tier, TILE_SHARE * (least + slack) * eb)
    return share


def coalesce(dims: Dims, *strides: Dims) -> tuple[Dims, list[Dims]]:
    """Drop unit dims and merge neighbours that every stride list walks as one dim (worked out
    once per pattern: the lowerings ask for the same few patterns band after band)."""
    out_dims, out_strides = _coalesced(dims, strides)
    return out_dims, list(out_strides)


COALESCED_KEPT = 1 << 14  # patterns `coalesce` keeps


@functools.lru_cache(maxsize=COALESCED_KEPT)
def _coalesced(dims: Dims, strides: tuple[Dims, ...]) -> tuple[Dims, tuple[Dims, ...]]:
    """`coalesce`'s dims and strides, computed."""
    out_dims: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for k, d in enumerate(dims):
        if d == 1:
            continue
        if out_dims and all(s[-1] == st[k] * d for s, st in zip(out_strides, strides, strict=True)):
            out_dims[-1] *= d
            for s, st in zip(out_strides, strides, strict=True):
                s[-1] = st[k]
        else:
            out_dims.append(d)
            for s, st in zip(out_strides, strides, strict=True):
                s.append(st[k])
    if not out_dims:
        return (1,), tuple((1,) for _ in strides)
    return tuple(out_dims), tuple(tuple(s) for s in out_strides)


def boxes(dims: Dims, cap: int) -> list[Box]:
    """Row-major tiles covering `dims` exactly, each of at most `cap` elements (cap >= 1)."""
    k = len(dims) - 1
    inner = 1
    while k > 0 and inner * dims[k] <= cap:
        inner *= dims[k]
        k -= 1
    chunk = max(1, min(dims[k], cap // inner))
    tail = dims[k + 1 :]
    out: list[Box] = []
    for head in itertools.product(*(range(d) for d in dims[:k])):
        for c0, cl in split(dims[k], chunk):
            out.append(((*head, c0, *(0,) * len(tail)), ((1,) * k + (cl, *tail))))
    return out


def offset(starts: Dims, strides: Dims) -> int:
    """Element offset of index `starts` under `strides`."""
    return sum(i * s for i, s in zip(starts, strides, strict=True))


def broadcast_strides(shape: Dims, out_shape: Dims) -> Dims:
    """Strides that read a row-major `shape` as numpy-broadcast to `out_shape` (0 = broadcast)."""
    pad = len(out_shape) - len(shape)
    full = (1,) * pad + tuple(shape)
    strides = (0,) * pad + row_major_strides(tuple(shape))
    return tuple(
        0 if d == 1 and o != 1 else s for d, o, s in zip(full, out_shape, strides, strict=True)
    )


def move(
    ctx: LowerContext,
    layer: Layer,
    src: DdrRef,
    dst: DdrRef,
    dims: Dims,
    src_strides: Dims,
    dst_strides: Dims,
) -> None:
    """Copy a strided DDR region to another through STAGE_TIER (UB when either side is a
    resident L1 buffer: L1 -> L1 has no data path), tile by tile."""
    dims, (ss, ds) = coalesce(dims, src_strides, dst_strides)
    bld = ctx.builder
    onchip = bld.resident(src.key) is not None or bld.resident(dst.key) is not None
    tier = "UB" if onchip else STAGE_TIER
    for starts, sizes in boxes(dims, budget(ctx, layer, tier)):
        ctx.next_tile()
        buf = bld.alloc(tier, math.prod(sizes), f"{layer.name}.tile")
        dense = row_major_strides(sizes)
        bld.emit(Copy(buf, src.at(offset(starts, ss)), sizes, dense, ss))
        bld.emit(Copy(dst.at(offset(starts, ds)), buf, sizes, ds, dense))
        bld.free(buf)


def load(ctx: LowerContext, src: DdrRef, dims: Dims, strides: Dims, name: str) -> BufRef:
    """A new UB buffer holding the DDR pattern (dims, strides) densely, row-major."""
    buf = ctx.builder.alloc("UB", math.prod(dims), name)
    ctx.builder.emit(Copy(buf, src, dims, row_major_strides(dims), strides))
    return buf


def store(ctx: LowerContext, dst: DdrRef, buf: BufRef, dims: Dims, strides: Dims) -> None:
    """Write a dense row-major UB tile to the DDR pattern (dims, strides)."""
    ctx.builder.emit(Copy(dst, buf, dims, strides, row_major_strides(dims)))


def fill_window(
    ctx: LowerContext,
    plane: tuple[int, int],
    win: BufRef,
    x: DdrRef,
    planes: int,
    band: tuple[int, int, int, int],
    pad: float,
    defer: list[Instr] | None = None,
) -> None:
    """Fill `win` [planes, rows, cols] with the [h, w] input planes starting at `x`, padded
    (the border fills appended to `defer` when given, for the caller to emit later).

    `band` is (r0, rows, q0, cols) in input coordinates; positions outside the image get `pad`.
    NOTE: the copy comes first and the border fills after it (they write disjoint parts of
    `win`): the DMA then waits for no vector instruction, only the fills and the window's
    readers, which are on the vector pipe anyway, wait for the DMA.
    """
    r0, rows, q0, cols = band
    h, w = plane
    top, bottom = max(r0, 0), min(r0 + rows, h)
    left, right = max(q0, 0), min(q0 + cols, w)
    fill = ctx.builder.emit if defer is None else defer.append
    if not (top < bottom and left < right):
        fill(VFill(win, (planes * rows * cols,), (1,), pad))
        return
    dst = win.at((top - r0) * cols + left - q0)
    inner = (planes, bottom - top, right - left)
    ctx.builder.emit(Copy(dst, x.at(top * w + left), inner, (rows * cols, cols, 1), (h * w, w, 1)))
    # only the border the copy leaves: rows above and below, columns left and right
    t, b, lft, rgt = top - r0, r0 + rows - bottom, left - q0, q0 + cols - right
    mid = bottom - top
    for row, nrows, col, ncols in (
        (0, t, 0, cols),
        (rows - b, b, 0, cols),
        (t, mid, 0, lft),
        (t, mid, cols - rgt, rgt),
    ):
        if nrows and ncols:
            dims, (st,) = coalesce((planes, nrows, ncols), (rows * cols, cols, 1))
            fill(VFill(win.at(row * cols + col), dims, st, pad))


@lowering("concat", onchip=None)
def lower_concat(ctx: LowerContext, layer: Layer) -> None:
    """Copy each input's block to its offset along `axis` of the output."""
    out = layer.outputs[0]
    shape = ctx.shape(out)
    axis = layer.attrs["axis"]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    row = shape[axis] * inner
    at = 0
    for name in layer.inputs:
        width = ctx.shape(name)[axis] * inner
        dst = ctx.ddr(out).at(at)
        move(ctx, layer, ctx.ddr(name), dst, (outer, width), (width, 1), (row, 1))
        at += width


@lowering("transpose", onchip=None)
def lower_transpose(ctx: LowerContext, layer: Layer) -> None:
    """Gather the input through permuted strides into the row-major output."""
    src = layer.inputs[0]
    perm = layer.attrs["perm"]
    in_strides = row_major_strides(ctx.shape(src))
    shape = ctx.shape(layer.outputs[0])
    strides = tuple(in_strides[p] for p in perm)
    dst = ctx.ddr(layer.outputs[0])
    move(ctx, layer, ctx.ddr(src), dst, shape, strides, row_major_strides(shape))
