"""The cost function of a cube layer's blockings (`blocking.py`'s search prices every candidate
here): per plan its busiest pipe's cycles on the busiest core (or the DDR channel's bound),
bytes moved and DMAs, with target/cost.py's formulas, and the lower bounds the search orders
and cuts its plans by (`cycle_floor`, `product_floor`)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.l0_tiles import MatTiles, acc_group
from npucc.target.cost import ddr_bound, dma_cycles, mmad_cycles, noc_cycles, vector_cycles

if TYPE_CHECKING:  # NOTE: blocking.py (the search, and these types' home) imports this module
    from npucc.backend.lower.blocking import Blocking, CubeShape, MBlock


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
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any] | None = None,
) -> tuple[int, int, int]:
    """(cycles, bytes moved, DMAs) of a layer lowered by `plan` over the M blocks `blocks`
    (`memo`: what the prices of one layer's plans share, kept by the caller while `blocks`
    lives).

    Cycles: the busiest pipe's on the busiest core (the layer's units, stationary blocks with
    their streams, spread round-robin over its cores), or the DDR bound of its DDR bytes if
    more; each DMA priced by dma_cycles (noc_cycles for an operand kept on chip, whose bytes
    do not pass the DDR channel), each mmad by mmad_cycles, each vector op by vector_cycles.
    Bytes moved: to or from DDR, or over the NoC.
    """
    return priced(ctx, shape, plan, blocks, memo)[0]


def priced(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any] | None = None,
) -> tuple[tuple[int, int, int], tuple[int, ...]]:
    """`block_cost` and the plan's per-pipe cycles, busiest first."""
    return variants(ctx, shape, (plan,), blocks, memo)[0]


def variants(
    ctx: LowerContext,
    shape: CubeShape,
    plans: tuple[Blocking, ...],
    blocks: list[MBlock],
    memo: dict[Hashable, Any] | None = None,
) -> list[tuple[tuple[int, int, int], tuple[int, ...]]]:
    """`priced` of each of `plans`, which differ in `cube_bias` only (what does not depend on
    it worked out once; what does not depend on the operands on chip, `CubeShape.noc`, once
    per plan and `memo`)."""
    plan = plans[0]
    x_noc, w_noc, out_noc, res_noc = shape.noc
    if memo is None:
        memo = {}
    at, part = _part_of(ctx, shape, plan, blocks, memo)
    through, passes_w, passes_x, per_core, single, w_bytes, x_bytes, w_cyc, x_cyc, fill = part
    if w_noc or x_noc:  # the DMAs' cycles over the NoC
        w_cyc, x_cyc, fill = _noc_pass(ctx, shape, plan, blocks, memo, at, part)
    inst = shape.instances
    out = []
    for variant in plans:
        # NOTE: the tiles' pipes read of the plan only its L0 tile, N block, whether K is
        # blocked and where the bias is added
        key = (id(blocks), variant.tiles, variant.nb, variant.kb < shape.k, variant.cube_bias,
               out_noc, res_noc)  # fmt: skip
        if key not in memo:
            memo[key] = _tile_pipes(ctx, shape, variant, blocks)
        pipes = dict(memo[key])
        pipes["MTE2"] += w_cyc * passes_w + x_cyc * passes_x
        dmas = through + pipes.pop("dmas")
        res, written = pipes.pop("res_bytes"), pipes.pop("out_bytes")
        moved = (w_bytes + x_bytes + res + written) * inst
        reads = (w_bytes * (not w_noc) + x_bytes * (not x_noc) + res * (not res_noc)) * inst
        writes = written * (not out_noc) * inst
        busiest = max(pipes.values()) * per_core
        if single:
            busiest += (pipes["VECTOR"] + pipes["MTE3"]) * per_core
        cycles = max(math.ceil(busiest), ddr_bound(ctx.target, reads, writes))
        loads = tuple(sorted(pipes.values(), reverse=True))
        hidden = _hidden(shape, variant, len(blocks), cycles)
        out.append(((cycles - hidden + fill, moved, dmas), loads))
    return out


class _Part(NamedTuple):
    """What `variants` reads of a plan but its tiles' pipes, its operands through DDR."""

    dmas: int  # the DMAs of every W and X pass
    passes_w: int
    passes_x: int
    per_core: float  # the share of the units a core runs
    single: bool  # `_single_l0c`
    w_bytes: int
    x_bytes: int
    w_cyc: int  # W's DMA cycles of one pass
    x_cyc: int  # X's
    fill: int  # the first X block's load (`_fill`)


def _part_of(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
) -> tuple[tuple, _Part]:
    """`_part` of `plan` over `blocks`, memoised, and its key in `memo` (`_noc_pass`'s too)."""
    # NOTE: keyed by the plan whatever its `cube_bias`, and by the flags of `shape.noc` each
    # piece reads: one memo serves the searches of a layer under every set of operands on chip
    # (`Candidates`), whose shapes differ in `noc` only
    at = (id(blocks), replace(plan, cube_bias=False) if plan.cube_bias else plan)
    part = memo.get(at)
    if part is None:
        part = memo[at] = _part(ctx, shape, plan, blocks, memo)
    return at, part


