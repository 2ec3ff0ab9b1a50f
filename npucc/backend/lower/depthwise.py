"""Vector lowering of depthwise and other low-reuse grouped convolutions, chosen by cost.

A group with few input channels (a depthwise conv has one) cannot fill the cube's fractals:
on the cube it pays a whole n0 x k0 fractal per few MACs and a DMA round trip per group. The
vector lowering instead takes a tile of whole groups: per image and block of groups its
weights [block channels, cg*kh*kw] go DDR -> UB once (its bias DDR -> L1); per band of output
rows x columns the padded input window goes DDR -> UB in one copy, the accumulator starts as
the bias broadcast over the band's pixels (an L1 -> UB copy on MTE1, which a depthwise conv
leaves idle, instead of a vector add), and each tap (ci, ki, kj) adds window-view x weight
into it with one `mla` (the window read at the conv's strides, the weight broadcast over
pixels by stride 0, the input channel over a group's output channels by stride 0); then the
fused activation and one store. It executes the model's MACs exactly, on the model's weights.

`prefers_vector` chooses between it and the cube lowering (conv.py) by one cost: the busiest
pipe's cycles of the instructions each lowering emits for the layer (a trial lowering priced
by `ir.isa_cost`, i.e. target/cost.py's formulas). The cube lowering emits the same
instructions for every (image, group) up to their addresses, which no cost reads, so its
trial lowers one such unit and counts it once per unit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable

from npucc.backend.lower.context import (
    LowerContext,
    Lowering,
    apply_activation,
    flow,
    largest,
    split,
)
from npucc.backend.lower.conv_geom import ConvGeom, conv_geometry
from npucc.backend.lower.dwcube import CubePlan, CubeShare, cube_plan
from npucc.backend.lower.layout import Dims, budget, coalesce, fill_window
from npucc.backend.lower.memo import layer_signature, once, trial_graph
from npucc.backend.lower.trial_graph import TrialGraph
from npucc.errors import NpuccError
from npucc.ir.graph import Layer
from npucc.ir.isa import BufRef, Copy, Instr, VBinary

# a tile holds at most 2/3 of the UB share (TILE_SHARE): the pipelined lowering keeps two
# windows and two accumulators live (the next band's load, the store of the last), and coldest
# fit needs room beside them. NOTE: measured on MobileNet v2 (bench/roofline.py): with the whole
# share, DLR's coldest fit spilled 18 times (201,600 B) and DAN fell back to first fit, 1.746 M
# cycles; at 2/3, no spills and 1.314 M (the unpipelined lowering: 1.479 M)
PIPELINE_SHARE = (2, 3)
CUBE_FRACTIONS = (0.25, 0.375, 0.5, 0.625)  # shares of a depthwise conv's channels tried
STAGE_SHARE = 16  # weights and bias staged in L1 when they fit this share of it (stage_consts)


def _ub_elems(g: ConvGeom, groups: int, rows: int, cols: int) -> int:
    """UB elements a tile of `groups` groups and a rows x cols band holds at once."""
    weights = groups * g.cog * (g.cg * g.taps + 1)
    window = groups * g.cg * g.in_rows(rows) * g.in_cols(cols)
    return weights + window + groups * g.cog * rows * cols


def vector_tiles(ctx: LowerContext, layer: Layer, g: ConvGeom) -> tuple[int, int, int]:
    """(groups, rows, cols) per tile: whole rows first, then whole planes, then more groups;
    bands of rows (or columns) balanced. A tile holds at most PIPELINE_SHARE of the UB share.

    Refuses the layer (a true fit error) when one output pixel of one group does not fit.
    """
    return _tiles(g, _tile_cap(ctx, layer, g))


TILINGS_KEPT = 1 << 12  # tilings `_tiles` and tap patterns `_tap_pattern` keep


@functools.lru_cache(maxsize=TILINGS_KEPT)
def _tiles(g: ConvGeom, cap: int) -> tuple[int, int, int]:
    """`vector_tiles` of a tile of at most `cap` UB elements. NOTE: a pure function of its
    arguments, kept per value (each decision and lowering of a layer asks again)."""
    cols = _balanced(largest(lambda v: _ub_elems(g, 1, 1, v) <= cap, g.ow), g.ow)
    rows = largest(lambda v: _ub_elems(g, 1, v, cols) <= cap, g.oh) if cols == g.ow else 1
    rows = _balanced(rows, g.oh)
    full = rows == g.oh and cols == g.ow
    groups = largest(lambda v: _ub_elems(g, v, rows, cols) <= cap, g.group) if full else 1
    return groups, rows, cols


def wide_tiles(ctx: LowerContext, layer: Layer, g: ConvGeom, groups: int) -> int:
    """Rows per tile of `groups` groups and whole output rows (balanced bands), or 0 when one
    row does not fit the tile's share of UB."""
    cap = _tile_cap(ctx, layer, g)
    rows = largest(lambda v: _ub_elems(g, groups, v, g.ow) <= cap, g.oh)
    return _balanced(rows, g.oh) if rows else 0


