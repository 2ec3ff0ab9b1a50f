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
- ``os`` K outermost inside an output block: X and W blocks of one K block at a time, every
  L0 tile's accumulator of the output block kept in L0C across the K blocks (with blocks of one
  L0 tile, the one-level tiling; it is what fits when all of K does not).

`block_cost` prices each candidate with target/cost.py's formulas (dma_cycles per DMA,
mmad_cycles per mmad, ...): the busiest pipe's cycles (per core, the layer's units spread
over its cores) against the DDR channel's bound (of the bytes through DDR: an operand the mesh
plan keeps on chip moves over the NoC), then the bytes moved, then the DMAs; the least
cost wins (with an operand on chip: the least cycles x bytes moved). NOTE: every L1 block
(with the block after it) fits the tier's share
(TILE_SHARE): the next block's loads are fresh buffers that depend on nothing of the current
block, so the scheduler can place them while the current block computes (ping-pong).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from npucc.backend.lower.context import LowerContext, apply_activation, largest, split
from npucc.backend.lower.l0_tiles import MatTiles, candidates
from npucc.ir.graph import Layer
from npucc.ir.isa import (
    REQUANT_BYTES,
    BufRef,
    Copy,
    DdrRef,
    Mmad,
    Requant,
    VBinary,
    VFill,
    VReduce,
    VUnary,
)
from npucc.target.cost import ddr_bound, dma_cycles, mmad_cycles, noc_cycles, vector_cycles

ORDERS = ("ws", "is", "os")
CYCLE_TOLERANCE = 32  # plans within 1/32 of the fewest estimated cycles compete on bytes moved


@dataclass(frozen=True, slots=True)
class MTile:
    """One L0 tile of M: `m` rows (pixels) at `m0`; `band`: where a conv's tile lies, (r0,
    rows, q0, cols) of the output, (ih0, ih, pt, iw0, iw, pl) of its block's input window and
    the row of that window the tile starts at."""

    m0: int
    m: int
    band: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class MBlock:
    """One L1 block of M: its L0 tiles and the X elements it holds per K quantum (a conv: its
    input window's pixels per channel; a matmul: its rows), plus `slack` elements."""

    tiles: tuple[MTile, ...]
    window: int
    slack: int = 0

    def x_elems(self, kb: int, k_quantum: int) -> int:
        """Elements of the block's X for a K block of `kb`."""
        return kb // k_quantum * self.window + self.slack


@dataclass(frozen=True, slots=True)
class Blocking:
    """A layer's loop order, L0 tile and L1 block sizes (N and K blocks in elements, M blocks
    in L0 tiles); `chunks`: units each stationary block's stream is split into (mesh).

    NOTE: `os` always blocks K (kb < k); `ws` never does; `is` may: its X block holds all of K
    in L1 either way, and with kb < k each N block's W streams in K blocks into accumulators
    that stay in L0C across them (the `os` inner loop under a stationary X). `cube_bias`: a
    float bias added by the cube (`_Nest.bias_into`) instead of the vector unit.
    """

    order: str
    tiles: MatTiles
    mb: int
    nb: int
    kb: int
    chunks: int = 1
    cube_bias: bool = False


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

    @property
    def float_bias(self) -> bool:
        """Whether the layer has a float bias (an element per column: the cube or the vector
        unit may add it; an int8 layer's requantization adds its own)."""
        return self.bias and self.bias_elems == 1


def _pieces(total: int, tile: int) -> list[tuple[int, int]]:
    """(size, count) of the pieces `split(total, tile)` gives."""
    full, rest = divmod(total, tile)
    return [(tile, full)] * bool(full) + [(rest, 1)] * bool(rest)


def _dma(ctx: LowerContext, path: str, elems: int, noc: bool = False) -> int:
    """Cycles of one DMA of `elems` elements on `path`, or over the NoC (`noc`: its DDR side is
    kept on chip; the hops to its home are not known here)."""
    nbytes = elems * ctx.target.elem_bytes
    return noc_cycles(ctx.target, nbytes, 0) if noc else dma_cycles(ctx.target, path, nbytes)


