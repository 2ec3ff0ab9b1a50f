"""Vector lowerings of ops that reduce along axes: softmax, LRN, reduce and layernorm.

Softmax views its input as [outer, axis, inner] and tiles outer x inner; a tile keeps the whole
axis in UB when it fits (max, subtract, exp, sum, scale), and otherwise streams the axis in
chunks three times (running max, running sum of exp, then the normalised output). LRN views its
input as [n, c, spatial]; a tile holds its channels plus a zero-padded halo so that the window
sum of squares is one overlapping VReduce, or, where `_lrn_cost` says it costs less, a doubling
sum (windows of 2, 4, ... channels, each two of the previous added: 3 adds for a window of 5
instead of 5 lanes of work per output).
"""

from __future__ import annotations

import itertools
import math

from npucc.backend.lower.context import LowerContext, apply_activation, lowering, split
from npucc.backend.lower.layout import (
    Dims,
    boxes,
    broadcast_strides,
    budget,
    coalesce,
    fill_window,
    load,
    offset,
    store,
)
from npucc.ir.graph import Layer, row_major_strides
from npucc.ir.isa import VECTOR_OP_WEIGHT, BufRef, VBinary, VReduce, VSoftmax, VUnary
from npucc.target.cost import dma_cycles, vector_cycles

COMBINE = {"max": "max", "sum": "add"}  # binary op that merges two partial reductions


class _SoftmaxTile:
    """One [outer, axis, inner] tile of a softmax: its DDR views and chunk helpers."""

    __slots__ = ("ctx", "layer", "x", "y", "axis", "inner", "ol", "il")

    def __init__(self, ctx: LowerContext, layer: Layer, view: Dims, tile: Dims) -> None:
        _, self.axis, self.inner = view
        o0, self.ol, i0, self.il = tile
        start = o0 * self.axis * self.inner + i0
        self.ctx, self.layer = ctx, layer
        self.x = ctx.ddr(layer.inputs[0]).at(start)
        self.y = ctx.ddr(layer.outputs[0]).at(start)

    def ddr_pattern(self, al: int) -> tuple[Dims, Dims]:
        """Dims and DDR strides of a chunk of `al` axis positions."""
        return (self.ol, al, self.il), (self.axis * self.inner, self.inner, 1)

    def load(self, a0: int, al: int) -> BufRef:
        """A chunk [ol, al, il] of the input, dense in UB."""
        dims, strides = self.ddr_pattern(al)
        return load(self.ctx, self.x.at(a0 * self.inner), dims, strides, f"{self.layer.name}.x")

    def reduce(self, op: str, acc: BufRef, buf: BufRef, al: int, first: bool) -> None:
        """Reduce a chunk over its axis into `acc` [ol, il] (merged with acc unless first)."""
        bld = self.ctx.builder
        part = acc if first else bld.alloc("UB", self.ol * self.il, f"{self.layer.name}.part")
        dims = (self.ol, self.il, al)
        bld.emit(VReduce(op, part, buf, dims, (self.il, 1), (al * self.il, 1, self.il), 1))
        if not first:
            stat = (self.ol * self.il,)
            bld.emit(VBinary(COMBINE[op], acc, acc, part, stat, (1,), (1,), (1,)))
            bld.free(part)

    def broadcast(self, op: str, buf: BufRef, stat: BufRef, al: int) -> None:
        """buf = buf op stat, with stat [ol, il] broadcast over the chunk's axis."""
        dims = (self.ol, al, self.il)
        dense = (al * self.il, self.il, 1)
        self.ctx.builder.emit(VBinary(op, buf, buf, stat, dims, dense, dense, (self.il, 0, 1)))

    def exp_shifted(self, buf: BufRef, m: BufRef, al: int) -> None:
        """buf = exp(buf - m)."""
        self.broadcast("sub", buf, m, al)
        n = self.ol * al * self.il
        self.ctx.builder.emit(VUnary("exp", buf, buf, (n,), (1,), (1,)))

    def finish(self, buf: BufRef, recip: BufRef, a0: int, al: int) -> None:
        """Scale a chunk of exps by 1/sum, apply the fused activation, store and free it."""
        self.broadcast("mul", buf, recip, al)
        apply_activation(self.ctx, buf, self.ol * al * self.il, self.layer.attrs)
        dims, strides = self.ddr_pattern(al)
        store(self.ctx, self.y.at(a0 * self.inner), buf, dims, strides)
        self.ctx.builder.free(buf)