def _tile_cap(ctx: LowerContext, layer: Layer, g: ConvGeom) -> int:
    """UB elements one tile may hold: PIPELINE_SHARE of the layer's share, at least one
    output pixel of one group's."""
    least = _ub_elems(g, 1, 1, 1)
    return max(
        least, budget(ctx, layer, "UB", least=least) * PIPELINE_SHARE[0] // PIPELINE_SHARE[1]
    )


def _balanced(tile: int, total: int) -> int:
    """The smallest tile that covers `total` in as few pieces as tiles of `tile` do."""
    pieces = -(-total // tile)
    return -(-total // pieces)


def low_reuse(ctx: LowerContext, g: ConvGeom) -> bool:
    """True for a grouped conv whose groups cannot fill a cube fractal (in K or in N)."""
    cube = ctx.target.cube
    return g.group > 1 and (g.cg < cube.k0 or g.cog < cube.n0)


def prefers_vector(ctx: LowerContext, layer: Layer, cube_unit: Lowering) -> bool:
    """True when the vector lowering of a low-reuse grouped conv costs less than the cube's
    (`cube_unit`: the cube lowering of the layer's first (image, group) alone)."""
    g = conv_geometry(ctx, layer)
    if not low_reuse(ctx, g):
        return False
    try:
        vector_tiles(ctx, layer, g)
    except NpuccError:  # the vector lowering does not fit: the cube's may
        return False
    try:
        cube_cycles = pipe_bound(ctx, layer, cube_unit) * g.n * g.group
    except NpuccError:  # the cube lowering does not fit: the vector's does
        return True
    return pipe_bound(ctx, layer, lower_vector_only) < cube_cycles


def pipe_bound(ctx: LowerContext, layer: Layer, lower: Callable[..., None], *args: int) -> int:
    """The cost of a lowering (`lower(ctx, layer, *args)`): the busiest pipe's cycles of the
    instructions it emits, once per signature (memo.once)."""
    return _bounds(ctx, layer, lower, args)[0]


def flow_bound(ctx: LowerContext, layer: Layer, lower: Callable[..., None], *args: int) -> int:
    """The `flow` of a lowering's nodes (`lower(ctx, layer, *args)`), once per signature."""
    return _bounds(ctx, layer, lower, args)[1]


def _bounds(
    ctx: LowerContext, layer: Layer, lower: Callable[..., None], args: tuple[int, ...]
) -> tuple[int, int]:
    """`pipe_bound` and `flow_bound` of a lowering from one trial of it, once per signature
    (a depthwise conv's vector lowering is weighed against the cube's by the one and against
    the splits by the other); a split's (`_lower_split`, `lower_vector_only`) once per
    signature and `_split_reads`, whatever the L1 reservation."""

    def figures(trial: LowerContext, one: Layer) -> tuple[int, int]:
        graph = _trial(trial, one, lower, args)
        return graph.busy(), flow(graph)

    if lower is not _lower_split and lower is not lower_vector_only:
        return once(ctx, layer, (_bounds, lower, args), figures)
    key = (_bounds, layer_signature(ctx, layer), _split_reads(ctx, layer, *args))
    found: tuple[int, int] | None = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = once(ctx, layer, (_bounds, lower, args), figures)
    return found


def _split_reads(ctx: LowerContext, layer: Layer, cube_channels: int = 0) -> Hashable:
    """What `_lower_split` of `cube_channels` reads of L1's room, the one input of a lowering
    that the L1 reservation (the resident tensors beside the layer) changes: its cube plan
    and whether its constants fit `stage_consts`' share.

    NOTE: it reads the room nowhere else (tests/lower/test_depthwise checks its reads of
    `LowerContext.room`): two reservations that give the same reads lower it alike, so its
    trial's figures are kept for both (the cascades' band layers, lowered beside other
    resident tensors in each lowering tried, ask for the same splits again).
    """
    g = conv_geometry(ctx, layer)
    return _split_plan(ctx, layer, g, cube_channels), fits_stage(ctx, layer, bias_of(layer))


def _split_plan(ctx: LowerContext, layer: Layer, g: ConvGeom, channels: int) -> CubePlan | None:
    """The cube plan of a split with `channels` of the layer's channels on the cube (its
    output within an eighth of the UB share)."""
    return cube_plan(ctx, g, channels, budget(ctx, layer, "UB") // 8)


def bias_of(layer: Layer) -> str:
    """The layer's bias ("" when absent)."""
    return layer.inputs[2] if len(layer.inputs) > 2 and layer.inputs[2] else ""


def _trial(
    trial: LowerContext, layer: Layer, lower: Callable[..., None], args: tuple[int, ...]
) -> TrialGraph:
    """The nodes a lowering emits for the layer on `trial`, a fresh context of one core.

    NOTE: on its own program (memo.fresh), so nothing of it reaches the output; every node's
    cycles are `ir.isa_cost.instr_cycles`, target/cost.py's formulas.
    """
    lower(trial, layer, *args)
    return trial_graph(trial)


def lower_vector_conv(ctx: LowerContext, layer: Layer) -> None:
    """A low-reuse grouped conv on the vector unit, a share of a depthwise conv's channels on
    the cube (dwcube.py): of the splits tried, the one of least `flow_bound`."""
    g = conv_geometry(ctx, layer)
    best = 0
    if g.cg == g.cog == 1 and ctx.target.cores == 1 and g.group > 1:
        cost = flow_bound(ctx, layer, lower_vector_only)
        # NOTE: a split reads its share only through its cube plan: one whose plan an earlier
        # split had (or none: all on the vector unit) emits the same nodes, so its flow is no
        # less than the best so far and it is not tried
        tried: set[CubePlan | None] = {None}
        for frac in CUBE_FRACTIONS:
            plan = _split_plan(ctx, layer, g, int(g.group * frac))
            if plan in tried:
                continue
            tried.add(plan)
            c = flow_bound(ctx, layer, _lower_split, int(g.group * frac))
            if c < cost:
                best, cost = int(g.group * frac), c
    _lower_split(ctx, layer, best)


def lower_vector_only(ctx: LowerContext, layer: Layer) -> None:
    """Every group on the vector unit."""
    _lower_split(ctx, layer, 0)


def _lower_split(ctx: LowerContext, layer: Layer, cube_channels: int) -> None:
    """Tiles of (image, block of groups), each over bands of output rows x columns; the last
    `cube_channels` channels (a depthwise conv's) on the cube, interleaved with them.

    NOTE: software-pipelined: the next band's window (and, at a new block, its weights) is
    loaded before the current band's taps, so that in the pipes' in-order queues its fill and
    DMA overlap the taps instead of waiting behind them (a tile is at most half of UB).
    On one core, when every group's weights and bias fit an eighth of the UB share together,
    they are loaded once (one DMA each, not two per block: each DMA pays the fixed latency) and
    each image's tiles go band by band, every block of groups in each band: the layer then
    reads its input, and writes its output, in row order, so it starts on the first rows its
    producer writes and its consumer on the first rows it writes. Otherwise, on one core, they
    are staged in L1 when they fit a share of it (`stage_consts`; one DMA each): each block's
    weights are then copied L1 -> UB on MTE1.
    """
    g = conv_geometry(ctx, layer)
    groups_t, rows_t, cols_t = vector_tiles(ctx, layer, g)
    plan = _split_plan(ctx, layer, g, cube_channels)
    on_cube = 0 if plan is None else plan.channels
    cube = None if plan is None else CubeShare(ctx, layer, g, plan)
    bias = bias_of(layer)
    blocks = [(n, g0, gl) for n in range(g.n) for g0, gl in split(g.group - on_cube, groups_t)]
    rows, cols = split(g.oh, rows_t), split(g.ow, cols_t)
    bands = [(r0, nr, q0, nc) for r0, nr in rows for q0, nc in cols]
    on_core: dict[int, list[tuple[int, int, int]]] = {}
    for block, core in zip(blocks, ctx.claim_tiles(len(blocks)), strict=True):
        on_core.setdefault(core, []).append(block)
    whole = g.group * g.cog * (g.cg * g.taps + 1)
    if len(on_core) == 1 and len(blocks) > g.n and whole <= budget(ctx, layer, "UB") // 8:
        (core,) = on_core
        ctx.emit_share(core)
        items = [(b, band) for n in range(g.n) for band in bands for b in blocks if b[0] == n]
        held = _all_consts(ctx, layer, g, bias, blocks)
        pipeline(ctx, layer, g, items, bias, _loader(ctx, layer, g, bias), held, cube)
        return
    for core, mine in on_core.items():
        ctx.emit_share(core)
        items = [(block, band) for block in mine for band in bands]
        staged = stage_consts(ctx, layer, bias) if len(on_core) == 1 else []
        pipeline(ctx, layer, g, items, bias, _loader(ctx, layer, g, bias), cube=cube)
        for key in staged:
            ctx.builder.release(key)


Item = tuple[tuple[int, int, int], tuple[int, int, int, int]]  # (image, g0, groups), band


Consts = dict[tuple[int, int, int], tuple[BufRef, BufRef | None]]  # block -> weights, bias
Taps = Callable[[Item, BufRef, tuple[BufRef, BufRef | None]], None]  # an item's taps, its window
Window = tuple[BufRef, list[Instr]]  # a loaded window, its fills still to emit (before its taps)


def stage_consts(ctx: LowerContext, layer: Layer, bias: str) -> list[str]:
    """The layer's weights and bias held in L1 (one DMA each, `builder.keep`) when together they
    fit 1/STAGE_SHARE of L1: each block's weights are then copied L1 -> UB on MTE1 and its bias
    read in place, instead of two DDR loads a block, each paying the DMA latency on MTE2. The
    DDR keys held (for the caller to `release` after the layer)."""
    bld, names = ctx.builder, [layer.inputs[1], *([bias] if bias else [])]
    refs = [ctx.ddr(name) for name in names]
    sizes = [math.prod(ctx.shape(name)) for name in names]
    if not fits_stage(ctx, layer, bias) or any(r.off for r in refs):
        return []
    keys = []
    for ref, size in zip(refs, sizes, strict=True):
        if bld.resident(ref.key) is None:
            held = bld.alloc("L1", size, f"{layer.name}.staged")
            bld.emit(Copy(held, ref, (size,), (1,), (1,)))
            bld.keep(ref.key, held)
            keys.append(ref.key)
    return keys


def fits_stage(ctx: LowerContext, layer: Layer, bias: str) -> bool:
    """Whether the layer's weights and bias `bias` together fit 1/STAGE_SHARE of L1 (what
    `stage_consts` reads of L1)."""
    names = [layer.inputs[1], *([bias] if bias else [])]
    return sum(math.prod(ctx.shape(name)) for name in names) <= ctx.capacity("L1") // STAGE_SHARE


def _all_consts(
    ctx: LowerContext, layer: Layer, g: ConvGeom, bias: str, blocks: list[tuple[int, int, int]]
) -> tuple[Consts, list[BufRef]]:
    """Every group's weights and bias in UB (one DMA each): each block's views, the buffers."""
    bld = ctx.builder
    k = g.cg * g.taps
    wts = bld.alloc("UB", g.co * k, f"{layer.name}.w")
    bld.emit(Copy(wts, ctx.ddr(layer.inputs[1]), (g.co * k,), (1,), (1,)))
    b = bld.alloc("L1", g.co, f"{layer.name}.bias") if bias else None
    if b is not None:
        bld.emit(Copy(b, ctx.ddr(bias), (g.co,), (1,), (1,)))
    views: Consts = {}
    for block in blocks:
        co0 = block[1] * g.cog
        views[block] = (wts.at(co0 * k), None if b is None else b.at(co0))
    return views, [wts] if b is None else [wts, b]


def pipeline(
    ctx: LowerContext,
    layer: Layer,
    g: ConvGeom,
    items: list[Item],
    bias: str,
    load: Callable[[Item, Consts], Window],
    held: tuple[Consts, list[BufRef]] | None = None,
    cube: CubeShare | None = None,
    taps: Taps | None = None,
) -> None:
    """One core's bands in order, each band's window loaded (`load`: the item's window, its
    block's weights and bias added to the consts first) before the previous band's taps (by
    `taps` when given, else on the vector unit), its border fills emitted just before its own
    taps; a block's weights loaded with its first band and freed after its last (unless
    `held`: every block's, loaded before and freed after all); the cube's units spread among
    them.

    NOTE: a window's fills wait for its DMA; emitted with its load, ahead of the previous
    band's taps on the in-order vector pipe, they would hold those taps until that DMA ends.
    """
    consts: Consts = {} if held is None else dict(held[0])
    ready = load(items[0], consts)
    for i, (block, band) in enumerate(items):
        win, fills = ready
        if i + 1 < len(items):
            ready = load(items[i + 1], consts)
        for instr in fills:
            ctx.builder.emit(instr)
        if taps is None:
            vector_taps(ctx, layer, g, (block, band), win, consts[block])
        else:
            taps((block, band), win, consts[block])
        if cube is not None:
            cube.emit_until((i + 1) / len(items))
        if held is None and (i + 1 == len(items) or items[i + 1][0] != block):
            wts, b = consts.pop(block)
            if b is not None and ctx.builder.resident(ctx.ddr(bias).key) is None:
                ctx.builder.free(b)
            ctx.builder.free(wts)
    for buf in held[1] if held is not None else ():
        ctx.builder.free(buf)


def _loader(
    ctx: LowerContext, layer: Layer, g: ConvGeom, bias: str
) -> Callable[[Item, Consts], Window]:
    """`pipeline`'s load of a band's window from the layer's input (`_load`)."""
    return lambda item, consts: _load(ctx, layer, g, item, bias, consts)


def consts_of(
    ctx: LowerContext,
    layer: Layer,
    g: ConvGeom,
    block: tuple[int, int, int],
    bias: str,
    consts: Consts,
) -> None:
    """At a new block, its weights (UB) and bias (L1) into `consts`."""
    n, g0, gl = block
    if block in consts:
        return
    bld = ctx.builder
    co0, cb = g0 * g.cog, gl * g.cog
    k = g.cg * g.taps
    wts = bld.alloc("UB", cb * k, f"{layer.name}.w")
    bld.emit(Copy(wts, ctx.ddr(layer.inputs[1]).at(co0 * k), (cb * k,), (1,), (1,)))
    b = None
    if bias:
        src = ctx.ddr(bias).at(co0)
        b = bld.resident(src.key)
        if b is not None:  # staged (`stage_consts`): read in place
            b = b.at(src.off)
        else:
            b = bld.alloc("L1", cb, f"{layer.name}.bias")
            bld.emit(Copy(b, src, (cb,), (1,), (1,)))
    consts[block] = (wts, b)


def _load(
    ctx: LowerContext,
    layer: Layer,
    g: ConvGeom,
    item: Item,
    bias: str,
    consts: Consts,
) -> Window:
    """Load one band's padded input window into UB (first, at a new block, its weights and
    bias into `consts`); the window and its border fills, not emitted."""
    (n, g0, gl), (r0, rows, q0, cols) = item
    bld = ctx.builder
    consts_of(ctx, layer, g, (n, g0, gl), bias, consts)
    ci = gl * g.cg
    wr, wc = g.in_rows(rows), g.in_cols(cols)
    win = bld.alloc("UB", ci * wr * wc, f"{layer.name}.win")
    x = ctx.ddr(layer.inputs[0]).at((n * g.c + g0 * g.cg) * g.h * g.w)
    box = (r0 * g.sh - g.pad_t, wr, q0 * g.sw - g.pad_l, wc)
    fills: list[Instr] = []
    fill_window(ctx, (g.h, g.w), win, x, ci, box, 0.0, fills)
    return win, fills


def vector_taps(
    ctx: LowerContext,
    layer: Layer,
    g: ConvGeom,
    item: Item,
    win: BufRef,
    consts: tuple[BufRef, BufRef | None],
) -> None:
    """One band of output rows x columns of a block of groups (`item`) from its window: taps,
    epilogue, store."""
    gl, (_, rows, _, cols) = item[0][2], item[1]
    wts, bias = consts
    bld = ctx.builder
    acc = bld.alloc("UB", gl * g.cog * rows * cols, f"{layer.name}.acc")
    start, (cd, ds, as_, bs), taps = _tap_pattern(g, gl, rows, cols)
    # NOTE: every operand a buffer of this core: `emit_local` (the same node and edges)
    emit = bld.emit_local
    if bias is not None:  # the accumulator starts as the bias: a broadcast on MTE1, not VECTOR
        emit(Copy(acc, bias, *start))
    else:
        a, w = taps[0]
        emit(VBinary("mul", acc, win.at(a), wts.at(w), cd, ds, as_, bs))
    skip = 0 if bias is not None else 1  # the first tap was the `mul`
    # NOTE: the `mla` taps differ in their operands' offsets only: one run (`emit_run`)
    bld.emit_run(
        lambda i: VBinary(
            "mla", acc, win.at(taps[i + skip][0]), wts.at(taps[i + skip][1]), cd, ds, as_, bs
        ),
        len(taps) - skip,
    )
    bld.free(win)
    epilogue(ctx, layer, g, item, acc)


@functools.lru_cache(maxsize=TILINGS_KEPT)
def _tap_pattern(
    g: ConvGeom, gl: int, rows: int, cols: int
) -> tuple[tuple[Dims, Dims, Dims], tuple[Dims, Dims, Dims, Dims], tuple[tuple[int, int], ...]]:
    """`vector_taps`' patterns for `gl` groups and a rows x cols band: the bias broadcast's
    (dims, destination and source strides), every tap's (dims, destination, window and
    weight strides) and each tap's (window, weight) offsets. NOTE: a pure function of its
    arguments, kept per value (the bands of a layer ask for the same few)."""
    wr, wc = g.in_rows(rows), g.in_cols(cols)
    pixels = rows * cols
    dst_st, src_st = (g.cog * pixels, pixels, 1), (g.cog, 1, 0)
    bd, (bds, bss) = coalesce((gl, g.cog, pixels), dst_st, src_st)
    dims = (gl, g.cog, rows, cols)
    dense = (g.cog * pixels, pixels, cols, 1)
    a_st = (g.cg * wr * wc, 0, g.sh * wc, g.sw)
    k = g.cg * g.taps
    b_st = (g.cog * k, k, 0, 0)
    cd, (ds, as_, bs) = coalesce(dims, dense, a_st, b_st)
    taps = tuple(
        (c * wr * wc + ki * g.dh * wc + kj * g.dw, c * g.taps + ki * g.kw + kj)
        for c in range(g.cg)
        for ki in range(g.kh)
        for kj in range(g.kw)
    )
    return (bd, bds, bss), (cd, ds, as_, bs), taps


def epilogue(ctx: LowerContext, layer: Layer, g: ConvGeom, item: Item, acc: BufRef) -> None:
    """An item's output in UB (`acc`, channel-major): the fused activation, its store; freed."""
    (n, g0, gl), (r0, rows, q0, cols) = item
    cb, pixels = gl * g.cog, rows * cols
    apply_activation(ctx, acc, cb * pixels, layer.attrs)
    y = ctx.ddr(layer.outputs[0]).at(((n * g.co + g0 * g.cog) * g.oh + r0) * g.ow + q0)
    ctx.builder.emit(Copy(y, acc, (cb, rows, cols), (g.oh * g.ow, g.ow, 1), (pixels, cols, 1)))
    ctx.builder.free(acc)