def block_cost(
    ctx: LowerContext, shape: CubeShape, plan: Blocking, blocks: list[MBlock]
) -> tuple[int, int, int]:
    """(cycles, bytes moved, DMAs) of a layer lowered by `plan` over the M blocks `blocks`.

    Cycles: the busiest pipe's on the busiest core (the layer's units, stationary blocks with
    their streams, spread round-robin over its cores), or the DDR bound of its DDR bytes if
    more; each DMA priced by dma_cycles (noc_cycles for an operand kept on chip, whose bytes
    do not pass the DDR channel), each mmad by mmad_cycles, each vector op by vector_cycles.
    Bytes moved: to or from DDR, or over the NoC.
    """
    x_noc, w_noc, out_noc, res_noc = shape.noc
    n_pieces = _pieces(shape.n, plan.nb)
    n_blocks = sum(c for _, c in n_pieces)
    k_pieces = _pieces(shape.k, plan.kb)
    k_blocks = sum(c for _, c in k_pieces)
    x_pieces = k_pieces if plan.order == "os" else [(shape.k, 1)]  # X's K blocks
    # one pass over every W block (with its bias) and over every X block
    w_cyc = sum(
        ck * cn * _dma(ctx, "DDR_L1", kb * nb, w_noc) for kb, ck in k_pieces for nb, cn in n_pieces
    )
    w_el = shape.n * shape.k
    if shape.bias:
        w_cyc += sum(cn * _dma(ctx, "DDR_L1", nb * shape.bias_elems, w_noc) for nb, cn in n_pieces)
        w_el += shape.n * shape.bias_elems
    x_cyc = x_el = 0
    for b in blocks if not shape.x_onchip else ():
        for kb, ck in x_pieces:
            x_cyc += ck * _dma(ctx, "DDR_L1", b.x_elems(kb, shape.k_quantum) - b.slack, x_noc)
            x_el += ck * (b.x_elems(kb, shape.k_quantum) - b.slack)
    w_dmas = n_blocks * k_blocks * (1 + int(shape.bias))
    if plan.order == "ws":  # W once per chunk, X once per N block
        passes_w, passes_x, units = plan.chunks, n_blocks, n_blocks * plan.chunks
    elif plan.order == "is":  # X once per chunk, W once per M block
        passes_w, passes_x, units = len(blocks), plan.chunks, len(blocks) * plan.chunks
    else:  # both once per output block
        passes_w, passes_x, units = len(blocks), n_blocks, len(blocks) * n_blocks
    pipes = _tile_pipes(ctx, shape, plan, blocks)
    pipes["MTE2"] += w_cyc * passes_w + x_cyc * passes_x
    x_dmas = 0 if shape.x_onchip else len(blocks) * len(x_pieces) * passes_x
    dmas = w_dmas * passes_w + x_dmas + pipes.pop("dmas")
    eb, inst = ctx.target.elem_bytes, shape.instances
    w_bytes, x_bytes = w_el * passes_w * eb, x_el * passes_x * eb
    res, out = pipes.pop("res_bytes"), pipes.pop("out_bytes")
    moved = (w_bytes + x_bytes + res + out) * inst
    reads = (w_bytes * (not w_noc) + x_bytes * (not x_noc) + res * (not res_noc)) * inst
    writes = out * (not out_noc) * inst
    units *= inst
    per_core = math.ceil(units / ctx.target.cores) * inst / units
    busiest = max(pipes.values()) * per_core
    if _single_l0c(ctx, plan, shape.k):
        busiest += (pipes["VECTOR"] + pipes["MTE3"]) * per_core
    # NOTE: the first X block waits for the layer's input and nothing of the layer overlaps
    # its load (a W block depends on nothing: the scheduler may load it earlier)
    x0 = blocks[0].x_elems(x_pieces[0][0], shape.k_quantum)
    fill = 0 if shape.x_onchip else _dma(ctx, "DDR_L1", x0, x_noc)
    cycles = max(math.ceil(busiest), ddr_bound(ctx.target, reads, writes)) + fill
    return cycles, moved, dmas


