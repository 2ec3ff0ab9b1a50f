"""Two-level tiling of the cube's layers: L1 blocks fetched from DDR once, L0 tiles inside them.

A cube layer is a blocked matrix multiply out[M, N] = X[M, K] @ W[K, N] (a conv: M output
pixels, K input channels x taps, N output channels). Its L0 tile (m_t, n_t, k_t: L1 -> L0A by
img2col or a copy, L1 -> L0B, mmad into L0C) is one of the tiles whose buffers fit each tier's
share (`l0_tiles.fitting_tiles`); around it an L1 *block* of X (a band of pixels x a K block)
and of W (a K block x an N block) is loaded from DDR once and reused by every L0 tile inside
it. Loop orders (`Blocking.order`):

- ``ws`` weight-stationary: a W block of all K stays in L1 while the X bands stream past it
  (with the whole N in one block the weights are fetched exactly once);
- ``is`` input-stationary: an X band of all K stays in L1 while the W blocks stream past it
  (with the whole M in one band the input is fetched exactly once);
- ``os`` K outermost inside an output block: W blocks of one K block at a time (X blocks of
  one or several of them: `Blocking.xk`), every L0 tile's accumulator of the output block kept
  in L0C across the K blocks (with blocks of one L0 tile, the one-level tiling; it is what fits
  when all of K does not).

`block_price.block_cost` prices each candidate with target/cost.py's formulas (dma_cycles per DMA,
mmad_cycles per mmad, ...): the busiest pipe's cycles (per core, the layer's units spread
over its cores) against the DDR channel's bound (of the bytes through DDR: an operand the mesh
plan keeps on chip moves over the NoC), then the bytes moved, then the DMAs; the least
cost wins (with an operand on chip: the least cycles x bytes moved). NOTE: every L1 block
(with the block after it) fits the tier's share
(TILE_SHARE): the next block's loads are fresh buffers that depend on nothing of the current
block, so the scheduler can place them while the current block computes (ping-pong); but on
one core a lone stationary block (one M block under `is`, one N block under `ws`) is loaded
once: it may be held beside two streamed blocks (`_plans`). block_emit.py emits the choice.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from npucc.backend.lower import block_price as price
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.l0_tiles import MatTiles, candidates, l0c_fits

ORDERS = ("ws", "is", "os")
CYCLE_TOLERANCE = 32  # plans within 1/32 of the fewest estimated cycles compete on bytes moved


@dataclass(slots=True, unsafe_hash=True)
class MTile:
    """One L0 tile of M: `m` rows (pixels) at `m0`; `band`: where a conv's tile lies, (r0,
    rows, q0, cols) of the output, (ih0, ih, pt, iw0, iw, pl) of its block's input window and
    the row of that window the tile starts at.

    NOTE: a value, never assigned to (equal and hashed by its fields), as MBlock and Blocking:
    not declared frozen, whose __init__ sets each slot through a call (`isa.Instr`'s note; a
    layer's blocking search makes them by the thousand)."""

    m0: int
    m: int
    band: tuple[int, ...] = ()


@dataclass(slots=True, unsafe_hash=True)
class MBlock:
    """One L1 block of M: its L0 tiles and the X elements it holds per K quantum (a conv: its
    input window's pixels per channel; a matmul: its rows), plus `slack` elements."""

    tiles: tuple[MTile, ...]
    window: int
    slack: int = 0

    def x_elems(self, kb: int, k_quantum: int) -> int:
        """Elements of the block's X for a K block of `kb`."""
        return kb // k_quantum * self.window + self.slack


@dataclass(slots=True, unsafe_hash=True)
class Blocking:
    """A layer's loop order, L0 tile and L1 block sizes (N and K blocks in elements, M blocks
    in L0 tiles); `chunks`: units each stationary block's stream is split into (mesh).

    NOTE: `os` always blocks K (kb < k); `ws` never does; `is` may: its X block holds all of K
    in L1 either way, and with kb < k each N block's W streams in K blocks into accumulators
    that stay in L0C across them (the `os` inner loop under a stationary X). `cube_bias`: a
    float bias added by the cube (`_Nest.bias_into`) instead of the vector unit. `xk`: under
    `os`, X's K block, a multiple of `kb` (0: `kb`): one X DMA serves several W blocks.
    """

    order: str
    tiles: MatTiles
    mb: int
    nb: int
    kb: int
    chunks: int = 1
    cube_bias: bool = False
    xk: int = 0

    @property
    def x_kb(self) -> int:
        """X's K block under `os` (W's unless `xk` says more)."""
        return self.xk or self.kb


@dataclass(frozen=True, slots=True)
class CubeShape:
    """What the cost function knows of one cube layer: its sizes and its epilogue."""

    n: int
    k: int
    k_quantum: int  # K elements per X channel (a conv's taps)
    instances: int  # independent products (images x groups, matmul batches)
    bias: bool  # a per-N bias staged in L1 with each W block
    residual: bool  # a residual tile loaded into UB per output tile (fuse-residual)
    vector_ops: int  # vector instructions per output tile (residual, activation, ...)
    bias_elems: int = 1  # elements of the bias per N column (int8: a requant record's bytes)
    # resident L1 tensors (npucc.backend.lower.resident): X read in place, no DMA from DDR;
    # output tiles stored UB -> L1 on VECTOR; residual tiles loaded L1 -> UB on MTE1
    x_onchip: bool = False
    out_onchip: bool = False
    res_onchip: bool = False
    pooled: bool = False  # each output tile summed over its pixels into a mean (CubeIo.pool)
    cols: tuple[int, ...] = ()  # (kw, ow, pw): each tile's rows max-pooled to pw (CubeIo.cols)
    # X, W (with its bias), output and residual kept on chip by the mesh plan
    # (npucc.backend.hypercut.onchip_plan): their copies are NoC transfers, none of whose
    # bytes pass the DDR channel
    noc: tuple[bool, bool, bool, bool] = (False, False, False, False)
    # X's producer wrote it channel group after channel group (ddr_deps.by_channels): an `os`
    # plan's X blocks of the first channels can be loaded and multiplied while it writes
    x_by_channels: bool = False
    # its producer or a consumer is a low-reuse grouped conv (a depthwise conv: its taps bind
    # the vector unit): on a cost tie its float bias goes where the pipes' loads are least
    beside_vector: bool = False

    @property
    def float_bias(self) -> bool:
        """Whether the layer has a float bias (an element per column: the cube or the vector
        unit may add it; an int8 layer's requantization adds its own)."""
        return self.bias and self.bias_elems == 1


MBlocks = Callable[[MatTiles, int], list[MBlock]]  # the M blocks of (L0 tile, L0 tiles each)
Scored = tuple[tuple[int, int, int], Blocking, list[MBlock]]  # (cycles, bytes, DMAs), ...


@dataclass(slots=True)
class Candidates:
    """The blockings `choose_blocking` enumerates for one layer and what pricing them shares,
    none of which depends on the operands on chip (`CubeShape.noc`): one layer's searches under
    each set of operands on chip (a mesh plan's profiles) share one.

    NOTE: only searches whose shapes differ in `noc` alone, with equal tiles and M blocks,
    may share it (`choose_blocking` asserts the first two; the caller keys it by what the M
    blocks depend on)."""

    key: tuple = ()  # the shape without its `noc`, the L0 tiles and the largest M block
    # per (L0 tile, L0 tiles each) kept, in enumeration order: its M blocks and their plans,
    # each with whether it is held (its one stationary block loaded once) and, with a float
    # bias, its `cube_bias` variant
    found: list[tuple[list[MBlock], list[tuple[Blocking, bool, Blocking | None]]]] | None = None
    memo: dict[Hashable, Any] = field(default_factory=dict)  # `block_price.variants`'


def drop_candidates(memo: dict[Hashable, Any]) -> None:
    """Drop every `Candidates` from a compile's lowering memo (`memo.once`'s): what is left of
    them once a mesh plan's profiles are lowered (~15 MB on light ResNet-50 mesh8x8), which a
    later search under new operands on chip makes anew."""
    for key in [k for k, v in memo.items() if isinstance(v, Candidates)]:
        del memo[key]


def choose_blocking(
    ctx: LowerContext,
    shape: CubeShape,
    tiles: list[MatTiles],
    m_blocks: MBlocks,
    max_m_tiles: int,
    known: Candidates | None = None,
) -> tuple[Blocking, list[MBlock]]:
    """The least-`block_cost` blocking whose L1 blocks fit the tier's share (with L0C holding
    an output block's accumulators: all of it, priced by `_single_l0c`), and its M blocks.

    `m_blocks(tile, count)` splits M into blocks of `count` L0 tiles (at most `max_m_tiles`;
    1 for a conv, whose img2col reads one band per L1 block). NOTE: the `os` blocking of one
    L0 tile per block holds exactly the buffers `fitting_tiles` checked, so some plan fits.
    `known`: the candidates of the layer's searches under other operands on chip (read and
    filled in).
    """
    table = Candidates() if known is None else known
    key = (replace(shape, noc=(False, False, False, False)), tuple(tiles), max_m_tiles)
    if table.found is None:
        table.key, table.found = key, _candidates(ctx, shape, tiles, m_blocks, max_m_tiles)
    assert table.key == key  # NOTE: see Candidates
    scored, held = _scored(ctx, shape, table)
    if not scored:
        raise AssertionError("no blocking fits although its one-tile blocking does")
    # NOTE: with operands on chip no channel bounds the bytes, and the fastest plan re-reads
    # them over the NoC once per unit (energy): the least cycles x bytes moved wins (measured
    # on BERT-encoder b8 mesh8x8's plan, fastest first: 5.55e6 cycles, 6.89e10 pJ; this:
    # 5.92e6 cycles, 4.07e10 pJ)
    if any(shape.noc):
        _, plan, blocks = min(scored, key=lambda s: (s[0][0] * s[0][1], s[0][2]))
        return plan, blocks
    # NOTE: a held block leaves the next layer's first blocks less room (unpriced): a held plan
    # must be faster by more than the tolerance (measured: docs/roofline.md, `r50d`)
    least = min(cost[0] for cost, _, _ in scored)
    fast = bool(held) and _pick(held)[0][0] * (CYCLE_TOLERANCE + 1) <= least * CYCLE_TOLERANCE
    _, plan, blocks = _pick(held if fast else scored)
    return plan, blocks


def _scored(
    ctx: LowerContext, shape: CubeShape, table: Candidates
) -> tuple[list[Scored], list[Scored]]:
    """The plans `choose_blocking` may pick, scored, in enumeration order: those ping-ponged
    and those held (`_plans`' flag).

    NOTE: on one core's DDR (no operand on chip) a plan whose `block_price.cycle_floor` is
    beyond the cycle tolerance of a plan already priced in its list is not priced: it can be
    neither the least nor near it (`_pick`). The plans are priced by rising floor, so that the
    least comes early (VGG-19: 30,757 plans priced -> 11,887; with the DMA floor, Keras
    MobileNet v2's 8,148 plans: 7,555 priced -> 4,353); which are kept, and their order, are
    as when every plan is priced."""
    plans = [(blocks, *entry) for blocks, entries in table.found or () for entry in entries]
    if any(shape.noc):  # the least cycles x bytes wins: no bound on cycles alone
        return _least_product(ctx, shape, table, plans), []
    floors = [
        price.cycle_floor(ctx, shape, plan, blocks, table.memo) for blocks, plan, _, _ in plans
    ]
    order = sorted(range(len(plans)), key=floors.__getitem__)
    least: dict[bool, int] = {}
    found: list[Scored | None] = [None] * len(plans)
    for i in order:
        blocks, plan, once, cube = plans[i]
        top = least.get(once)
        if top is not None and floors[i] * CYCLE_TOLERANCE > top * (CYCLE_TOLERANCE + 1):
            continue
        priced = found[i] = _bias_plan(ctx, shape, plan, blocks, table.memo, cube)
        if top is None or priced[0][0] < top:
            least[once] = priced[0][0]
    scored = [s for s, p in zip(found, plans, strict=True) if s is not None and not p[2]]
    held = [s for s, p in zip(found, plans, strict=True) if s is not None and p[2]]
    return scored, held


def _least_product(
    ctx: LowerContext,
    shape: CubeShape,
    table: Candidates,
    plans: list[tuple[list[MBlock], Blocking, bool, Blocking | None]],
) -> list[Scored]:
    """`_scored`'s ping-ponged plans with operands on chip, scored, in enumeration order, but
    those that cannot have the least cycles x bytes moved (`choose_blocking`'s pick there;
    held plans are not picked then).

    NOTE: priced by rising `block_price.product_floors`, and none whose floor is above a
    product already priced: it is above the least, so neither it nor a tie (on a tie of
    products the fewest DMAs, then the first, win); the pick is that of every plan priced
    (light ResNet-50 mesh8x8's profiles: 87 searches, 45,369 plans priced -> 1,558)."""
    floors = price.product_floors(ctx, shape, plans, table.memo).tolist()
    found: list[Scored | None] = [None] * len(plans)
    least = -1
    for i in sorted((i for i, p in enumerate(plans) if not p[2]), key=floors.__getitem__):
        if 0 <= least < floors[i]:
            break  # NOTE: by rising floor: every later one's is above too
        blocks, plan, _, cube = plans[i]
        priced = found[i] = _bias_plan(ctx, shape, plan, blocks, table.memo, cube)
        product = priced[0][0] * priced[0][1]
        if least < 0 or product < least:
            least = product
    return [s for s in found if s is not None]


def _candidates(
    ctx: LowerContext,
    shape: CubeShape,
    tiles: list[MatTiles],
    m_blocks: MBlocks,
    max_m_tiles: int,
) -> list[tuple[list[MBlock], list[tuple[Blocking, bool, Blocking | None]]]]:
    """`Candidates.found`: per L0 tile and L0 tiles per M block (fewer M blocks than half as
    many tiles each), its M blocks and `_plans`, each with its `cube_bias` variant when the
    bias is a float one."""
    found = []
    made: dict[tuple[MatTiles, int], list[MBlock]] = {}  # (L0 tile, count) -> its M blocks
    for t in tiles:
        for count in candidates(max_m_tiles):
            blocks = made[t, count] = m_blocks(t, count)
            if count > 1:
                half = made.get((t, count // 2))
                if half is None:
                    half = made[t, count // 2] = m_blocks(t, count // 2)
                if len(blocks) == len(half):
                    continue  # no fewer blocks than half as many tiles each
            plans = [
                (plan, once, _with_cube_bias(plan) if shape.float_bias else None)
                for plan, once in _plans(ctx, shape, t, count, blocks)
            ]
            found.append((blocks, plans))
    return found


def _with_cube_bias(plan: Blocking) -> Blocking:
    """`plan` with its float bias added by the cube (`replace`, without its field walk: one
    per plan enumerated)."""
    return Blocking(plan.order, plan.tiles, plan.mb, plan.nb, plan.kb, plan.chunks, True, plan.xk)


def _bias_plan(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
    cube: Blocking | None = None,
) -> Scored:
    """`plan` scored with its float bias added where it costs least: by the vector unit or by
    the cube (`cube_bias`; `cube`: that variant of `plan`, if made); on a tie of cost beside a
    depthwise conv (`CubeShape.beside_vector`), where the pipes' loads, busiest first, are
    least (the vector unit's slack is what the depthwise conv's taps overlap). NOTE: on every
    tie (not only beside a depthwise conv) SqueezeNet 352,602 -> 358,683 and ResNet-50
    3,303,111 -> 3,338,350: their cube binds (docs/roofline.md, `mbv2m`)."""
    if not shape.float_bias:
        return price.priced(ctx, shape, plan, blocks, memo)[0], plan, blocks
    if cube is None:
        cube = replace(plan, cube_bias=True)
    (cost, loads), (cube_cost, cube_loads) = price.variants(ctx, shape, (plan, cube), blocks, memo)
    if cube_cost < cost or (cube_cost == cost and shape.beside_vector and cube_loads < loads):
        return cube_cost, cube, blocks
    return cost, plan, blocks


def _pick(scored: list[Scored]) -> Scored:
    """The fewest bytes moved, DMAs, cycles within the tolerance of the fewest cycles (ties:
    the first, in the enumeration order: deterministic)."""
    least = min(cost[0] for cost, _, _ in scored)
    near = [s for s in scored if s[0][0] * CYCLE_TOLERANCE <= least * (CYCLE_TOLERANCE + 1)]
    return min(near, key=lambda s: (s[0][1], s[0][2], s[0][0]))


def _plans(
    ctx: LowerContext, shape: CubeShape, t: MatTiles, count: int, blocks: list[MBlock]
) -> Iterator[tuple[Blocking, bool]]:
    """Every blocking of L0 tile `t` and M blocks `blocks` whose buffers fit their shares, or
    (True) fit only with their one stationary block held once beside two streamed blocks."""
    largest_x = max(blocks, key=lambda b: (b.window, b.slack))
    cores = ctx.target.cores

    def l1_fits(nb: int, kb: int, x_kb: int | None = None, once: str = "") -> bool:
        x_k = kb if x_kb is None else x_kb
        x = () if shape.x_onchip else (largest_x.x_elems(x_k, shape.k_quantum),)
        w = (kb * nb, *((nb * shape.bias_elems,) if shape.bias else ()))
        if not once:  # both ping-ponged, or `once` ("x", "w") held beside two of the other
            return ctx.share_fits("L1", (*x, *w))
        return ctx.fits_beside("L1", *((x, w) if once == "x" else (w, x)))

    x_once = "x" if cores == 1 and len(blocks) == 1 else ""

    def x_kept(nb: int, kb: int) -> bool:
        """Whether an `is` plan whose X is loaded once (not ping-ponged) is kept: X and two W
        blocks fit the share, or X and one do not (a held plan). NOTE: one that fits only as
        X + W is dropped: it leaves the next layer's first blocks no room within the plan's
        peak (docs/roofline.md, `r50peak2`)."""
        if not x_once or not l1_fits(nb, kb, shape.k):
            return True
        x = () if shape.x_onchip else (largest_x.x_elems(shape.k, shape.k_quantum),)
        w = (kb * nb, *((nb * shape.bias_elems,) if shape.bias else ()))
        return ctx.share_fits("L1", (*x, *w, *w))

    n_options = candidates(shape.n, t.n)
    for nb in n_options:
        w_once = "w" if cores == 1 and nb >= shape.n else ""
        both = l1_fits(nb, shape.k)
        for order, inner, once in (("ws", len(blocks), w_once), ("is", -(-shape.n // nb), x_once)):
            if order == "is" and not x_kept(nb, shape.k):
                continue
            if both or (once and l1_fits(nb, shape.k, once=once)):
                for chunks in candidates(inner) if cores > 1 else [1]:
                    yield Blocking(order, t, count, nb, shape.k, chunks), not both
    for nb in n_options:
        accs = count * -(-nb // t.n)
        if not l0c_fits(ctx, (t.m * t.n,) * accs):
            break
        for kb in candidates(shape.k, t.k):
            for xk in candidates(shape.k, kb) if kb < shape.k else ():
                if xk > kb and shape.x_onchip or not l1_fits(nb, kb, xk):
                    break  # X read in place: no X block; a wider X block fits no better
                yield Blocking("os", t, count, nb, kb, xk=xk * (xk != kb)), False
            both = l1_fits(nb, kb, shape.k)  # X stationary, W in K blocks
            if kb < shape.k and not x_kept(nb, kb):
                continue
            if kb < shape.k and (both or (x_once and l1_fits(nb, kb, shape.k, x_once))):
                for chunks in candidates(-(-shape.n // nb)) if cores > 1 else [1]:
                    yield Blocking("is", t, count, nb, kb, chunks), not both
