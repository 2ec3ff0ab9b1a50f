"""Cube lowering of conv2d: input bands in L1, img2col into L0A, weights via L1 into L0B.

The loop order and the L1 blocks come from `blocking.py`; a residual operand (fuse-residual,
inputs[3]) is added to each output tile before the activation.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from npucc.backend.lower.block_emit import (
    CubeIo,
    L1Block,
    MatOperand,
    OutView,
    emit_blocked,
    emit_staged,
    release,
)
from npucc.backend.lower.blocking import (
    CYCLE_TOLERANCE,
    Blocking,
    Candidates,
    CubeShape,
    MBlock,
    MTile,
    choose_blocking,
)
from npucc.backend.lower.context import (
    LowerContext,
    activation_ops,
    activation_temps,
    flow,
    lowering,
    quant_epilogue,
    split,
)
from npucc.backend.lower.conv_geom import (
    ConvGeom,
    conv_geometry,
    epilogue_cols,
    epilogue_pool,
    second_image,
)
from npucc.backend.lower.depthwise import low_reuse, lower_vector_conv, prefers_vector
from npucc.backend.lower.dwfuse import cube_shares, fused_depthwise, fused_reads, lower_fused
from npucc.backend.lower.l0_tiles import MatTiles, fitting_tiles
from npucc.backend.lower.memo import fresh, layer_signature, once, trial_graph
from npucc.ir.graph import Layer
from npucc.ir.isa import REQUANT_BYTES, BufRef, Copy, Img2Col


def _pixel_tile(g: ConvGeom, m_t: int) -> tuple[int, int]:
    """Output band (rows, cols) of about m_t pixels: whole rows when a row fits."""
    if m_t >= g.ow:
        return min(g.oh, m_t // g.ow), g.ow
    return 1, m_t


def _pixel_counts(ctx: LowerContext, g: ConvGeom) -> list[int] | None:
    """The M tile sizes a conv with taps emits (`_pixel_tile`'s bands): parts of a row (powers
    of two times the cube's m0), then bands of whole rows that split the image evenly (the
    rows of ceil(oh / b) for b bands: the largest tile that fits is a balanced one); None for
    a pointwise conv (the power-of-two candidates).

    NOTE: sized by its pixels, a tap conv's L0A tile holds the K tile its fractal wants (8
    channels x 9 taps beside 2 rows of 55 pixels, not 4); the pointwise convs keep the
    power-of-two sizes, measured: their rows-sized tiles made MobileNet v2 0.7 % slower (its
    depthwise convs wait on them differently), SqueezeNet and Inception v1 no faster.
    """
    if _pointwise(g):
        return None
    m0 = ctx.target.cube.m0
    part = [m0 << i for i in range(max(g.ow // m0, 1).bit_length()) if m0 << i < g.ow]
    return part + sorted({-(-g.oh // b) * g.ow for b in range(1, g.oh + 1)})


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


def _pointwise(g: ConvGeom) -> bool:
    """True for an unpadded 1x1 conv: a band reads exactly its pixels at the conv's strides,
    which one strided DMA loads densely (a strided 1x1 conv skips the pixels between), and
    img2col reads them at stride 1."""
    return g.taps == 1 and g.pad_t == g.pad_l == 0


def _extent(g: ConvGeom, rows: int, cols: int) -> tuple[int, int]:
    """Input rows x cols loaded for a band of rows x cols output pixels."""
    return (rows, cols) if _pointwise(g) else (g.in_rows(rows), g.in_cols(cols))


def _bands(g: ConvGeom, t: MatTiles, count: int) -> list[MBlock]:
    """The L1 blocks of L0 tile `t`: bands of up to `count` tiles of whole rows (one tile when a
    tile is part of a row), each loading one input window that its tiles' img2cols read.

    NOTE: a tile's img2col reads the window from the tile's first row on (its src offset) with
    the window's height as its `h`, so the channel stride is the window's; the rows it reads
    lie inside the window except the zero padding (its `pt` above the window; below it only
    for a block's first tile: a tile that pads the image's bottom starts a block). The block's
    buffer holds `slack` elements more, so that every img2col's src extent lies inside it.
    """
    rows_t, cols_t = _pixel_tile(g, t.m)
    point = _pointwise(g)
    groups: list[list[tuple[int, int]]] = []
    for r0, rows in split(g.oh, rows_t):
        bottom = not point and (r0 * g.sh - g.pad_t + g.in_rows(rows) > g.h)
        if not groups or len(groups[-1]) == count or cols_t < g.ow or bottom:
            groups.append([])
        groups[-1].append((r0, rows))
    out = []
    for group in groups:
        b0, rows_b = group[0][0], sum(n for _, n in group)
        if point:
            ih0, ih = b0, rows_b
        else:
            ih0, ih, _ = _window(b0, rows_b, g.sh, g.pad_t, g.in_rows(rows_b), g.h)
        for q0, cols in split(g.ow, cols_t):
            if point:
                iw0, iw, pl = q0, cols, 0
            else:
                iw0, iw, pl = _window(q0, cols, g.sw, g.pad_l, g.in_cols(cols), g.w)
            tiles = []
            for r0, rows in group:
                first = r0 if point else r0 * g.sh - g.pad_t  # in window rows, like ih0
                off, top = max(first - ih0, 0), max(ih0 - first, 0)
                band = (r0, rows, q0, cols, ih0, ih, top, iw0, iw, pl, off)
                tiles.append(MTile(r0 * g.ow + q0, rows * cols, band))
            out.append(MBlock(tuple(tiles), ih * iw, tiles[-1].band[-1] * iw))
    return out


def _optional(layer: Layer, index: int) -> str:
    """The name of optional input `index` ("" when absent)."""
    return layer.inputs[index] if len(layer.inputs) > index else ""


def neighbours(ctx: LowerContext, layer: Layer) -> Hashable:
    """What conv `layer`'s lowering reads of its neighbours (`lowering`'s `context`): whether
    one is a depthwise conv (`_beside_vector`), the pools its epilogue may compute (`_fusions`)
    and the depthwise conv that may compute its output (`_fuses`: by signature, as its memo).
    NOTE: on a fresh context (a profile's) that is all: `_staggered` finds no write of the
    input on a fresh builder, and what earlier layers decided (`ctx.fused`, `ctx.pooled`,
    `ctx.col_pooled`) is empty."""
    d = fused_depthwise(ctx, layer)
    fusions = _fusions(ctx, layer, conv_geometry(ctx, layer), one_unit=False)
    return (
        _beside_vector(ctx, layer),
        tuple((f.pool, f.cols) for f in fusions),
        None if d is None else layer_signature(ctx, d),
    )


@lowering("conv2d", onchip=(0, 3), context=neighbours)
def lower_conv2d(ctx: LowerContext, layer: Layer) -> None:
    """Tiled convolution: L1 blocks of input bands and weights, L0 tiles inside them.

    A low-reuse grouped conv (depthwise) goes to the vector pipe when that costs less.
    """
    fusion = _fuses(ctx, layer)
    if fusion is not None:  # the depthwise conv reading its output computes it (dwfuse.py)
        ctx.fused[fusion[0].name] = (layer, fusion[1])
        return
    expand = ctx.fused.pop(layer.name, None)
    if expand is not None:
        lower_fused(ctx, expand[0], layer, expand[1])
        return
    _lower_alone(ctx, layer)


def _lower_alone(ctx: LowerContext, layer: Layer) -> None:
    """The conv on the vector unit (a low-reuse grouped conv, when cheaper) or the cube."""
    if "qzp" not in layer.attrs and prefers_vector(ctx, layer, lower_cube_unit):
        lower_vector_conv(ctx, layer)
        return
    lower_cube_conv(ctx, layer)


def _fuses(ctx: LowerContext, layer: Layer) -> tuple[Layer, int] | None:
    """The depthwise conv that computes 1x1 conv `layer`'s output in its windows
    (`dwfuse.fused_depthwise`) when the pair lowered so runs, by `flow`, within
    1/CYCLE_TOLERANCE of each lowered alone or faster (a trial of both on a fresh context, once
    per signature of the pair): the fused pair moves fewer bytes, which win within the
    tolerance as in `choose_blocking`. The fused pair is tried with each share of the
    depthwise's channels on the cube (`dwfuse.cube_shares`), the one of least `flow` kept:
    (the depthwise conv, its channels on the cube)."""
    d = fused_depthwise(ctx, layer)
    if d is None:
        return None
    key = ("dwfuse", layer_signature(ctx, layer), layer_signature(ctx, d), ctx.reserved)
    if key not in ctx.memo:
        alone = fresh(ctx, ctx.graph)
        lower_cube_conv(alone, layer)
        t, program = layer.outputs[0], alone.program
        lo = program.offset(t)
        alone.builder.close_ddr(program.key(t), lo, lo + math.prod(ctx.shape(t)))
        _lower_alone(alone, d)
        best, cube = flow(trial_graph(alone)), -1
        for share in (0, *cube_shares(ctx, d)):
            c = _fused_flow(ctx, layer, d, share)
            tolerance = c * CYCLE_TOLERANCE < best * (CYCLE_TOLERANCE + 1)
            if c < best or (share == 0 and tolerance):
                best, cube = c, share
        ctx.memo[key] = (cube >= 0, max(cube, 0))
    fuses, cube = ctx.memo[key]
    return (d, cube) if fuses else None


def _fused_flow(ctx: LowerContext, layer: Layer, d: Layer, share: int) -> int:
    """The `flow` of 1x1 conv `layer` and depthwise conv `d` lowered fused with `share` of its
    channels on the cube (a trial on a fresh context), once per signature of the pair, share
    and what the lowering reads of L1 (`dwfuse.fused_reads`), whatever the L1 reservation."""
    reads = fused_reads(ctx, layer, d)
    key = (_fused_flow, layer_signature(ctx, layer), layer_signature(ctx, d), share, reads)
    found: int | None = ctx.memo.get(key)
    if found is None:
        fused = fresh(ctx, ctx.graph)
        lower_fused(fused, layer, d, share)
        found = ctx.memo[key] = flow(trial_graph(fused))
    return found


def lower_cube_unit(ctx: LowerContext, layer: Layer) -> None:
    """The cube lowering of the conv's first (image, group) alone (a cost trial's)."""
    lower_cube_conv(ctx, layer, one_unit=True)


def lower_cube_conv(ctx: LowerContext, layer: Layer, one_unit: bool = False) -> None:
    """The cube lowering of conv2d (img2col + mmad), whatever the groups (`one_unit`: only
    the first image's first group); its blocking chosen once per signature (memo.once), with
    the pool after it in its epilogue where `_fusions` allow and the tiles fit."""
    g = conv_geometry(ctx, layer)
    residual = _optional(layer, 3)
    x_onchip = ctx.onchip(layer.inputs[0]) is not None
    r_onchip = bool(residual) and ctx.onchip(residual) is not None
    noc = ctx.on_noc(layer.inputs[0]), ctx.on_noc(layer.inputs[1]), ctx.on_noc(residual)
    planes = (_staggered(ctx, layer, g, x_onchip), _beside_vector(ctx, layer))
    for fused in _fusions(ctx, layer, g, one_unit):
        onchip = (x_onchip, ctx.onchip(fused.out) is not None, r_onchip)
        spec = (fused.pool, fused.cols)
        kept = (noc[0], noc[1], ctx.on_noc(fused.out), noc[2])
        # NOTE: the searches of one key but `kept` share their candidates (`Candidates`);
        # only a mesh plan's profiles make such searches, under each set of operands on chip
        # and none (on one core none share one, so none is kept there: it would only hold
        # memory)
        shares = ctx.target.cores > 1
        key = (Candidates, onchip, one_unit, spec, planes)
        known = once(ctx, layer, key, _no_candidates) if shares else None
        work = partial(
            _blocking, onchip=onchip, one_unit=one_unit, spec=spec, noc=kept, planes=planes,
            known=known,
        )  # fmt: skip
        found = once(ctx, layer, (_blocking, onchip, one_unit, spec, kept, planes), work)
        if found is not None:
            break
    assert found is not None  # the last of _fusions is the plain conv, which always blocks
    # NOTE: `noc` and the layer's neighbours (`planes`, `_fusions`) reach what follows only
    # through `fused` and `found`, and `fused` only through `spec`: its `out` is the conv's
    # output, or with `pool` the global pool's (not an operand of the layer), so the decision
    # names no tensor and layers of one signature share it (a profile reads names only as
    # operand positions, npucc.backend.estimate.profile.operand_positions)
    ctx.decided(("cube_conv", one_unit, spec, found[0], tuple(found[1]), found[2]))
    if fused.pool:
        ctx.pooled.add(ctx.graph.users(layer.outputs[0])[0].name)
    elif fused.cols:
        ctx.col_pooled.add(ctx.graph.users(layer.outputs[0])[0].name)
    plan, blocks, per_unit = found
    if per_unit > 1 and not one_unit:
        _lower_grouped(ctx, layer, g, plan, blocks[0], per_unit, fused)
        return
    k = g.cg * g.taps
    images = 1 if _folds_images(ctx, g) and not one_unit else g.n
    for n in range(1 if one_unit else images):
        for grp in range(1 if one_unit else g.group):
            io = _group_io(ctx, layer, g, grp, fused)
            emit_blocked(ctx, layer, plan, blocks, _ConvOps(ctx, layer, g, n, grp), io, k, g.cog)


def _staggered(ctx: LowerContext, layer: Layer, g: ConvGeom, x_onchip: bool) -> bool:
    """Whether `layer`'s input was written to DDR channel group after channel group by a
    low-reuse grouped conv (a depthwise conv: `CubeShape.x_by_channels`). NOTE: its work is
    mostly the vector unit's (its taps) while its consumer's K blocks load and multiply on
    MTE2, MTE1 and the cube; a dense producer binds the pipes its consumer would use
    (ResNet-50 with every producer's channel order credited: 3,298,503 -> 4,446,623 cycles)."""
    producer = ctx.graph.producer(layer.inputs[0])
    if x_onchip or producer is None or not _low_reuse_conv(ctx, producer):
        return False
    return ctx.builder.by_channels(ctx.ddr(layer.inputs[0]), g.c, g.h * g.w)


def _beside_vector(ctx: LowerContext, layer: Layer) -> bool:
    """Whether `layer`'s producer or a consumer is a low-reuse grouped conv (a depthwise
    conv, whose taps bind the vector unit: `CubeShape.beside_vector`)."""
    producer = ctx.graph.producer(layer.inputs[0])
    near = [producer] if producer is not None else []
    near += ctx.graph.users(layer.outputs[0])
    return any(_low_reuse_conv(ctx, n) for n in near)


def _low_reuse_conv(ctx: LowerContext, node: Layer) -> bool:
    """Whether `node` is a low-reuse grouped conv (`depthwise.low_reuse`: a depthwise conv)."""
    return node.op == "conv2d" and low_reuse(ctx, conv_geometry(ctx, node))


def _blocking(
    ctx: LowerContext,
    layer: Layer,
    onchip: tuple[bool, bool, bool],
    one_unit: bool,
    spec: tuple[int, tuple[int, ...]],
    noc: tuple[bool, bool, bool, bool],
    planes: tuple[bool, bool] = (False, False),
    known: Candidates | None = None,
) -> tuple[Blocking, list[MBlock], int] | None:
    """The conv's blocking, its M blocks and its groups per staged unit (`_stageable`), with
    its input, output and residual resident in L1 as `onchip` says, its epilogue computing
    `spec` = (`_Fused.pool`, `_Fused.cols`) and its operands on chip as `noc` says
    (`CubeShape.noc`), its input written channel group after channel group and a depthwise
    conv beside it as `planes` says (`CubeShape.x_by_channels`, `beside_vector`); None when no
    tile of that epilogue's shape fits. `known`: the candidates of its searches with other
    operands on chip (`choose_blocking`)."""
    g = conv_geometry(ctx, layer)
    taps, k = g.taps, g.cg * g.taps
    bias, residual = _optional(layer, 2), _optional(layer, 3)
    per = REQUANT_BYTES if quant_epilogue(layer) else 1  # elements of the bias per channel
    x_onchip = onchip[0]
    pool, cols = spec

    def l1_buffers(mt: int, nt: int, kt: int) -> tuple[int, ...]:
        rows, cols = _extent(g, *_pixel_tile(g, mt))
        x = () if x_onchip else ((kt // taps) * rows * cols,)
        return (*x, kt * nt, nt * per) if bias else (*x, kt * nt)

    ub = 2 + activation_temps(layer.attrs)
    dims = (g.oh * g.ow, g.cog, k)
    if pool:
        tiles = fitting_tiles(ctx, layer, dims, l1_buffers, ub + 1, taps, [pool])
        if not all(t.m == pool for t in tiles):
            return None
    elif cols:
        rows = sorted({-(-g.oh // b) * g.ow for b in range(1, g.oh + 1)})
        tiles = fitting_tiles(ctx, layer, dims, l1_buffers, ub + 1, taps, rows)
        if not all(t.m % g.ow == 0 for t in tiles):
            return None
    else:
        tiles = fitting_tiles(ctx, layer, dims, l1_buffers, ub, taps, _pixel_counts(ctx, g))
    ops = int(bool(residual)) + activation_ops(layer.attrs)  # a float bias: on the cube
    fold = _folds_images(ctx, g) and not one_unit
    units = (1 if fold else g.n) * g.group
    kept = (cols[0], g.ow, cols[3]) if cols else ()
    shape = CubeShape(
        g.cog, k, taps, units, bool(bias), bool(residual), ops, per, *onchip, bool(pool), kept,
        noc, *planes,
    )  # fmt: skip

    def bands(t: MatTiles, count: int) -> list[MBlock]:
        return _every_image(g, _bands(g, t, count)) if fold else _bands(g, t, count)

    plan, blocks = choose_blocking(ctx, shape, tiles, bands, g.oh, known)
    return plan, blocks, _stageable(ctx, g, plan, blocks, per, bool(bias), x_onchip)


def _no_candidates(ctx: LowerContext, layer: Layer) -> Candidates:
    """Candidates of a conv's blocking searches, none found yet (`choose_blocking` fills it)."""
    return Candidates()


def _folds_images(ctx: LowerContext, g: ConvGeom) -> bool:
    """Whether the images of a batch are bands of one product (M = images x pixels), so that a
    stationary weight block serves every image's bands: on a mesh, for an ungrouped conv of
    several images (the DDR channel all cores share is what a mesh runs short of)."""
    return ctx.target.cores > 1 and g.n > 1 and g.group == 1


def _every_image(g: ConvGeom, blocks: list[MBlock]) -> list[MBlock]:
    """The M blocks of image 0 repeated for every image, each tile's `m0` offset by its
    image's pixels (`_ConvOps` reads a tile's image from it)."""
    pixels = g.oh * g.ow
    return [
        MBlock(tuple(MTile(t.m0 + n * pixels, t.m, t.band) for t in b.tiles), b.window, b.slack)
        for n in range(g.n)
        for b in blocks
    ]


@dataclass(frozen=True, slots=True)
class _Fused:
    """The pool after a conv that the conv's epilogue computes (`_fusions`): the tensor
    the epilogue stores, and CubeIo's `pool` and `cols`."""

    out: str
    pool: int = 0
    cols: tuple[int, ...] = ()


def _fusions(ctx: LowerContext, layer: Layer, g: ConvGeom, one_unit: bool) -> list[_Fused]:
    """What the conv's epilogue may compute of the pool after it, best first, the plain conv
    last: a global average pool that alone reads the conv's output (`conv_geom.epilogue_pool`:
    tiles of whole images), else the column pass of a max pool that alone reads it
    (`conv_geom.epilogue_cols`: tiles of whole rows, the output a whole tensor, not a band view
    or slice: it holds the pooled columns).
    NOTE: either only lessens the epilogue's stores (and the pool's work), but its tiles are
    restricted: when no such tile fits (`_blocking` gives None), the pool stays a layer."""
    y = layer.outputs[0]
    out = [_Fused(y)]
    if one_unit:
        return out
    gap = epilogue_pool(ctx.graph, layer, ctx.target)
    if gap is not None:
        out.insert(-1, _Fused(gap.outputs[0], pool=g.oh * g.ow))
    cols = epilogue_cols(ctx.graph, layer, ctx.target)
    whole = ctx.program.key(y) == y and ctx.program.offset(y) == 0
    if cols is not None and whole:
        a = cols.attrs
        kw, sw, dw = a["kernel"][1], a.get("strides", (1, 1))[1], a.get("dilations", (1, 1))[1]
        out.insert(-1, _Fused(y, cols=(kw, sw, dw, ctx.shape(cols.outputs[0])[3])))
    return out


def _group_io(ctx: LowerContext, layer: Layer, g: ConvGeom, grp: int, fused: _Fused) -> CubeIo:
    """The blocked product's operands for group `grp`: its weights as a K x N view, its bias
    (or requant records), the output (`fused.out`: the conv's, or the global pool's it
    computes) and the residual."""
    requant = quant_epilogue(layer)
    k, per = g.cg * g.taps, REQUANT_BYTES if requant else 1
    bias, residual = _optional(layer, 2), _optional(layer, 3)
    return CubeIo(
        MatOperand(ctx.ddr(layer.inputs[1]).at(grp * g.cog * k), 1, k),
        ctx.ddr(bias).at(grp * g.cog * per) if bias else None,
        ctx.ddr(fused.out),
        ctx.ddr(residual) if residual else None,
        requant,
        fused.pool,
        fused.cols,
    )


def _stageable(
    ctx: LowerContext,
    g: ConvGeom,
    plan: Blocking,
    blocks: list[MBlock],
    per: int,
    bias: bool,
    x_onchip: bool,
) -> int:
    """Groups per staged unit: how many consecutive groups load their input, weights and bias
    with one DMA each, when every group's product is one weight-stationary block over the
    whole image (1: no staging). NOTE: a unit, with the next one, fits the L1 share (as the
    blocking's blocks do), and a layer has at least two units (the next one's DMAs overlap
    the current one's compute)."""
    if g.group < 2 or plan.order != "ws" or len(blocks) != 1 or plan.nb < g.cog:
        return 1
    k = g.cg * g.taps
    x = 0 if x_onchip else blocks[0].window * g.cg

    def buffers(u: int) -> tuple[int, ...]:
        return (u * x + blocks[0].slack, u * k * g.cog, u * g.cog * per if bias else 0) * 2

    most = max(1, -(-g.group // 2))
    units = 1
    while units < most and ctx.share_fits("L1", buffers(units + 1)):
        units += 1
    return -(-g.group // -(-g.group // units))  # balanced


def _lower_grouped(
    ctx: LowerContext,
    layer: Layer,
    g: ConvGeom,
    plan: Blocking,
    block: MBlock,
    units: int,
    fused: _Fused,
) -> None:
    """A grouped conv `units` groups at a time: per image and run of groups one DMA each for
    their input channels (`_ConvOps.load_x` of the run's channels), weights (each group's
    [K, cog] block row-major) and bias, then each group's product from views of them."""
    bld, k = ctx.builder, g.cg * g.taps
    bias = _optional(layer, 2)
    per = REQUANT_BYTES if quant_epilogue(layer) else 1
    w_ddr = ctx.ddr(layer.inputs[1])
    for n in range(g.n):
        for u0, uc in split(g.group, units):
            ctx.next_tile()
            xs = _ConvOps(ctx, layer, g, n, u0).load_x(block, 0, uc * k)
            plane = block.window if xs.owned else g.h * g.w  # a channel's elements in xs
            ws = bld.alloc("L1", uc * k * g.cog, f"{layer.name}.w")
            src = w_ddr.at(u0 * g.cog * k)
            dims, st = (uc, k, g.cog), (g.cog * k, 1, k)
            bld.emit(Copy(ws, src, dims, (k * g.cog, g.cog, 1), st))
            bs = None
            if bias:
                bs = bld.alloc("L1", uc * g.cog * per, f"{layer.name}.bias")
                src = ctx.ddr(bias).at(u0 * g.cog * per)
                bld.emit(Copy(bs, src, (uc * g.cog * per,), (1,), (1,)))
            for j in range(uc):
                grp = u0 + j
                # NOTE: a staged window stays an owned block (stage_a reads it as a band's
                # window; a resident image's view is not one): only the run's buffers are freed
                x = L1Block(xs.ref.at(j * g.cg * plane), 0, 0, 1, k, owned=xs.owned)
                w = L1Block(ws.at(j * k * g.cog), 0, 0, k, g.cog)
                b = None if bs is None else L1Block(bs.at(j * g.cog * per), 0, 0, 1, g.cog)
                io = _group_io(ctx, layer, g, grp, fused)
                ops = _ConvOps(ctx, layer, g, n, grp)
                emit_staged(ctx, layer, plan, block, ops, io, k, (x, w, b))
            release(ctx, xs)
            for buf in (ws, bs):
                if buf is not None:
                    bld.free(buf)


@dataclass(slots=True, unsafe_hash=True)
class _Image:
    """An input image of a conv: its DDR tensor's name, channels, rows, columns, and the
    strides at which a band's window reads it (a pointwise conv's own, else 1).

    NOTE: a value made per load, never assigned to (not frozen: `ConvGeom`)."""

    name: str
    c: int
    h: int
    w: int
    sh: int
    sw: int

    def load(
        self, ctx: LowerContext, dst: BufRef, n: int, c0: int, cc: int, window: tuple[int, ...]
    ) -> None:
        """Channels [c0, c0+cc) of image `n`'s window (ih0, ih, iw0, iw) into `dst` (channel
        after channel, row-major): one DMA."""
        ih0, ih, iw0, iw = window
        src = ctx.ddr(self.name)
        off = ((n * self.c + c0) * self.h + ih0 * self.sh) * self.w + iw0 * self.sw
        dims, st = (cc, ih, iw), (self.h * self.w, self.sh * self.w, self.sw)
        ctx.builder.emit(Copy(dst, src.at(off), dims, (ih * iw, iw, 1), st))


@dataclass(slots=True, unsafe_hash=True)
class _ConvOps:
    """The conv's side of the blocked loop nest: input windows, img2col, output tiles (of
    image `n`, or of the image a folded batch's tile lies in: `_every_image`).

    NOTE: made per image and group, never assigned to (not frozen: `ConvGeom`)."""

    ctx: LowerContext
    layer: Layer
    g: ConvGeom
    n: int
    group: int
    # NOTE: the forms (`TileBuilder.form`) of its img2cols by the fields of their form keys that
    # vary (as `block_emit._Nest`'s): the window's (whole image or band: `tile.band`'s sizes,
    # pads and origin), its K tile and the source's tier; the rest is the conv's
    forms: dict[tuple[Any, ...], tuple[str, str, int]] = field(default_factory=dict, compare=False)

    def image(self, tile: MTile) -> int:
        """The image `tile` computes."""
        return self.n + tile.m0 // (self.g.oh * self.g.ow)

    def load_x(self, block: MBlock, k0: int, kb: int) -> L1Block:
        """The band's input window of channels [k0/taps, (k0+kb)/taps) into L1 (a resident
        input: a view of its whole image from channel k0/taps, read in place)."""
        g, bld = self.g, self.ctx.builder
        _, _, _, _, ih0, ih, _, iw0, iw, _, _ = block.tiles[0].band
        c0, cc = k0 // g.taps, kb // g.taps
        c_abs = self.group * g.cg + c0
        n = self.image(block.tiles[0])
        src = self.ctx.ddr(self.layer.inputs[0])
        whole = bld.resident(src.key)
        if whole is not None:
            view = whole.at(src.off + (n * g.c + c_abs) * g.h * g.w)
            return L1Block(view, 0, k0, 1, kb, owned=False)
        xin = bld.alloc("L1", cc * ih * iw + block.slack, f"{self.layer.name}.x")
        for c_lo, c_hi, image in self.images():
            lo, hi = max(c_abs, c_lo), min(c_abs + cc, c_hi)
            if lo < hi:
                dst = xin.at((lo - c_abs) * ih * iw)
                image.load(self.ctx, dst, n, lo - c_lo, hi - lo, (ih0, ih, iw0, iw))
        return L1Block(xin, 0, k0, 1, kb)

    def images(self) -> list[tuple[int, int, _Image]]:
        """The images the conv's input channels come from: (first channel, one past the last,
        the image): x, then a second image's (fuse-shortcut) channels."""
        g, layer = self.g, self.layer
        sh, sw = (g.sh, g.sw) if _pointwise(g) else (1, 1)
        _, c, h, w = self.ctx.shape(layer.inputs[0])
        first = _Image(layer.inputs[0], c, h, w, sh, sw)
        s = second_image(layer)
        if not s:
            return [(0, g.c, first)]
        _, cs, hs, ws = self.ctx.shape(s)
        second = _Image(s, cs, hs, ws, *layer.attrs.get("s_strides", (1, 1)))
        return [(0, c, first), (c, g.c, second)]

    def stage_a(self, x: L1Block, tile: MTile, k0: int, kt: int) -> BufRef:
        """img2col of channels [k0/taps, (k0+kt)/taps) of the window into L0A."""
        g, bld = self.g, self.ctx.builder
        r0, rows, q0, cols, _, ih, pt, _, iw, pl, off = tile.band
        a0 = bld.alloc("L0A", rows * cols * kt, f"{self.layer.name}.a0")
        pad = int(self.layer.attrs.get("qin", 0))  # int8: the input's zero point (0.0)
        if not x.owned:  # the whole image: the band's pads are its origin's, maybe negative
            src = x.ref.at((k0 - x.c0) // g.taps * g.h * g.w)
            pads = (g.pad_t - r0 * g.sh, g.pad_l - q0 * g.sw)
            window = (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, *pads)
            instr = Img2Col(a0, src, kt // g.taps, g.h, g.w, *window, rows, cols, pad)
        else:
            src = x.ref.at(((k0 - x.c0) // g.taps * ih + off) * iw)
            strides = (1, 1) if _pointwise(g) else (g.sh, g.sw)
            window = (g.kh, g.kw, *strides, g.dh, g.dw, pt, pl)
            instr = Img2Col(a0, src, kt // g.taps, ih, iw, *window, rows, cols, pad)
        key = (x.owned, x.ref.tier, kt, tile.band)
        form = self.forms.get(key)
        if form is None:
            form = self.forms[key] = bld.form(instr)
        bld.emit_local(instr, form)
        return a0

    def out_view(self, tile: MTile, n0: int, nt: int) -> OutView:
        """Output channels [n0, n0+nt) of the band (NCHW; the UB tile is pixel-major)."""
        g = self.g
        r0, rows, q0, cols = tile.band[:4]
        co_abs = self.group * g.cog + n0
        off = ((self.image(tile) * g.co + co_abs) * g.oh + r0) * g.ow + q0
        return OutView(off, (nt, rows, cols), (g.oh * g.ow, g.ow, 1), (1, cols * nt, nt))

    def extra(self, ub: BufRef, tile: MTile, n0: int, nt: int) -> None:
        """Nothing beyond bias, residual and activation."""
