"""Cube lowering of conv2d: input tiles in L1, img2col into L0A, weights via L1 into L0B."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.backend.lower.context import (
    LowerContext,
    apply_activation,
    lowering,
    split,
)
from npucc.backend.lower.conv_geom import ConvGeom, conv_geometry
from npucc.backend.lower.depthwise import lower_vector_conv, prefers_vector
from npucc.backend.lower.matmul import choose_tiles
from npucc.ir.graph import Layer
from npucc.ir.isa import BufRef, Copy, DdrRef, Img2Col, Mmad, VBinary


def _pixel_tile(g: ConvGeom, m_t: int) -> tuple[int, int]:
    """Output band (rows, cols) of about m_t pixels: whole rows when a row fits."""
    if m_t >= g.ow:
        return min(g.oh, m_t // g.ow), g.ow
    return 1, m_t


def _window(
    start_out: int, count: int, stride: int, pad: int, extent: int, size: int
) -> tuple[int, int, int]:
    """(first input index loaded, number loaded, img2col pad) for an output band.

    The band reads virtual input indices [start_out*stride - pad, ... + extent); the loaded
    range is clamped to [0, size) and holds at least one index so the tile is never empty.
    """
    first = start_out * stride - pad
    lo = min(max(first, 0), size - 1)
    hi = max(min(first + extent, size), lo + 1)
    return lo, hi - lo, lo - first


@dataclass(frozen=True, slots=True)
class ConvTile:
    """One output tile: batch n, group, output band rows x cols at (r0, q0), channels co0.."""

    n: int
    group: int
    r0: int
    rows: int
    q0: int
    cols: int
    co0: int
    co_t: int


@lowering("conv2d")
def lower_conv2d(ctx: LowerContext, layer: Layer) -> None:
    """Tiled convolution: per output band and output-channel tile, accumulate over channel tiles.

    A low-reuse grouped conv (depthwise) goes to the vector pipe when that costs less.
    """
    if prefers_vector(ctx, layer, lower_cube_conv):
        lower_vector_conv(ctx, layer)
        return
    lower_cube_conv(ctx, layer)


def lower_cube_conv(ctx: LowerContext, layer: Layer) -> None:
    """The cube lowering of conv2d (img2col + mmad), whatever the groups."""
    g = conv_geometry(ctx, layer)
    taps = g.kh * g.kw

    def l1_buffers(mt: int, nt: int, kt: int) -> tuple[int, int]:
        rows, cols = _pixel_tile(g, mt)
        return (kt // taps) * g.in_rows(rows) * g.in_cols(cols), kt * nt

    tiles = choose_tiles(ctx, layer, g.oh * g.ow, g.cog, g.cg * taps, l1_buffers, k_quantum=taps)
    rows_t, cols_t = _pixel_tile(g, tiles.m)
    for n in range(g.n):
        for grp in range(g.group):
            for r0, rows in split(g.oh, rows_t):
                for q0, cols in split(g.ow, cols_t):
                    for co0, co_t in split(g.cog, tiles.n):
                        ctx.next_tile()
                        tile = ConvTile(n, grp, r0, rows, q0, cols, co0, co_t)
                        _lower_tile(ctx, layer, g, tile, tiles.k // taps)


def _lower_tile(ctx: LowerContext, layer: Layer, g: ConvGeom, t: ConvTile, c_t: int) -> None:
    """Accumulate one output tile over input-channel tiles in L0C, then bias, act, store."""
    bld = ctx.builder
    m = t.rows * t.cols
    co_abs = t.group * g.cog + t.co0
    acc = bld.alloc("L0C", m * t.co_t, f"{layer.name}.acc")
    for index, (ci0, cc) in enumerate(split(g.cg, c_t)):
        a0 = _load_patches(ctx, layer, g, t, t.group * g.cg + ci0, cc)
        b0 = _load_weights(ctx, layer, g, co_abs, t.co_t, ci0, cc)
        bld.emit(Mmad(acc, a0, b0, m, t.co_t, cc * g.kh * g.kw, 1 if index else 0))
        bld.free(a0)
        bld.free(b0)
    ub = bld.alloc("UB", m * t.co_t, f"{layer.name}.out")
    bld.emit(Copy(ub, acc, (m * t.co_t,), (1,), (1,)))
    bld.free(acc)
    if len(layer.inputs) > 2 and layer.inputs[2]:
        _add_bias(ctx, ub, ctx.ddr(layer.inputs[2]).at(co_abs), m, t.co_t)
    apply_activation(ctx, ub, m * t.co_t, layer.attrs)
    dst = ctx.ddr(layer.outputs[0]).at(((t.n * g.co + co_abs) * g.oh + t.r0) * g.ow + t.q0)
    pattern = (t.co_t, t.rows, t.cols)
    bld.emit(Copy(dst, ub, pattern, (g.oh * g.ow, g.ow, 1), (1, t.cols * t.co_t, t.co_t)))
    bld.free(ub)


def _load_patches(
    ctx: LowerContext, layer: Layer, g: ConvGeom, t: ConvTile, c_abs: int, cc: int
) -> BufRef:
    """Load the input window of a tile's channels [c_abs, c_abs+cc) to L1, img2col it to L0A."""
    bld = ctx.builder
    ih0, ih, pt = _window(t.r0, t.rows, g.sh, g.pad_t, g.in_rows(t.rows), g.h)
    iw0, iw, pl = _window(t.q0, t.cols, g.sw, g.pad_l, g.in_cols(t.cols), g.w)
    xin = bld.alloc("L1", cc * ih * iw, f"{layer.name}.x")
    src = ctx.ddr(layer.inputs[0]).at(((t.n * g.c + c_abs) * g.h + ih0) * g.w + iw0)
    bld.emit(Copy(xin, src, (cc, ih, iw), (ih * iw, iw, 1), (g.h * g.w, g.w, 1)))
    a0 = bld.alloc("L0A", t.rows * t.cols * cc * g.kh * g.kw, f"{layer.name}.a0")
    window = (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, pt, pl)
    bld.emit(Img2Col(a0, xin, cc, ih, iw, *window, t.rows, t.cols))
    bld.free(xin)
    return a0


def _load_weights(
    ctx: LowerContext, layer: Layer, g: ConvGeom, co_abs: int, co_t: int, ci0: int, cc: int
) -> BufRef:
    """Load W[co_abs.., ci0.., :, :] as a K x N matrix (K = cc*kh*kw) via L1 into L0B."""
    bld = ctx.builder
    taps = g.kh * g.kw
    k_full, kt = g.cg * taps, cc * taps
    wl1 = bld.alloc("L1", kt * co_t, f"{layer.name}.w")
    src = ctx.ddr(layer.inputs[1]).at(co_abs * k_full + ci0 * taps)
    bld.emit(Copy(wl1, src, (kt, co_t), (co_t, 1), (1, k_full)))
    b0 = bld.alloc("L0B", kt * co_t, f"{layer.name}.b0")
    bld.emit(Copy(b0, wl1, (kt * co_t,), (1,), (1,)))
    bld.free(wl1)
    return b0


def _add_bias(ctx: LowerContext, ub: BufRef, bias: DdrRef, m: int, co_t: int) -> None:
    """ub[m, co_t] += bias[co_t] (bias loaded once into UB and broadcast over pixels)."""
    bld = ctx.builder
    b = bld.alloc("UB", co_t, "bias")
    bld.emit(Copy(b, bias, (co_t,), (1,), (1,)))
    bld.emit(VBinary("add", ub, ub, b, (m, co_t), (co_t, 1), (co_t, 1), (0, 1)))
    bld.free(b)