def _part(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
) -> _Part:
    """What `variants` reads of `plan` over `blocks` but its tiles' pipes, its operands
    through DDR (`_noc_pass`: the cycles that differ when some are on chip)."""
    n_pieces = _pieces(shape.n, plan.nb)
    n_blocks = sum(c for _, c in n_pieces)
    k_pieces = _pieces(shape.k, plan.kb)
    k_blocks = sum(c for _, c in k_pieces)
    x_pieces = _x_pieces(shape, plan)
    w_el = shape.n * shape.k
    if shape.bias:
        w_el += shape.n * shape.bias_elems
    x_cyc, x_el = _x_pass(ctx, shape, blocks, x_pieces, False, memo)
    w_dmas = n_blocks * k_blocks * (1 + int(shape.bias))
    passes_w, passes_x, per_core = _passes(ctx, shape, plan, len(blocks), n_blocks)
    x_dmas = 0 if shape.x_onchip else len(blocks) * len(x_pieces) * passes_x
    eb = ctx.target.elem_bytes
    return _Part(
        w_dmas * passes_w + x_dmas,
        passes_w,
        passes_x,
        per_core,
        _single_l0c(ctx, plan, shape.k),
        w_el * passes_w * eb,
        x_el * passes_x * eb,
        _w_pass(ctx, shape, plan, memo),
        x_cyc,
        _fill(ctx, shape, blocks, x_pieces, False),
    )


def _passes(
    ctx: LowerContext, shape: CubeShape, plan: Blocking, m_blocks: int, n_blocks: int
) -> tuple[int, int, float]:
    """Passes over W and over X of `plan` (M blocks and N blocks as given) and the share of
    the layer's units a core runs (`_Part.per_core`)."""
    if plan.order == "ws":  # W once per chunk, X once per N block
        passes_w, passes_x, units = plan.chunks, n_blocks, n_blocks * plan.chunks
    elif plan.order == "is":  # X once per chunk, W once per M block
        passes_w, passes_x, units = m_blocks, plan.chunks, m_blocks * plan.chunks
    else:  # both once per output block
        passes_w, passes_x, units = m_blocks, n_blocks, m_blocks * n_blocks
    inst = shape.instances
    units *= inst
    return passes_w, passes_x, math.ceil(units / ctx.target.cores) * inst / units