def _tile_pipes(
    ctx: LowerContext, shape: CubeShape, plan: Blocking, blocks: list[MBlock]
) -> dict[str, int]:
    """Per-pipe cycles of the L0 tiles of one instance, and the epilogue's DMAs and bytes
    (keys dmas, res_bytes, out_bytes); an A tile is staged once per group of N tiles."""
    eb, t = ctx.target.elem_bytes, plan.tiles
    _, _, out_noc, res_noc = shape.noc
    groups = 0
    for nb, cn in _pieces(shape.n, plan.nb):
        count = -(-nb // t.n)
        group = count if plan.kb < shape.k else acc_group(ctx, t, count)
        groups += cn * -(-count // group)
    p = dict.fromkeys(("MTE1", "MTE2", "CUBE", "VECTOR", "MTE3"), 0)
    dmas = res_bytes = out_bytes = 0
    m_count: dict[int, int] = {}
    for b in blocks:
        for tile in b.tiles:
            m_count[tile.m] = m_count.get(tile.m, 0) + 1
        if plan.cube_bias:  # the block's ones, filled in UB and stored to L1, per N block
            ones = max(tile.m for tile in b.tiles)
            fill = vector_cycles(ctx.target, ones) + _dma(ctx, "UB_L1", ones)
            p["VECTOR"] += fill * sum(c for _, c in _pieces(shape.n, plan.nb))
    for (m, cm), (k, ck) in itertools.product(m_count.items(), _pieces(shape.k, t.k)):
        p["MTE1"] += cm * ck * groups * _dma(ctx, "L1_L0", m * k)  # A: once per column group
    for (m, cm), (n, cn) in itertools.product(m_count.items(), _pieces(shape.n, t.n)):
        c = cm * cn
        for k, ck in _pieces(shape.k, t.k):
            p["CUBE"] += c * ck * mmad_cycles(ctx.target, m, n, k)
            p["MTE1"] += c * ck * _dma(ctx, "L1_L0", k * n)
        ops = shape.vector_ops + int(shape.float_bias and not plan.cube_bias)
        vec = _dma(ctx, "L0C_UB", m * n) + ops * vector_cycles(ctx.target, m * n)
        p["VECTOR"] += c * vec
        stored = m * n
        if shape.cols:  # kw - 1 vbinary max over the pooled rows, stored
            kw, ow, pw = shape.cols
            stored = m // ow * pw * n
            p["VECTOR"] += c * (kw - 1) * vector_cycles(ctx.target, stored)
        if shape.pooled:  # a vreduce over the pixels and a muls: n means stored
            p["VECTOR"] += c * (vector_cycles(ctx.target, m * n) + vector_cycles(ctx.target, n))
            stored = n
        if shape.out_onchip:
            p["VECTOR"] += c * _dma(ctx, "UB_L1", stored)
        else:
            p["MTE3"] += c * _dma(ctx, "TIER_DDR", stored, out_noc)
            out_bytes += c * stored * eb
        dmas += c * (1 + int(shape.residual))
        if plan.cube_bias:  # ones -> L0A, bias -> L0B, a k = 1 mmad
            p["MTE1"] += c * (_dma(ctx, "L1_L0", m) + _dma(ctx, "L1_L0", n))
            p["CUBE"] += c * mmad_cycles(ctx.target, m, n, 1)
        elif shape.bias:
            p["MTE1"] += c * _dma(ctx, "L1_UB", n * shape.bias_elems)
        if shape.residual and shape.res_onchip:
            p["MTE1"] += c * _dma(ctx, "L1_UB", m * n)
        elif shape.residual:
            p["MTE2"] += c * _dma(ctx, "DDR_UB", m * n, res_noc)
            res_bytes += c * m * n * eb
    return {**p, "dmas": dmas, "res_bytes": res_bytes, "out_bytes": out_bytes}


def _l0c_fits(ctx: LowerContext, accs: tuple[int, ...]) -> bool:
    """Whether an output block's accumulators fit L0C: all of it on one core, its share on a
    mesh. NOTE: measured, on mesh8x8 the whole L0C made the BERT encoder 1,390,677 ->
    1,424,010 cycles."""
    if ctx.target.cores == 1:
        return ctx.tile_bytes(accs, "L0C") <= ctx.room("L0C")
    return ctx.share_fits("L0C", accs)


def _single_l0c(ctx: LowerContext, plan: Blocking, k: int) -> bool:
    """Whether an output block's accumulators (kept in L0C across K blocks) exceed L0C's
    share: the next block's cannot be placed until they drain (block_cost then adds the
    epilogue's VECTOR and MTE3 cycles to the busiest pipe's). NOTE: measured on ResNet-50,
    without that price its stem's bands take one output block each and it is 80 K cycles
    slower; with it, 3,615,481 -> 3,533,955 cycles."""
    if plan.kb >= k:
        return False
    t = plan.tiles
    return not ctx.share_fits("L0C", (t.m * t.n,) * (plan.mb * -(-plan.nb // t.n)))


def acc_group(ctx: LowerContext, t: MatTiles, count: int) -> int:
    """How many of `count` L0 tiles' accumulators (m_t x n_t each) fit L0C's share together
    (at least one: the tile fits alone)."""
    return max(1, largest(lambda g: ctx.share_fits("L0C", (t.m * t.n,) * g), count))


MBlocks = Callable[[MatTiles, int], list[MBlock]]  # the M blocks of (L0 tile, L0 tiles each)


def choose_blocking(
    ctx: LowerContext,
    shape: CubeShape,
    tiles: list[MatTiles],
    m_blocks: MBlocks,
    max_m_tiles: int,
) -> tuple[Blocking, list[MBlock]]:
    """The least-`block_cost` blocking whose L1 blocks fit the tier's share (with L0C holding
    an output block's accumulators: all of it, priced by `_single_l0c`), and its M blocks.

    `m_blocks(tile, count)` splits M into blocks of `count` L0 tiles (at most `max_m_tiles`;
    1 for a conv, whose img2col reads one band per L1 block). NOTE: the `os` blocking of one
    L0 tile per block holds exactly the buffers `fitting_tiles` checked, so some plan fits.
    """
    scored: list[tuple[tuple[int, int, int], Blocking, list[MBlock]]] = []
    for t in tiles:
        for count in candidates(max_m_tiles):
            blocks = m_blocks(t, count)
            if count > 1 and len(blocks) == len(m_blocks(t, count // 2)):
                continue  # no fewer blocks than half as many tiles each
            for plan in _plans(ctx, shape, t, count, blocks):
                for bias_plan in (plan, replace(plan, cube_bias=True))[: 1 + shape.float_bias]:
                    scored.append((block_cost(ctx, shape, bias_plan, blocks), bias_plan, blocks))
    if not scored:
        raise AssertionError("no blocking fits although its one-tile blocking does")
    # NOTE: cycles are an estimate: within its tolerance the fewest bytes moved win (min keeps
    # the first of equals: the enumeration order, deterministic)
    # NOTE: with operands on chip no channel bounds the bytes, and the fastest plan re-reads
    # them over the NoC once per unit (energy): the least cycles x bytes moved wins (measured
    # on BERT-encoder b8 mesh8x8's plan, fastest first: 5.55e6 cycles, 6.89e10 pJ; this:
    # 5.92e6 cycles, 4.07e10 pJ)
    if any(shape.noc):
        _, plan, blocks = min(scored, key=lambda s: (s[0][0] * s[0][1], s[0][2]))
        return plan, blocks
    least = min(cost[0] for cost, _, _ in scored)
    near = [s for s in scored if s[0][0] * CYCLE_TOLERANCE <= least * (CYCLE_TOLERANCE + 1)]
    _, plan, blocks = min(near, key=lambda s: (s[0][1], s[0][2], s[0][0]))
    return plan, blocks


def _plans(
    ctx: LowerContext, shape: CubeShape, t: MatTiles, count: int, blocks: list[MBlock]
) -> Iterator[Blocking]:
    """Every blocking of L0 tile `t` and M blocks `blocks` whose buffers fit their shares."""
    largest_x = max(blocks, key=lambda b: (b.window, b.slack))
    cores = ctx.target.cores

    def l1_fits(nb: int, kb: int, x_kb: int | None = None) -> bool:
        x_k = kb if x_kb is None else x_kb
        x = () if shape.x_onchip else (largest_x.x_elems(x_k, shape.k_quantum),)
        bias = (nb * shape.bias_elems,) if shape.bias else ()
        return ctx.share_fits("L1", (*x, kb * nb, *bias))

    n_options = candidates(shape.n, t.n)
    for nb in n_options:
        if not l1_fits(nb, shape.k):
            continue
        for order, inner in (("ws", len(blocks)), ("is", -(-shape.n // nb))):
            for chunks in candidates(inner) if cores > 1 else [1]:
                yield Blocking(order, t, count, nb, shape.k, chunks)
    for nb in n_options:
        accs = count * -(-nb // t.n)
        if not _l0c_fits(ctx, (t.m * t.n,) * accs):
            break
        for kb in candidates(shape.k, t.k):
            if kb < shape.k and l1_fits(nb, kb):
                yield Blocking("os", t, count, nb, kb)
            if kb < shape.k and l1_fits(nb, kb, shape.k):  # X stationary, W in K blocks
                for chunks in candidates(-(-shape.n // nb)) if cores > 1 else [1]:
                    yield Blocking("is", t, count, nb, kb, chunks)


@dataclass(frozen=True, slots=True)
class MatOperand:
    """A DDR matrix as a strided view: element (i, j) at ref.off + i*rows + j*cols."""

    ref: DdrRef
    rows: int  # element stride between rows
    cols: int  # element stride between columns

    def tile(self, i: int, j: int) -> DdrRef:
        """Reference to element (i, j)."""
        return self.ref.at(i * self.rows + j * self.cols)


@dataclass(frozen=True, slots=True)
class L1Block:
    """A block staged in L1 at `ref`: `rows` x `cols` from (r0, c0), row-major (an X block of
    a conv: K from r0, `meta` its window's (ih, iw, pt, pl))."""

    ref: BufRef
    r0: int
    c0: int
    rows: int
    cols: int
    meta: tuple[int, ...] = ()
    # NOTE: a view of a resident tensor (not owned) is read in place and never freed with the
    # block; `strides` are its (row, column) element strides (empty: row-major, cols wide)
    owned: bool = True
    strides: tuple[int, int] | tuple[()] = ()

    def at(self, r: int, c: int) -> BufRef:
        """Element (r, c) of the block (absolute row and column)."""
        rs, cs = self.strides or (self.cols, 1)
        return self.ref.at((r - self.r0) * rs + (c - self.c0) * cs)


def release(ctx: LowerContext, block: L1Block) -> None:
    """Free an L1 block the lowering loaded (a resident tensor's view stays)."""
    if block.owned:
        ctx.builder.free(block.ref)


@dataclass(frozen=True, slots=True)
class OutView:
    """Where an output tile goes: DDR offset, pattern, DDR strides and UB strides."""

    off: int
    dims: tuple[int, ...]
    ddr_strides: tuple[int, ...]
    ub_strides: tuple[int, ...]


class CubeOps(Protocol):
    """What a cube lowering supplies to the blocked loop nest (`emit_blocked`)."""

    def load_x(self, block: MBlock, k0: int, kb: int) -> L1Block:
        """Load X[block, k0:k0+kb] from DDR into an L1 block."""

    def stage_a(self, x: L1Block, tile: MTile, k0: int, kt: int) -> BufRef:
        """Move X[tile, k0:k0+kt] from its L1 block into L0A (row-major m x kt)."""

    def out_view(self, tile: MTile, n0: int, nt: int) -> OutView:
        """Where output tile (tile, n0:n0+nt) goes in the output tensor."""

    def extra(self, ub: BufRef, tile: MTile, n0: int, nt: int) -> None:
        """The lowering's own epilogue step on a UB tile before residual and activation."""


@dataclass(frozen=True, slots=True)
class CubeIo:
    """The generic operands of a blocked product: W as a K x N view, the per-N bias, the
    output and the residual tensor (fuse-residual; its tile's view is the output's)."""

    w: MatOperand
    bias: DdrRef | None
    out: DdrRef
    residual: DdrRef | None
    # int8: (zero point, lo, hi) of the `requant` out of L0C; `bias` is then the requant
    # records (REQUANT_BYTES per column)
    requant: tuple[int, int, int] | None = None
    # a global average pool in the epilogue: each output tile is all `pool` pixels of an image
    # (N-major output: its offset is the image's and channel's times `pool`), stored as its
    # columns' means (0: the tile is stored)
    pool: int = 0
    # a max pool's column pass in the epilogue, (kw, sw, dw, pw): each output tile is whole
    # rows (NCHW output), stored as its rows' max over windows of kw columns (dilation dw) at
    # stride sw, pw of them (the output tensor holds rows of pw columns)
    cols: tuple[int, ...] = ()

    @property
    def bias_elems(self) -> int:
        """Elements of `bias` per column."""
        return 1 if self.requant is None else REQUANT_BYTES


def emit_blocked(
    ctx: LowerContext,
    layer: Layer,
    plan: Blocking,
    blocks: list[MBlock],
    ops: CubeOps,
    io: CubeIo,
    k: int,
    n: int,
) -> None:
    """Emit one product by `plan`: each unit (a stationary block and its chunk of the stream,
    or an `os` output block) is an independent tile of the layer (`ctx.next_tile`)."""
    nest = _Nest(ctx, layer, plan, ops, io, k)
    n_blocks = split(n, plan.nb)
    if plan.order == "ws":
        for n0, nb in n_blocks:
            for chunk in _chunks(blocks, plan.chunks):
                ctx.next_tile()
                w, bias = nest.load_w(n0, nb, 0, k), nest.load_bias(n0, nb)
                for block in chunk:
                    x = ops.load_x(block, 0, k)
                    nest.full_k(block, x, w, bias)
                    release(ctx, x)
                nest.free(w, bias)
    elif plan.order == "is":
        for block in blocks:
            for chunk in _chunks(n_blocks, plan.chunks):
                ctx.next_tile()
                x = ops.load_x(block, 0, k)
                for n0, nb in chunk:
                    if plan.kb < k:
                        nest.output_block(block, n0, nb, x)
                        continue
                    w, bias = nest.load_w(n0, nb, 0, k), nest.load_bias(n0, nb)
                    nest.full_k(block, x, w, bias)
                    nest.free(w, bias)
                release(ctx, x)
    else:
        for block in blocks:
            for n0, nb in n_blocks:
                ctx.next_tile()
                nest.output_block(block, n0, nb)


def emit_staged(
    ctx: LowerContext,
    layer: Layer,
    plan: Blocking,
    block: MBlock,
    ops: CubeOps,
    io: CubeIo,
    k: int,
    staged: tuple[L1Block, L1Block, L1Block | None],
) -> None:
    """The `ws` product of one M block whose X, W (all of K and N) and bias blocks the caller
    has staged in L1 (`staged`: views of buffers it frees itself)."""
    _Nest(ctx, layer, plan, ops, io, k).full_k(block, *staged)


def _chunks(items: list, count: int) -> list[list]:
    """`items` in `count` contiguous chunks of near-equal length (none empty)."""
    size = -(-len(items) // min(count, len(items)))
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass(slots=True)
class _Nest:
    """The inner loops of `emit_blocked`: L0 tiles inside L1 blocks, and the epilogue."""

    ctx: LowerContext
    layer: Layer
    plan: Blocking
    ops: CubeOps
    io: CubeIo
    k: int

    def load_w(self, n0: int, nb: int, k0: int, kb: int) -> L1Block:
        """W[k0:k0+kb, n0:n0+nb] into an L1 block (row-major); of W held in L1 (a cascaded
        layer's, a copy of its DDR tensor: npucc.backend.lower.cascade), a view of it."""
        bld, w = self.ctx.builder, self.io.w
        held = bld.resident(w.ref.key)
        if held is not None:
            view = held.at(w.tile(k0, n0).off)
            return L1Block(view, k0, n0, kb, nb, owned=False, strides=(w.rows, w.cols))
        ref = bld.alloc("L1", kb * nb, f"{self.layer.name}.w")
        bld.emit(Copy(ref, w.tile(k0, n0), (kb, nb), (nb, 1), (w.rows, w.cols)))
        return L1Block(ref, k0, n0, kb, nb)

    def load_bias(self, n0: int, nb: int) -> L1Block | None:
        """The bias of columns n0:n0+nb into L1 (None without a bias)."""
        if self.io.bias is None:
            return None
        bld = self.ctx.builder
        per = self.io.bias_elems
        held = bld.resident(self.io.bias.key)
        if held is not None:
            return L1Block(held.at(self.io.bias.off + n0 * per), 0, n0, 1, nb, owned=False)
        b = bld.alloc("L1", nb * per, f"{self.layer.name}.bias")
        bld.emit(Copy(b, self.io.bias.at(n0 * per), (nb * per,), (1,), (1,)))
        return L1Block(b, 0, n0, 1, nb)

    def free(self, w: L1Block, bias: L1Block | None) -> None:
        """Free a W block and its bias (views of held ones stay)."""
        release(self.ctx, w)
        if bias is not None:
            release(self.ctx, bias)

    def stage_b(self, w: L1Block, k0: int, kt: int, n0: int, nt: int) -> BufRef:
        """Move W[k0:k0+kt, n0:n0+nt] from its L1 block into L0B (row-major kt x nt)."""
        bld = self.ctx.builder
        b0 = bld.alloc("L0B", kt * nt, f"{self.layer.name}.b0")
        bld.emit(Copy(b0, w.at(k0, n0), (kt, nt), (nt, 1), w.strides or (w.cols, 1)))
        return b0

    def hold_b(self, w: L1Block, tiles: int) -> dict[tuple[int, int], BufRef]:
        """Every L0B tile of W block `w`, staged once for the `tiles` M tiles that use it when
        they all fit the L0B share (else none: `products` stages each per M tile)."""
        t = self.plan.tiles
        pieces = [
            (k0, kt, n0, nt) for k0, kt in split(w.rows, t.k) for n0, nt in split(w.cols, t.n)
        ]
        if tiles < 2 or not self.ctx.share_fits("L0B", tuple(kt * nt for _, kt, _, nt in pieces)):
            return {}
        return {
            (w.r0 + k0, w.c0 + n0): self.stage_b(w, w.r0 + k0, kt, w.c0 + n0, nt)
            for k0, kt, n0, nt in pieces
        }

    @property
    def cube_bias(self) -> bool:
        """Whether the accumulators start as the bias (a float layer's; `bias_into`)."""
        return self.plan.cube_bias

    def ones(self, block: MBlock) -> BufRef | None:
        """With `cube_bias`, an L1 vector of 1.0 as long as `block`'s longest tile (filled in
        UB); else None."""
        if not self.cube_bias:
            return None
        bld, m = self.ctx.builder, max(tile.m for tile in block.tiles)
        fill = bld.alloc("UB", m, f"{self.layer.name}.ones")
        bld.emit(VFill(fill, (m,), (1,), 1.0))
        ones = bld.alloc("L1", m, f"{self.layer.name}.ones")
        bld.emit(Copy(ones, fill, (m,), (1,), (1,)))
        bld.free(fill)
        return ones

    def bias_into(
        self,
        accs: list[BufRef],
        tile: MTile,
        cols: list[tuple[int, int]],
        bias: L1Block | None,
        ones: BufRef | None,
    ) -> None:
        """accs[j] += ones[tile.m x 1] @ bias[1 x cols[j]]: the bias added by the cube after
        the products (a k = 1 mmad instead of a vector add per output tile; last, so that only
        the tile's epilogue waits for the ones)."""
        if ones is None:
            return
        assert bias is not None
        bld, m = self.ctx.builder, tile.m
        a0 = bld.alloc("L0A", m, f"{self.layer.name}.a1")
        bld.emit(Copy(a0, ones, (m,), (1,), (1,)))
        for acc, (n0, nt) in zip(accs, cols, strict=True):
            b0 = bld.alloc("L0B", nt, f"{self.layer.name}.b1")
            bld.emit(Copy(b0, bias.ref.at(n0 - bias.c0), (nt,), (1,), (1,)))
            bld.emit(Mmad(acc, a0, b0, m, nt, 1, 1))
            bld.free(b0)
        bld.free(a0)

    def products(
        self,
        tile: MTile,
        x: L1Block,
        w: L1Block,
        cols: list[tuple[int, int]],
        accs: list[BufRef],
        held: dict[tuple[int, int], BufRef],
    ) -> None:
        """accs[j] (+)= X[tile, W's K block] @ W[K block, cols[j]]: per L0 K tile, the A tile
        staged once for all the columns, one B tile (`held`'s, or staged here) and one mmad
        per column."""
        bld = self.ctx.builder
        for k0, kt in split(w.rows, self.plan.tiles.k):
            k_abs = w.r0 + k0
            a0 = self.ops.stage_a(x, tile, k_abs, kt)
            for acc, (n0, nt) in zip(accs, cols, strict=True):
                kept = held.get((k_abs, n0))
                b0 = kept if kept is not None else self.stage_b(w, k_abs, kt, n0, nt)
                bld.emit(Mmad(acc, a0, b0, tile.m, nt, kt, 0 if k_abs == 0 else 1))
                if kept is None:
                    bld.free(b0)
            bld.free(a0)

    def accs(self, tile: MTile, cols: list[tuple[int, int]]) -> list[BufRef]:
        """One L0C accumulator per column range of `tile`."""
        name = f"{self.layer.name}.acc"
        return [self.ctx.builder.alloc("L0C", tile.m * nt, name) for _, nt in cols]

    def full_k(self, block: MBlock, x: L1Block, w: L1Block, bias: L1Block | None) -> None:
        """Every output tile of (block, W block): all of K accumulated, then its epilogue; the
        W block's L0 tiles in groups whose accumulators fit L0C together."""
        t = self.plan.tiles
        cols = [(w.c0 + n0, nt) for n0, nt in split(w.cols, t.n)]
        group = acc_group(self.ctx, t, len(cols))
        held = self.hold_b(w, len(block.tiles))
        ones = self.ones(block)
        for tile in block.tiles:
            for g0 in range(0, len(cols), group):
                part = cols[g0 : g0 + group]
                accs = self.accs(tile, part)
                res = [self.residual(tile, n0, nt) for n0, nt in part]
                self.products(tile, x, w, part, accs, held)
                self.bias_into(accs, tile, part, bias, ones)
                for acc, (n0, nt), r in zip(accs, part, res, strict=True):
                    self.epilogue(acc, tile, n0, nt, bias, r)
        for b0 in held.values():
            self.ctx.builder.free(b0)
        if ones is not None:
            self.ctx.builder.free(ones)

    def output_block(self, block: MBlock, n0: int, nb: int, held_x: L1Block | None = None) -> None:
        """An output block accumulated over K blocks: per K block, W (and X, unless `held_x`
        holds all of K) into L1 and every tile's mmads; then the epilogues."""
        bld, t = self.ctx.builder, self.plan.tiles
        cols = [(n0 + c0, nt) for c0, nt in split(nb, t.n)]
        accs = [self.accs(tile, cols) for tile in block.tiles]
        # NOTE: only the epilogues read the bias. Where two W blocks take more than the L1
        # share, it is loaded with the last K block: loaded first, DLR may place it between
        # them and split L1 so that the W blocks lose their ping-pong (ResNet-50's stage 4
        # 3x3 convs, 295 KB W blocks beside a 2 KB bias: 89 K cycles); elsewhere it is loaded
        # first (late, its DMA waited in MobileNet v2's epilogues: 5.5 K cycles)
        late = not self.ctx.share_fits("L1", (self.plan.kb * nb,) * 2)
        bias = None if late else self.load_bias(n0, nb)
        pieces = split(self.k, self.plan.kb)
        for k0, kb in pieces:
            x = self.ops.load_x(block, k0, kb) if held_x is None else held_x
            w = self.load_w(n0, nb, k0, kb)
            if late and k0 == pieces[-1][0]:
                bias = self.load_bias(n0, nb)
            held = self.hold_b(w, len(block.tiles))
            for tile, tile_accs in zip(block.tiles, accs, strict=True):
                self.products(tile, x, w, cols, tile_accs, held)
            for b0 in held.values():
                bld.free(b0)
            if held_x is None:
                release(self.ctx, x)
            release(self.ctx, w)
        ones = self.ones(block)
        for tile, tile_accs in zip(block.tiles, accs, strict=True):
            self.bias_into(tile_accs, tile, cols, bias, ones)
            for acc, (c0, nt) in zip(tile_accs, cols, strict=True):
                self.epilogue(acc, tile, c0, nt, bias)
        if ones is not None:
            bld.free(ones)
        if bias is not None:
            release(self.ctx, bias)

    def requant(
        self, ub: BufRef, acc: BufRef, tile: MTile, n0: int, nt: int, bias: L1Block | None
    ) -> None:
        """int8: the accumulators requantized into UB by their columns' records."""
        assert bias is not None and self.io.requant is not None  # int8 layers have records
        bld, per = self.ctx.builder, REQUANT_BYTES
        rec = bld.alloc("UB", nt * per, "requant")
        bld.emit(Copy(rec, bias.ref.at((n0 - bias.c0) * per), (nt * per,), (1,), (1,)))
        bld.emit(Requant(ub, acc, rec, tile.m, nt, *self.io.requant))
        bld.free(rec)
        bld.free(acc)

    def residual(self, tile: MTile, n0: int, nt: int) -> BufRef | None:
        """The residual tile of (tile, n0:n0+nt) loaded into UB (None without a residual).
        NOTE: loaded before the tile's products, so its DMA overlaps them (the epilogue only
        adds it)."""
        if self.io.residual is None:
            return None
        view = self.ops.out_view(tile, n0, nt)
        r = self.ctx.builder.alloc("UB", tile.m * nt, f"{self.layer.name}.res")
        src = self.io.residual.at(view.off)
        self.ctx.builder.emit(Copy(r, src, view.dims, view.ub_strides, view.ddr_strides))
        return r

    def epilogue(
        self,
        acc: BufRef,
        tile: MTile,
        n0: int,
        nt: int,
        bias: L1Block | None,
        res: BufRef | None = None,
    ) -> None:
        """L0C -> UB (int8: requantized with the bias), the lowering's extra step, + residual
        (`res`, preloaded, or loaded here), activation, store (a float bias is already in the
        accumulator: `bias_into`)."""
        bld, layer = self.ctx.builder, self.layer
        m = tile.m
        ub = bld.alloc("UB", m * nt, f"{layer.name}.out")
        if self.io.requant is not None:
            self.requant(ub, acc, tile, n0, nt, bias)
        else:
            bld.emit(Copy(ub, acc, (m * nt,), (1,), (1,)))
            bld.free(acc)
        if bias is not None and self.io.requant is None and not self.cube_bias:
            b = bld.alloc("UB", nt, "bias")
            bld.emit(Copy(b, bias.ref.at(n0 - bias.c0), (nt,), (1,), (1,)))
            bld.emit(VBinary("add", ub, ub, b, (m, nt), (nt, 1), (nt, 1), (0, 1)))
            bld.free(b)
        self.ops.extra(ub, tile, n0, nt)
        view = self.ops.out_view(tile, n0, nt)
        if self.io.residual is not None:
            r = res if res is not None else self.residual(tile, n0, nt)
            assert r is not None
            q = tuple(layer.attrs.get("res_q", ()))  # int8: the fused add's requantization
            bld.emit(VBinary("add", ub, ub, r, (m * nt,), (1,), (1,), (1,), q))
            bld.free(r)
        apply_activation(self.ctx, ub, m * nt, layer.attrs)
        if self.io.pool:  # a whole image's tile: its means at the view's offset / pixels
            ub = self.pool(ub, m, nt)
            view = OutView(view.off // m, (nt,), (1,), (1,))
        if self.io.cols:  # whole rows of ow columns, ow the view's row stride: pw of them
            ub, view = self.pool_cols(ub, view)
        dst = self.io.out.at(view.off)
        bld.emit(Copy(dst, ub, view.dims, view.ddr_strides, view.ub_strides))
        bld.free(ub)

    def pool_cols(self, ub: BufRef, view: OutView) -> tuple[BufRef, OutView]:
        """The max over windows of columns of the tile's rows (`CubeIo.cols`), in a new UB
        tile (`ub` freed), and where it goes: `view` with rows of pw columns."""
        bld, (kw, sw, dw, pw) = self.ctx.builder, self.io.cols
        nt, rows, ow = view.dims
        pooled = bld.alloc("UB", rows * pw * nt, f"{self.layer.name}.cols")
        dims, dense, wide = (rows, pw, nt), (pw * nt, nt, 1), (ow * nt, sw * nt, 1)
        bld.emit(VBinary("max", pooled, ub, ub.at(dw * nt), dims, dense, wide, wide))
        for j in range(2, kw):
            bld.emit(VBinary("max", pooled, pooled, ub.at(j * dw * nt), dims, dense, dense, wide))
        bld.free(ub)
        plane = view.ddr_strides[0] // ow * pw
        out = OutView(view.off // ow * pw, (nt, rows, pw), (plane, pw, 1), (1, pw * nt, nt))
        return pooled, out

    def pool(self, ub: BufRef, m: int, nt: int) -> BufRef:
        """The means over the tile's `m` pixels of its `nt` columns (UB, pixel-major), in a
        new UB vector (`ub` freed)."""
        bld = self.ctx.builder
        mean = bld.alloc("UB", nt, f"{self.layer.name}.pool")
        bld.emit(VReduce("sum", mean, ub, (nt, m), (1,), (1, nt), 1))
        bld.emit(VUnary("muls", mean, mean, (nt,), (1,), (1,), (1.0 / m,)))
        bld.free(ub)
        return mean
