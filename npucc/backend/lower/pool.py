"""Vector lowerings of pooling: windowed max/avg pools and global pools.

A windowed pool tile covers channels x output rows x output columns of one image: the input
window it reads is copied into a UB buffer pre-filled with the pad value (-inf for max, 0 for
avg), one VReduce over the pattern [c, oh, ow, kh, kw] (overlapping reads) pools it, and an
average is scaled by 1/taps, from a generated per-pixel map where the tap count varies.
A float pool may instead, where that costs less (`_pool_cost`: its busiest pipe's cycles by
target/cost.py's formulas), pool the columns first: kw - 1 vbinary ops over every window row
at the output columns into a UB temporary, then kh - 1 over the output rows. A global
average pool a conv's epilogue computed lowers to nothing, and a max pool whose column pass
it computed pools rows only (npucc.backend.lower.conv_geom: epilogue_pool, epilogue_cols).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npucc.backend.lower.context import (
    LowerContext,
    apply_activation,
    largest,
    lowering,
    split,
    window_extent,
)
from npucc.backend.lower.layout import budget, fill_window, load
from npucc.errors import NpuccError
from npucc.ir.graph import Layer
from npucc.ir.isa import BufRef, Copy, DdrRef, VBinary, VReduce, VUnary
from npucc.target.cost import dma_cycles, vector_cycles

COMBINE = {"maxpool": "max", "avgpool": "add"}  # the vbinary op of a separable pool


@dataclass(frozen=True, slots=True)
class PoolGeom:
    """Shapes and window parameters of one pooling layer."""

    planes: int  # images x channels: the pooled [h, w] planes
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pads: tuple[int, int, int, int]  # top, left, bottom, right

    def rows(self, toh: int) -> int:
        """Padded input rows a band of `toh` output rows reads."""
        return window_extent(toh, self.sh, self.kh, self.dh)

    def cols(self, tow: int) -> int:
        """Padded input columns a band of `tow` output columns reads."""
        return window_extent(tow, self.sw, self.kw, self.dw)


def _geometry(ctx: LowerContext, layer: Layer) -> PoolGeom:
    n, c, h, w = ctx.shape(layer.inputs[0])
    oh, ow = ctx.shape(layer.outputs[0])[2:]
    a = layer.attrs
    kh, kw = a["kernel"]
    sh, sw = a.get("strides", (1, 1))
    dh, dw = a.get("dilations", (1, 1))
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    return PoolGeom(n * c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pads)  # type: ignore[arg-type]


def _taps(out: int, stride: int, pad: int, k: int, dil: int, lo: int, hi: int) -> np.ndarray:
    """Per output index along one axis: how many of its k taps fall in [lo, hi)."""
    pos = np.arange(out)[:, None] * stride - pad + np.arange(k)[None, :] * dil
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


def _divisor(g: PoolGeom, include_pad: bool, ceil_pads: tuple[int, int]) -> np.ndarray:
    """Taps each output pixel averages over: [oh, ow].

    With include_pad the padding counts, except the bottom/right `ceil_pads` of ceil_mode.
    """
    pt, pl, pb, pr = g.pads
    cb, cr = ceil_pads
    lo_h, hi_h, lo_w, hi_w = (
        (-pt, g.h + pb - cb, -pl, g.w + pr - cr) if include_pad else (0, g.h, 0, g.w)
    )
    rows = _taps(g.oh, g.sh, pt, g.kh, g.dh, lo_h, hi_h)
    cols = _taps(g.ow, g.sw, pl, g.kw, g.dw, lo_w, hi_w)
    return np.maximum(np.outer(rows, cols), 1).astype(np.float32)


class _Scale:
    """How an average pool turns window sums into means: one factor, or a per-pixel map."""

    __slots__ = ("factor", "table", "ow")

    def __init__(self, ctx: LowerContext, layer: Layer, g: PoolGeom) -> None:
        include_pad = bool(layer.attrs.get("count_include_pad", 0))
        counts = _divisor(g, include_pad, layer.attrs.get("ceil_pads", (0, 0)))
        self.ow = g.ow
        self.factor = 1.0 / float(counts.flat[0])
        self.table: DdrRef | None = None
        if np.any(counts != counts.flat[0]):
            self.table = ctx.new_const(f"{layer.name}.recip_taps", 1.0 / counts)

    def elems(self, toh: int, tow: int) -> int:
        """UB elements the map slice of a tile takes."""
        return toh * tow if self.table is not None else 0

    def emit(self, ctx: LowerContext, name: str, out: BufRef, tile: tuple[int, ...]) -> None:
        """Scale a [planes, toh, tow] tile of sums starting at output pixel (oh0, ow0)."""
        planes, oh0, toh, ow0, tow = tile
        dims = (planes, toh, tow)
        dense = (toh * tow, tow, 1)
        if self.table is None:
            ctx.builder.emit(VUnary("muls", out, out, dims, dense, dense, (self.factor,)))
            return
        src = self.table.at(oh0 * self.ow + ow0)
        recip = load(ctx, src, (toh, tow), (self.ow, 1), f"{name}.recip")
        ctx.builder.emit(VBinary("mul", out, out, recip, dims, dense, dense, (0, tow, 1)))
        ctx.builder.free(recip)


@lowering("maxpool", "avgpool", onchip=(0,))
def lower_pool(ctx: LowerContext, layer: Layer) -> None:
    """Windowed max or average pool over NCHW, tiled over images, channels, rows and columns
    (nothing when its producer's epilogue pooled it: conv_geom.epilogue_pool)."""
    if layer.name in ctx.pooled:
        return
    g = _geometry(ctx, layer)
    if layer.name in ctx.col_pooled:  # its input: rows of its output's columns
        t, _, b, _ = g.pads
        g = dataclasses.replace(g, w=g.ow, kw=1, sw=1, dw=1, pads=(t, 0, b, 0))
    scale = _Scale(ctx, layer, g) if layer.op == "avgpool" else None
    if "q" in layer.attrs:  # int8: one vreduce mean per window (the frontend's whole windows)
        assert scale is not None and scale.table is None and scale.factor == 1 / (g.kh * g.kw)
        scale = None
    extra = scale.elems if scale is not None else (lambda toh, tow: 0)
    plans: list[tuple[bool, tuple[int, int, int]]] = []
    for sep in (False, True) if "q" not in layer.attrs and g.kh > 1 and g.kw > 1 else (False,):
        tiles = _pool_tiles(ctx, layer, g, extra, sep)
        if tiles is not None:
            plans.append((sep, tiles))
    onchip = (ctx.onchip(layer.inputs[0]) is not None, ctx.onchip(layer.outputs[0]) is not None)
    sep, (tp, toh, tow) = min(plans, key=lambda p: _pool_cost(ctx, g, p[0], p[1], onchip))
    for p0, pl in split(g.planes, tp):
        for oh0, ohl in split(g.oh, toh):
            for ow0, owl in split(g.ow, tow):
                ctx.next_tile()
                _pool_tile(ctx, layer, g, (scale, sep), (p0, pl, oh0, ohl, ow0, owl))


def _pool_cost(
    ctx: LowerContext,
    g: PoolGeom,
    sep: bool,
    tiles: tuple[int, int, int],
    onchip: tuple[bool, bool] = (False, False),
) -> int:
    """Cycles of the busiest pipe of a pool in tiles of (planes, rows, cols), its window pooled
    separably or not: its loads, vector ops and stores, tile by tile (`onchip`: its input, its
    output in L1: loaded L1 -> UB on MTE1, stored UB -> L1 on VECTOR)."""
    t, (tp, toh, tow) = ctx.target, tiles
    load_path = "L1_UB" if onchip[0] else "DDR_UB"
    pipes = [0, 0, 0]
    for (_, pl), (_, ohl), (_, owl) in itertools.product(
        split(g.planes, tp), split(g.oh, toh), split(g.ow, tow)
    ):
        rows, out = g.rows(ohl), pl * ohl * owl
        if sep:
            vec = (g.kw - 1) * vector_cycles(t, pl * rows * owl)
            vec += (g.kh - 1) * vector_cycles(t, out)
        else:
            vec = vector_cycles(t, out * g.kh * g.kw)
        pipes[0] += dma_cycles(t, load_path, pl * rows * g.cols(owl) * t.elem_bytes)
        pipes[1] += vec
        if onchip[1]:
            pipes[1] += dma_cycles(t, "UB_L1", out * t.elem_bytes)
        else:
            pipes[2] += dma_cycles(t, "TIER_DDR", out * t.elem_bytes)
    return max(pipes)


def _pool_tiles(
    ctx: LowerContext,
    layer: Layer,
    g: PoolGeom,
    extra: Callable[[int, int], int],
    sep: bool,
) -> tuple[int, int, int] | None:
    """Planes (image x channel), output rows and columns per tile: whole rows, then planes
    (`sep`: with the separable pool's temporary of window rows x output columns, None when
    even its smallest tile does not fit)."""

    def need(tp: int, toh: int, tow: int) -> int:
        temp = g.rows(toh) * tow if sep else 0
        return tp * (g.rows(toh) * g.cols(tow) + toh * tow + temp) + extra(toh, tow)

    cap = budget(ctx, layer, least=need(1, 1, 1) if not sep else 1)
    if need(1, 1, 1) > cap:
        return None
    tow = largest(lambda v: need(1, 1, v) <= cap, g.ow)
    toh = largest(lambda v: need(1, v, tow) <= cap, g.oh) if tow == g.ow else 1
    tp = largest(lambda v: need(v, toh, tow) <= cap, g.planes) if toh == g.oh else 1
    return tp, toh, tow


def _pool_tile(
    ctx: LowerContext,
    layer: Layer,
    g: PoolGeom,
    how: tuple[_Scale | None, bool],
    tile: tuple[int, int, int, int, int, int],
) -> None:
    """Pool output planes p0.., rows oh0.., columns ow0.. (`how`: the average's scale, and
    whether the window is pooled separably)."""
    scale, sep = how
    p0, pl, oh0, ohl, ow0, owl = tile
    bld = ctx.builder
    rows, cols = g.rows(ohl), g.cols(owl)
    win = bld.alloc("UB", pl * rows * cols, f"{layer.name}.win")
    q = layer.attrs.get("q", ())
    # NOTE: at int8 an average's pad is the input's zero point (0.0) and a max's -inf -128
    pad = -math.inf if layer.op == "maxpool" else (q[1] if q else 0.0)
    x = ctx.ddr(layer.inputs[0]).at(p0 * g.h * g.w)
    band = (oh0 * g.sh - g.pads[0], rows, ow0 * g.sw - g.pads[1], cols)
    fill_window(ctx, (g.h, g.w), win, x, pl, band, pad)
    out = bld.alloc("UB", pl * ohl * owl, f"{layer.name}.out")
    dense = (ohl * owl, owl, 1)
    if sep:
        _pool_separable(ctx, layer, g, (win, rows, cols), (out, pl, ohl, owl))
    else:
        dims = (pl, ohl, owl, g.kh, g.kw)
        src_strides = (rows * cols, g.sh * cols, g.sw, g.dh * cols, g.dw)
        op = "max" if layer.op == "maxpool" else "mean" if q else "sum"
        bld.emit(VReduce(op, out, win, dims, dense, src_strides, 2, q))
    bld.free(win)
    if scale is not None:
        scale.emit(ctx, layer.name, out, (pl, oh0, ohl, ow0, owl))
    apply_activation(ctx, out, pl * ohl * owl, layer.attrs)
    y = ctx.ddr(layer.outputs[0]).at((p0 * g.oh + oh0) * g.ow + ow0)
    bld.emit(Copy(y, out, (pl, ohl, owl), (g.oh * g.ow, g.ow, 1), dense))
    bld.free(out)


def _pool_separable(
    ctx: LowerContext,
    layer: Layer,
    g: PoolGeom,
    window: tuple[BufRef, int, int],
    out: tuple[BufRef, int, int, int],
) -> None:
    """Pool a tile's window (rows x cols per plane) into `out` (planes x ohl x owl): each
    window row's kw taps at the output columns into a temporary, then its kh rows."""
    win, rows, cols = window
    dst, pl, ohl, owl = out
    bld, op = ctx.builder, COMBINE[layer.op]
    temp = bld.alloc("UB", pl * rows * owl, f"{layer.name}.cols")
    dims, tstr = (pl, rows, owl), (rows * owl, owl, 1)
    wstr = (rows * cols, cols, g.sw)
    bld.emit(VBinary(op, temp, win, win.at(g.dw), dims, tstr, wstr, wstr))
    for j in range(2, g.kw):
        bld.emit(VBinary(op, temp, temp, win.at(j * g.dw), dims, tstr, tstr, wstr))
    dims, dense = (pl, ohl, owl), (ohl * owl, owl, 1)
    vstr = (rows * owl, g.sh * owl, 1)
    bld.emit(VBinary(op, dst, temp, temp.at(g.dh * owl), dims, dense, vstr, vstr))
    for i in range(2, g.kh):
        bld.emit(VBinary(op, dst, dst, temp.at(i * g.dh * owl), dims, dense, dense, vstr))
    bld.free(temp)


@lowering("globalavgpool", "globalmaxpool", onchip=(0,))
def lower_global_pool(ctx: LowerContext, layer: Layer) -> None:
    """Reduce each (image, channel) plane: rows of the [n*c, spatial] view, chunked when long
    (nothing when its producer's epilogue pooled it: conv_geom.epilogue_pool)."""
    if layer.name in ctx.pooled:
        return
    n, c, *spatial = ctx.shape(layer.inputs[0])
    planes, size = n * c, math.prod(spatial)
    cap = budget(ctx, layer, least=3)
    tr = max(1, min(planes, cap // (size + 2)))
    chunk = min(size, cap // tr - 2)
    op, combine = ("max", "max") if layer.op == "globalmaxpool" else ("sum", "add")
    q = layer.attrs.get("q", ())
    if q:  # int8: one vreduce mean over each whole plane
        if chunk < size:
            raise NpuccError(f"layer '{layer.name}': an int8 global average of {size} elements "
                             "does not fit UB whole")  # fmt: skip
        op = "mean"
    x, y = ctx.ddr(layer.inputs[0]), ctx.ddr(layer.outputs[0])
    bld = ctx.builder
    for p0, pl in split(planes, tr):
        ctx.next_tile()
        acc = bld.alloc("UB", pl, f"{layer.name}.acc")
        for k0, kl in split(size, chunk):
            part = acc if k0 == 0 else bld.alloc("UB", pl, f"{layer.name}.part")
            xs = load(ctx, x.at(p0 * size + k0), (pl, kl), (size, 1), f"{layer.name}.x")
            bld.emit(VReduce(op, part, xs, (pl, kl), (1,), (kl, 1), 1, q))
            bld.free(xs)
            if part != acc:
                bld.emit(VBinary(combine, acc, acc, part, (pl,), (1,), (1,), (1,)))
                bld.free(part)
        if op == "sum":  # NOTE: not at int8 ("mean")
            bld.emit(VUnary("muls", acc, acc, (pl,), (1,), (1,), (1.0 / size,)))
        apply_activation(ctx, acc, pl, layer.attrs)
        bld.emit(Copy(y.at(p0), acc, (pl,), (1,), (1,)))
        bld.free(acc)