@lowering("softmax", onchip=None)
def lower_softmax(ctx: LowerContext, layer: Layer) -> None:
    """Softmax over one axis, tiled over the outer and inner extents (and the axis if long)."""
    shape = ctx.shape(layer.inputs[0])
    axis = layer.attrs["axis"]
    view = (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :]))
    if "q" in layer.attrs:
        _softmax_int8(ctx, layer, view)
        return
    to, ta, ti = _softmax_tiles(ctx, layer, view)
    for o0, ol in split(view[0], to):
        for i0, il in split(view[2], ti):
            ctx.next_tile()
            tile = _SoftmaxTile(ctx, layer, view, (o0, ol, i0, il))
            (_softmax_resident if ta == view[1] else _softmax_streamed)(tile, ta)


def _softmax_int8(ctx: LowerContext, layer: Layer, view: Dims) -> None:
    """int8 softmax over the last axis: rows of the axis in UB, one vsoftmax per tile."""
    rows, axis, inner = view
    assert inner == 1  # NOTE: the frontend's int8 softmax is over the last axis
    cap = budget(ctx, layer, least=axis)
    x, y = ctx.ddr(layer.inputs[0]), ctx.ddr(layer.outputs[0])
    for r0, rl in split(rows, cap // axis):
        ctx.next_tile()
        buf = load(ctx, x.at(r0 * axis), (rl, axis), (axis, 1), f"{layer.name}.x")
        ctx.builder.emit(VSoftmax(buf, buf, rl, axis, layer.attrs["q"]))
        store(ctx, y.at(r0 * axis), buf, (rl, axis), (axis, 1))
        ctx.builder.free(buf)


def _softmax_tiles(ctx: LowerContext, layer: Layer, view: Dims) -> tuple[int, int, int]:
    """(outer, axis, inner) extents of a tile: the whole axis when it fits with 3 stat rows."""
    outer, axis, inner = view
    cap = budget(ctx, layer, least=4)
    if inner * (axis + 3) <= cap:
        return min(outer, cap // (inner * (axis + 3))), axis, inner
    if axis + 3 <= cap:
        return 1, axis, cap // (axis + 3)
    return 1, cap - 3, 1


def _softmax_resident(tile: _SoftmaxTile, axis: int) -> None:
    """Softmax of a tile whose whole axis sits in UB."""
    bld = tile.ctx.builder
    stat = tile.ol * tile.il
    m = bld.alloc("UB", stat, f"{tile.layer.name}.max")
    s = bld.alloc("UB", stat, f"{tile.layer.name}.sum")
    buf = tile.load(0, axis)
    tile.reduce("max", m, buf, axis, True)
    tile.exp_shifted(buf, m, axis)
    tile.reduce("sum", s, buf, axis, True)
    bld.emit(VUnary("recip", s, s, (stat,), (1,), (1,)))
    tile.finish(buf, s, 0, axis)
    bld.free(m)
    bld.free(s)


def _softmax_streamed(tile: _SoftmaxTile, ta: int) -> None:
    """Softmax of a tile whose axis is streamed in chunks of `ta`: max, sum of exp, output."""
    bld = tile.ctx.builder
    stat = tile.ol * tile.il
    chunks = split(tile.axis, ta)
    m = bld.alloc("UB", stat, f"{tile.layer.name}.max")
    s = bld.alloc("UB", stat, f"{tile.layer.name}.sum")
    for a0, al in chunks:
        buf = tile.load(a0, al)
        tile.reduce("max", m, buf, al, a0 == 0)
        bld.free(buf)
    for a0, al in chunks:
        buf = tile.load(a0, al)
        tile.exp_shifted(buf, m, al)
        tile.reduce("sum", s, buf, al, a0 == 0)
        bld.free(buf)
    bld.emit(VUnary("recip", s, s, (stat,), (1,), (1,)))
    for a0, al in chunks:
        buf = tile.load(a0, al)
        tile.exp_shifted(buf, m, al)
        tile.finish(buf, s, a0, al)
    bld.free(m)
    bld.free(s)


@lowering("lrn", onchip=None)
def lower_lrn(ctx: LowerContext, layer: Layer) -> None:
    """ONNX LRN across channels: y = x * (bias + alpha/size * window_sum(x^2)) ** -beta."""
    shape = ctx.shape(layer.inputs[0])
    n, c, plane = shape[0], shape[1], math.prod(shape[2:])
    size = int(layer.attrs["size"])
    plans: list[tuple[bool, tuple[int, int]]] = []
    for doubling in (False, True) if size > 1 else (False,):
        # the window summed by doubling keeps its intermediate windows in UB
        tiles = _lrn_tiles(
            ctx, layer, (c, plane, size), len(_doublings(size)) - 2 if doubling else 0
        )
        if tiles is not None:
            plans.append((doubling, tiles))
    doubling, (tc, ts) = min(plans, key=lambda p: _lrn_cost(ctx, (c, plane, size), *p))
    for b in range(n):
        for c0, cl in split(c, tc):
            for s0, sl in split(plane, ts):
                ctx.next_tile()
                _lrn_tile(ctx, layer, (c, plane, size), b, (c0, cl, s0, sl), doubling)


def _lrn_tiles(ctx: LowerContext, layer: Layer, view: Dims, temps: int) -> tuple[int, int] | None:
    """Channels and spatial positions per tile: all channels when a column of them fits
    (`temps`: intermediate windows of the doubling sum, each at most a padded column; None
    when one channel at one position does not fit with them)."""
    c, plane, size = view
    halo = size - 1
    cap = budget(ctx, layer, least=3 + 2 * halo)  # one channel at one position

    def per_position(tc: int) -> int:
        return 3 * tc + 2 * halo + temps * (tc + halo)  # padded input, squares, result, temps

    if per_position(c) <= cap:
        return c, min(plane, cap // per_position(c))
    ts = min(plane, 64)
    tc = (cap // ts - (2 + temps) * halo) // (3 + temps)
    if tc < 1:
        ts, tc = 1, (cap - (2 + temps) * halo) // (3 + temps)
    return (tc, ts) if tc >= 1 else None


def _lrn_cost(ctx: LowerContext, view: Dims, doubling: bool, tiles: tuple[int, int]) -> int:
    """Cycles of the busiest pipe (loads, vector ops, stores) of an LRN in tiles of (channels,
    positions), its window summed by doubling or by one vreduce (target/cost.py's formulas)."""
    c, plane, size = view
    t, (tc, ts) = ctx.target, tiles
    pipes = [0, 0, 0]
    for (_, cl), (_, sl) in itertools.product(split(c, tc), split(plane, ts)):
        rows = cl + size - 1
        vec = vector_cycles(t, rows * sl) + 3 * vector_cycles(t, cl * sl)
        vec += vector_cycles(t, cl * sl, VECTOR_OP_WEIGHT["pows"])
        if doubling:
            lengths = _window_lengths(size, cl)
            vec += sum(vector_cycles(t, lengths[p] * sl) for p in _doublings(size)[1:])
            vec += sum(vector_cycles(t, cl * sl) for _ in _window_terms(size)[1:])
        else:
            vec += vector_cycles(t, cl * sl * size)
        pipes[0] += dma_cycles(t, "DDR_UB", rows * sl * t.elem_bytes)
        pipes[1] += vec
        pipes[2] += dma_cycles(t, "TIER_DDR", cl * sl * t.elem_bytes)
    return max(pipes)


def _doublings(size: int) -> list[int]:
    """The window widths a doubling sum builds: 1, 2, 4, ... up to the largest <= size."""
    return [1 << i for i in range(size.bit_length())]


def _window_terms(size: int) -> list[tuple[int, int]]:
    """(width, channel offset) of the power-of-two windows that add up to one of `size`,
    widest first."""
    terms, off = [], 0
    for width in reversed(_doublings(size)):
        if size & width:
            terms.append((width, off))
            off += width
    return terms


def _window_lengths(size: int, cl: int) -> dict[int, int]:
    """Channels of each doubling window a tile of `cl` output channels needs: what its terms
    read and what the next width reads (width w at c and c + w)."""
    offsets = dict(_window_terms(size))
    widths = _doublings(size)
    lengths = {widths[-1]: cl + offsets.get(widths[-1], 0)}
    for width in reversed(widths[:-1]):
        need = lengths[2 * width] + width
        lengths[width] = max(need, cl + offsets[width]) if width in offsets else need
    return lengths


def _window_sum(ctx: LowerContext, layer: Layer, sq: BufRef, acc: BufRef, tile: Dims) -> None:
    """acc[c] = sum of sq[c .. c + size) over the tile's channels by doubling: windows of 2, 4,
    ... channels, each the sum of two of the previous at `width` apart, the widest written to
    acc, then the narrower terms of size added to it."""
    cl, sl, size = tile
    bld = ctx.builder
    lengths = _window_lengths(size, cl)
    widths = _doublings(size)
    built = {1: sq}
    for width in widths[:-1]:
        wide = 2 * width
        dst = acc if wide == widths[-1] else bld.alloc("UB", lengths[wide] * sl, f"{layer.name}.w")
        src = built[width]
        n = (lengths[wide] * sl,)
        bld.emit(VBinary("add", dst, src, src.at(width * sl), n, (1,), (1,), (1,)))
        built[wide] = dst
    for width, off in _window_terms(size)[1:]:
        n = (cl * sl,)
        bld.emit(VBinary("add", acc, acc, built[width].at(off * sl), n, (1,), (1,), (1,)))
    for width in widths[1:-1]:
        bld.free(built[width])


def _lrn_tile(
    ctx: LowerContext,
    layer: Layer,
    view: Dims,
    b: int,
    tile: tuple[int, int, int, int],
    doubling: bool,
) -> None:
    """LRN of channels c0..c0+cl at spatial positions s0..s0+sl of image b (`doubling`: the
    window sum by `_window_sum`, else one vreduce)."""
    c, plane, size = view
    c0, cl, s0, sl = tile
    a = layer.attrs
    bld = ctx.builder
    before = (size - 1) // 2
    rows = cl + size - 1
    xpad = bld.alloc("UB", rows * sl, f"{layer.name}.x")
    _load_halo(ctx, layer, xpad, (c, plane, size), b, tile)
    sq = bld.alloc("UB", rows * sl, f"{layer.name}.sq")
    bld.emit(VUnary("square", sq, xpad, (rows * sl,), (1,), (1,)))
    acc = bld.alloc("UB", cl * sl, f"{layer.name}.y")
    if doubling:
        _window_sum(ctx, layer, sq, acc, (cl, sl, size))
    else:
        bld.emit(VReduce("sum", acc, sq, (cl, sl, size), (sl, 1), (sl, 1, sl), 1))
    bld.free(sq)
    n = (cl * sl,)
    bld.emit(VUnary("muls", acc, acc, n, (1,), (1,), (float(a["alpha"]) / size,)))
    bld.emit(VUnary("adds", acc, acc, n, (1,), (1,), (float(a.get("bias", 1.0)),)))
    bld.emit(VUnary("pows", acc, acc, n, (1,), (1,), (-float(a["beta"]),)))
    bld.emit(VBinary("mul", acc, acc, xpad.at(before * sl), n, (1,), (1,), (1,)))
    bld.free(xpad)
    apply_activation(ctx, acc, cl * sl, a)
    y = ctx.ddr(layer.outputs[0]).at((b * c + c0) * plane + s0)
    store(ctx, y, acc, (cl, sl), (plane, 1))
    bld.free(acc)


def _load_halo(
    ctx: LowerContext, layer: Layer, xpad: BufRef, view: Dims, b: int, tile: tuple[int, ...]
) -> None:
    """Load channels c0-before .. c0+cl+after of the tile into xpad, zeros outside [0, c)
    (`fill_window` over image b's [c, plane] view: only the halo rows are filled)."""
    c, plane, size = view
    c0, cl, s0, sl = tile
    x = ctx.ddr(layer.inputs[0]).at(b * c * plane)
    fill_window(ctx, (c, plane), xpad, x, 1, (c0 - (size - 1) // 2, cl + size - 1, s0, sl), 0.0)


REDUCE_COMBINE = {"max": "max", "min": "min", "sum": "add", "mean": "add", "prod": "mul"}


@lowering("reduce", onchip=None)
def lower_reduce(ctx: LowerContext, layer: Layer) -> None:
    """Reduce (sum, mean, max, min, prod) over `axes`: tiles of kept positions x reduced chunks."""
    x, y = layer.inputs[0], layer.outputs[0]
    shape = ctx.shape(x)
    axes = set(layer.attrs["axes"])
    op = layer.attrs["op"]
    strides = row_major_strides(shape)
    kept = [k for k in range(len(shape)) if k not in axes]
    kdims, (kstr, ostr) = coalesce(
        tuple(shape[k] for k in kept) or (1,),
        tuple(strides[k] for k in kept) or (0,),
        row_major_strides(tuple(shape[k] for k in kept)) or (1,),
    )
    rdims, (rstr,) = coalesce(
        tuple(shape[k] for k in sorted(axes)), tuple(strides[k] for k in sorted(axes))
    )
    cap = budget(ctx, layer, least=3)  # one kept position: accumulator, chunk, partial
    red_boxes = boxes(rdims, max(1, cap // 4))
    chunk = max(math.prod(sizes) for _, sizes in red_boxes)
    bld = ctx.builder
    total = math.prod(rdims)
    for kstarts, ksizes in boxes(kdims, max(1, cap // (chunk + 2))):
        rows = math.prod(ksizes)
        ctx.next_tile()
        acc = bld.alloc("UB", rows, f"{layer.name}.acc")
        base = ctx.ddr(x).at(offset(kstarts, kstr))
        for index, (rstarts, rsizes) in enumerate(red_boxes):
            dims = (*ksizes, *rsizes)
            buf = load(ctx, base.at(offset(rstarts, rstr)), dims, (*kstr, *rstr), f"{layer.name}.x")
            part = acc if index == 0 else bld.alloc("UB", rows, f"{layer.name}.part")
            red = "sum" if op == "mean" else op
            dense = row_major_strides(dims)
            bld.emit(VReduce(red, part, buf, dims, row_major_strides(ksizes), dense, len(rsizes)))
            bld.free(buf)
            if index:
                bld.emit(VBinary(REDUCE_COMBINE[op], acc, acc, part, (rows,), (1,), (1,), (1,)))
                bld.free(part)
        if op == "mean":
            bld.emit(VUnary("muls", acc, acc, (rows,), (1,), (1,), (1.0 / total,)))
        apply_activation(ctx, acc, rows, layer.attrs)
        store(ctx, ctx.ddr(y).at(offset(kstarts, ostr)), acc, ksizes, ostr)
        bld.free(acc)


@lowering("layernorm", onchip=None)
def lower_layernorm(ctx: LowerContext, layer: Layer) -> None:
    """y = (x - mean) / sqrt(var + eps) * scale + bias over the dims from `axis`, row tiles."""
    x, scale, bias = (layer.inputs + ["", ""])[:3]
    y = layer.outputs[0]
    shape = ctx.shape(x)
    axis = layer.attrs["axis"]
    eps = float(layer.attrs["epsilon"])
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis:])
    bld = ctx.builder
    n_params = sum(1 for name in (scale, bias) if name)
    cap = budget(ctx, layer, least=inner * (2 + n_params) + 2)  # the parameters and one row
    params: list[BufRef | None] = []  # scale, bias (None: absent)
    for name in (scale, bias):
        if not name:
            params.append(None)
            continue
        st = broadcast_strides(ctx.shape(name), shape[axis:])
        params.append(load(ctx, ctx.ddr(name), shape[axis:], st, f"{layer.name}.param"))
    room = cap - inner * sum(p is not None for p in params)
    rows = min(outer, room // (2 * inner + 2))
    for r0, rl in split(outer, rows):
        n = rl * inner
        buf = load(ctx, ctx.ddr(x).at(r0 * inner), (n,), (1,), f"{layer.name}.x")
        sq = bld.alloc("UB", n, f"{layer.name}.sq")
        mean = bld.alloc("UB", rl, f"{layer.name}.mean")
        rstd = bld.alloc("UB", rl, f"{layer.name}.rstd")
        mat, row, bcast = (rl, inner), (inner, 1), (1, 0)
        bld.emit(VReduce("sum", mean, buf, mat, (1,), row, 1))
        bld.emit(VUnary("muls", mean, mean, (rl,), (1,), (1,), (1.0 / inner,)))
        bld.emit(VBinary("sub", buf, buf, mean, mat, row, row, bcast))
        bld.emit(VUnary("square", sq, buf, (n,), (1,), (1,)))
        bld.emit(VReduce("sum", rstd, sq, mat, (1,), row, 1))
        bld.free(sq)
        bld.emit(VUnary("muls", rstd, rstd, (rl,), (1,), (1,), (1.0 / inner,)))
        bld.emit(VUnary("adds", rstd, rstd, (rl,), (1,), (1,), (eps,)))
        bld.emit(VUnary("sqrt", rstd, rstd, (rl,), (1,), (1,)))
        bld.emit(VUnary("recip", rstd, rstd, (rl,), (1,), (1,)))
        bld.emit(VBinary("mul", buf, buf, rstd, mat, row, row, bcast))
        for p, op in zip(params, ("mul", "add"), strict=True):
            if p is not None:
                bld.emit(VBinary(op, buf, buf, p, mat, row, row, (0, 1)))
        apply_activation(ctx, buf, n, layer.attrs)
        store(ctx, ctx.ddr(y).at(r0 * inner), buf, (n,), (1,))
        for b in (buf, mean, rstd):
            bld.free(b)
    for p in params:
        if p is not None:
            bld.free(p)