def cycle_floor(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
) -> int:
    """A lower bound of the cycles `variants` gives `plan` (either place of its bias) through
    DDR: its L0 tiles' CUBE cycles or its W and X passes' DMA cycles (MTE2's, without the
    epilogue's residual loads), the more, on the busiest core (the busiest pipe's are no
    fewer); 0 where X blocks may hide behind the producer's writes (`_x_hides`)."""
    if _x_hides(shape, plan):
        return 0
    n_blocks = -(-shape.n // plan.nb)
    passes_w, passes_x, per_core = _passes(ctx, shape, plan, len(blocks), n_blocks)
    x_cyc = _x_pass(ctx, shape, blocks, _x_pieces(shape, plan), False, memo)[0]
    dma = _w_pass(ctx, shape, plan, memo) * passes_w + x_cyc * passes_x
    return math.ceil(max(_cube(ctx, shape, plan.tiles, blocks, memo), dma) * per_core)


def _cube(
    ctx: LowerContext,
    shape: CubeShape,
    t: MatTiles,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
) -> int:
    """`_tile_pipes`' CUBE cycles of L0 tile `t` over `blocks` with a vector bias (a cube bias
    only adds to them), memoised."""
    key = ("cube", id(blocks), t)
    cube = memo.get(key)
    if cube is None:
        m_count = Counter(tile.m for b in blocks for tile in b.tiles)
        cube = memo[key] = sum(
            cm * cn * ck * mmad_cycles(ctx.target, m, n, k)
            for (m, cm), (n, cn), (k, ck) in itertools.product(
                m_count.items(), _pieces(shape.n, t.n), _pieces(shape.k, t.k)
            )
        )
    return cube


def product_floor(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
) -> int:
    """A lower bound of the cycles x bytes moved `variants` gives `plan` (either place of its
    bias) with operands on chip (`shape.noc`): `cycle_floor`'s cycles with W's and X's passes at
    their NoC or DDR DMA cycles (`_noc_pass`), times the bytes of those passes (the epilogue's
    residual and output bytes only add to them); 0 where `_x_hides`."""
    if _x_hides(shape, plan):
        return 0
    at, part = _part_of(ctx, shape, plan, blocks, memo)
    moved = (part.w_bytes + part.x_bytes) * shape.instances
    w_cyc, x_cyc, _ = _noc_pass(ctx, shape, plan, blocks, memo, at, part)
    dma = w_cyc * part.passes_w + x_cyc * part.passes_x
    return math.ceil(max(_cube(ctx, shape, plan.tiles, blocks, memo), dma) * part.per_core) * moved


def _noc_pass(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
    key: tuple,
    part: _Part,
) -> tuple[int, int, int]:
    """`_part`'s W and X cycles of one pass and fill with W and X on chip as `shape.noc`
    says (memoised by `_part`'s `key` and those flags)."""
    x_noc, w_noc = shape.noc[:2]
    flags = (*key, x_noc, w_noc)
    value = memo.get(flags)
    if value is None:
        x_pieces = _x_pieces(shape, plan)
        value = memo[flags] = (
            _w_cycles(ctx, shape, plan, True) if w_noc else part.w_cyc,
            _x_pass(ctx, shape, blocks, x_pieces, True, memo)[0] if x_noc else part.x_cyc,
            _fill(ctx, shape, blocks, x_pieces, True) if x_noc else part.fill,
        )
    return value


def _x_pieces(shape: CubeShape, plan: Blocking) -> list[tuple[int, int]]:
    """The K pieces of the plan's X blocks (all of K but under `os`)."""
    return _pieces(shape.k, plan.x_kb) if plan.order == "os" else [(shape.k, 1)]


def _w_pass(ctx: LowerContext, shape: CubeShape, plan: Blocking, memo: dict[Hashable, Any]) -> int:
    """`_w_cycles` through DDR, memoised by the plan's N and K blocks (plans share them)."""
    key = ("w", plan.nb, plan.kb)
    value = memo.get(key)
    if value is None:
        value = memo[key] = _w_cycles(ctx, shape, plan, False)
    return value


def _w_cycles(ctx: LowerContext, shape: CubeShape, plan: Blocking, w_noc: bool) -> int:
    """DMA cycles of one pass over every W block (with its bias), on chip as `w_noc` says."""
    n_pieces = _pieces(shape.n, plan.nb)
    w_cyc = sum(
        ck * cn * _dma(ctx, "DDR_L1", kb * nb, w_noc)
        for kb, ck in _pieces(shape.k, plan.kb)
        for nb, cn in n_pieces
    )
    if shape.bias:
        w_cyc += sum(cn * _dma(ctx, "DDR_L1", nb * shape.bias_elems, w_noc) for nb, cn in n_pieces)
    return w_cyc


def _fill(
    ctx: LowerContext,
    shape: CubeShape,
    blocks: list[MBlock],
    x_pieces: list[tuple[int, int]],
    x_noc: bool,
) -> int:
    """The first X block's load, which nothing of the layer overlaps.

    NOTE: the first X block waits for the layer's input and nothing of the layer overlaps its
    load (a W block depends on nothing: the scheduler may load it earlier)."""
    if shape.x_onchip:
        return 0
    return _dma(ctx, "DDR_L1", blocks[0].x_elems(x_pieces[0][0], shape.k_quantum), x_noc)


def _x_hides(shape: CubeShape, plan: Blocking) -> bool:
    """Whether some of `plan`'s cycles may run while the layer's producer still writes X
    channel group after channel group (`CubeShape.x_by_channels`): under `os` with X in K
    blocks. NOTE: X blocks of every channel (`is`, `ws`) wait for the producer's last write.
    The floors are 0 for such a plan (`_hidden` takes cycles off what `variants` gives)."""
    return shape.x_by_channels and plan.order == "os" and plan.x_kb < shape.k


def _hidden(shape: CubeShape, plan: Blocking, m_blocks: int, cycles: int) -> int:
    """Of a layer's `cycles`, those that run while its producer still writes X (`_x_hides`):
    the first M block's K blocks but the last (their share of the layer's K blocks)."""
    if not _x_hides(shape, plan):
        return 0
    x_blocks = -(-shape.k // plan.x_kb)
    return cycles * (x_blocks - 1) // (x_blocks * m_blocks)


def _x_pass(
    ctx: LowerContext,
    shape: CubeShape,
    blocks: list[MBlock],
    x_pieces: list[tuple[int, int]],
    x_noc: bool,
    memo: dict[Hashable, Any],
) -> tuple[int, int]:
    """`_x_cost`, memoised by M blocks, K pieces and `x_noc` (plans share them)."""
    key = (id(blocks), x_noc, *x_pieces)
    value = memo.get(key)
    if value is None:
        value = memo[key] = _x_cost(ctx, shape, blocks, x_pieces, x_noc)
    return value


def _x_cost(
    ctx: LowerContext,
    shape: CubeShape,
    blocks: list[MBlock],
    x_pieces: list[tuple[int, int]],
    x_noc: bool,
) -> tuple[int, int]:
    """Cycles and elements of one pass over every X block, in K pieces `x_pieces` (X on chip
    as `x_noc` says)."""
    x_cyc = x_el = 0
    for b in blocks if not shape.x_onchip else ():
        for kb, ck in x_pieces:
            elems = b.x_elems(kb, shape.k_quantum) - b.slack
            x_cyc += ck * _dma(ctx, "DDR_L1", elems, x_noc)
            x_el += ck * elems
    return x_cyc, x_el


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
