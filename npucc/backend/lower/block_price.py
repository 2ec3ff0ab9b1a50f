"""The cost function of a cube layer's blockings (`blocking.py`'s search prices every candidate
here): per plan its busiest pipe's cycles on the busiest core (or the DDR channel's bound),
bytes moved and DMAs, with target/cost.py's formulas, and the lower bounds the search orders
and cuts its plans by (`cycle_floor`, `product_floors`)."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.l0_tiles import MatTiles, acc_group
from npucc.target.cost import ddr_bound, dma_cycles, mmad_cycles, noc_cycles, vector_cycles

if TYPE_CHECKING:  # NOTE: blocking.py (the search, and these types' home) imports this module
    from npucc.backend.lower.blocking import Blocking, CubeShape, MBlock


@lru_cache(maxsize=4096)
def _pieces(total: int, tile: int) -> tuple[tuple[int, int], ...]:
    """(size, count) of the pieces `split(total, tile)` gives (memoised: a search asks the
    same few per plan)."""
    full, rest = divmod(total, tile)
    return ((tile, full),) * bool(full) + ((rest, 1),) * bool(rest)


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
    part = _part_of(ctx, shape, plan, blocks, memo)
    through, passes_w, passes_x, per_core, single, w_bytes, x_bytes, w_cyc, x_cyc, fill = part
    if w_noc or x_noc:  # the DMAs' cycles over the NoC
        w_cyc, x_cyc, fill = _noc_pass(ctx, shape, plan, blocks, memo, (w_cyc, x_cyc, fill))
    inst = shape.instances
    out = []
    for variant in plans:
        tp = _tiles_of(ctx, shape, variant, blocks, memo)
        pipes = {
            "MTE1": tp.mte1,
            "MTE2": (tp.mte2_noc if res_noc else tp.mte2) + w_cyc * passes_w + x_cyc * passes_x,
            "CUBE": tp.cube,
            "VECTOR": tp.vector,
            "MTE3": tp.mte3_noc if out_noc else tp.mte3,
        }
        dmas = through + tp.dmas
        res, written = tp.res_bytes, tp.out_bytes
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
) -> _Part:
    """`_part` of `plan` over `blocks`, memoised."""
    # NOTE: keyed by the plan whatever its `cube_bias` (and `_noc_pass`'s pieces by the flags of
    # `shape.noc` each reads): one memo serves the searches of a layer under every set of
    # operands on chip (`Candidates`), whose shapes differ in `noc` only
    at = (id(blocks), replace(plan, cube_bias=False) if plan.cube_bias else plan)
    part = memo.get(at)
    if part is None:
        part = memo[at] = _part(ctx, shape, plan, blocks, memo)
    return part


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
    w_el = _w_elems(shape)
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
        _single_l0c(ctx, plan, shape.k, memo),
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
    fewer), or the DDR bound of those passes' bytes (on a mesh, whose cores share the DDR
    channel, what binds most plans: light ResNet-50 mesh8x8's profiles' 24 searches without
    operands on chip, 11,027 plans priced -> 2,478); 0 where X blocks may hide behind the
    producer's writes (`_x_hides`)."""
    if _x_hides(shape, plan):
        return 0
    n_blocks = -(-shape.n // plan.nb)
    passes_w, passes_x, per_core = _passes(ctx, shape, plan, len(blocks), n_blocks)
    x_cyc, x_el = _x_pass(ctx, shape, blocks, _x_pieces(shape, plan), False, memo)
    dma = _w_pass(ctx, shape, plan, memo) * passes_w + x_cyc * passes_x
    cycles = math.ceil(max(_cube(ctx, shape, plan.tiles, blocks, memo), dma) * per_core)
    reads = (_w_elems(shape) * passes_w + x_el * passes_x) * ctx.target.elem_bytes
    return max(cycles, ddr_bound(ctx.target, reads * shape.instances, 0))


def _w_elems(shape: CubeShape) -> int:
    """Elements of W with its bias."""
    return shape.n * shape.k + (shape.n * shape.bias_elems if shape.bias else 0)


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


Plan = tuple["list[MBlock]", "Blocking", bool, "Blocking | None"]  # blocks, plan, held, cube


def product_floors(
    ctx: LowerContext, shape: CubeShape, plans: list[Plan], memo: dict[Hashable, Any]
) -> np.ndarray:
    """Per plan of `plans` (its M blocks, itself, whether held and its `cube_bias` variant or
    None: one `Candidates`' plans, whose `memo` this is), a lower bound of the cycles x bytes
    moved `variants` gives either variant with operands on chip (`shape.noc`), float64.

    NOTE: the figures `variants` works out, for every plan at once: a plan's floor is its
    product within a cycle (one cycle below, and a part in 1e12 below, whatever the floats'
    rounding), so that the search prices little more than the least (light ResNet-50
    mesh8x8's profiles: 45,369 plans, 31,730 priced by the floor of CUBE and the passes' DMAs
    -> 1,558)."""
    part, xb, mb, hides, per_core = _part_arrays(ctx, shape, plans, memo)
    w_cyc, x_cyc, fill = _noc_arrays(ctx, shape, plans, memo, part)
    _, passes_w, passes_x, single, w_bytes, x_bytes = part[:6]
    x_noc, w_noc, out_noc, res_noc = shape.noc
    inst = shape.instances
    bounds: dict[tuple[int, int], int] = memo.setdefault(_DDR_BOUNDS, {})
    dma = w_cyc * passes_w + x_cyc * passes_x
    product: np.ndarray | None = None
    for cube in (False, True) if shape.float_bias else (False,):
        mte1, mte2, mte2_noc, cub, vector, mte3, mte3_noc, _, res, out = _pipe_arrays(
            ctx, shape, plans, memo, cube
        )
        mte2, mte3 = (mte2_noc if res_noc else mte2), (mte3_noc if out_noc else mte3)
        top = np.maximum.reduce([mte1, mte2 + dma, cub, vector, mte3])
        busiest = top.astype(np.float64) * per_core
        drain = busiest + (vector + mte3).astype(np.float64) * per_core
        busiest = np.where(single != 0, drain, busiest)
        reads = (w_bytes * (not w_noc) + x_bytes * (not x_noc) + res * (not res_noc)) * inst
        writes = out * (not out_noc) * inst
        ddr = []
        for pair in zip(reads.tolist(), writes.tolist(), strict=True):
            bound = bounds.get(pair)
            if bound is None:
                bound = bounds[pair] = ddr_bound(ctx.target, *pair)
            ddr.append(bound)
        low = np.maximum(np.ceil(busiest).astype(np.int64) - 1, np.array(ddr, np.int64))
        low -= np.where(hides, low * (xb - 1) // (xb * mb), 0)
        moved = (w_bytes + x_bytes + res + out) * inst
        floor = (low + fill).astype(np.float64) * moved.astype(np.float64) * (1 - 1e-12)
        product = floor if product is None else np.minimum(product, floor)
    assert product is not None
    return product


def _part_arrays(
    ctx: LowerContext, shape: CubeShape, plans: list[Plan], memo: dict[Hashable, Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`product_floors`' figures of `plans` that do not depend on the operands on chip (memoised):
    their `_Part`s' DMAs, passes over W and X, `single`, W and X bytes, W and X cycles and
    fill as rows of one array; X's K blocks and the M blocks (`_hidden`'s), whether X hides
    (`_x_hides`) and the share of the units a core runs."""
    found = memo.get(_PART_ARRAYS)
    if found is None:
        rows, xb, mb, hides, per_core = [], [], [], [], []
        for blocks, plan, _, _ in plans:
            p = _part_of(ctx, shape, plan, blocks, memo)
            rows.append((p.dmas, p.passes_w, p.passes_x, p.single, p.w_bytes, p.x_bytes,
                         p.w_cyc, p.x_cyc, p.fill))  # fmt: skip
            xb.append(-(-shape.k // plan.x_kb))
            mb.append(len(blocks))
            hides.append(_x_hides(shape, plan))
            per_core.append(p.per_core)
        found = memo[_PART_ARRAYS] = (
            _int_rows(rows, 9).T,
            np.array(xb, np.int64),
            np.array(mb, np.int64),
            np.array(hides, np.bool_),
            np.array(per_core, np.float64),
        )
    return found


def _int_rows(rows: Sequence[Sequence[int]], width: int) -> np.ndarray:
    """`rows` (each `width` ints) as an int64 array of shape (len(rows), width). NOTE: through
    `np.fromiter` over the chained rows: `np.array` walks each row as a sequence (~2x slower
    on a search's ~500 plans)."""
    flat = np.fromiter(itertools.chain.from_iterable(rows), np.int64, len(rows) * width)
    return flat.reshape(len(rows), width)


_PART_ARRAYS = ("part arrays",)  # `_part_arrays`' key in a `Candidates`' memo
_DDR_BOUNDS = ("ddr bounds",)  # `product_floors`' `ddr_bound` by (reads, writes) there


def _noc_arrays(
    ctx: LowerContext,
    shape: CubeShape,
    plans: list[Plan],
    memo: dict[Hashable, Any],
    part: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_noc_pass` of every plan (W and X cycles of one pass, fill) with W and X on chip as
    `shape.noc` says (memoised by those flags)."""
    flags = shape.noc[:2]
    if not any(flags):
        return part[6], part[7], part[8]
    key = ("noc arrays", *flags)
    found = memo.get(key)
    if found is None:
        through = zip(part[6].tolist(), part[7].tolist(), part[8].tolist(), strict=True)
        rows = [
            _noc_pass(ctx, shape, plan, blocks, memo, cycles)
            for (blocks, plan, _, _), cycles in zip(plans, through, strict=True)
        ]
        found = memo[key] = tuple(_int_rows(rows, 3).T)
    return found


def _pipe_arrays(
    ctx: LowerContext,
    shape: CubeShape,
    plans: list[Plan],
    memo: dict[Hashable, Any],
    cube: bool,
) -> np.ndarray:
    """`_tile_pipes` of every plan (its `cube_bias` variant if `cube`), the fields of `_Pipes`
    as rows (memoised)."""
    key = ("pipe arrays", cube)
    found = memo.get(key)
    if found is None:
        rows = [
            _tiles_of(ctx, shape, (c or replace(plan, cube_bias=True)) if cube else plan, b, memo)
            for b, plan, _, c in plans
        ]
        found = memo[key] = _int_rows(rows, len(_Pipes._fields)).T
    return found


def _noc_pass(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
    through: tuple[int, int, int],
) -> tuple[int, int, int]:
    """`_part`'s W and X cycles of one pass and fill (`through`: through DDR) with W and X on
    chip as `shape.noc` says (the passes memoised: `_w_pass`, `_x_pass`)."""
    x_noc, w_noc = shape.noc[:2]
    w_cyc, x_cyc, fill = through
    if w_noc:
        w_cyc = _w_pass(ctx, shape, plan, memo, True)
    if x_noc:
        x_pieces = _x_pieces(shape, plan)
        x_cyc = _x_pass(ctx, shape, blocks, x_pieces, True, memo)[0]
        fill = _fill(ctx, shape, blocks, x_pieces, True)
    return w_cyc, x_cyc, fill


def _x_pieces(shape: CubeShape, plan: Blocking) -> tuple[tuple[int, int], ...]:
    """The K pieces of the plan's X blocks (all of K but under `os`)."""
    return _pieces(shape.k, plan.x_kb) if plan.order == "os" else ((shape.k, 1),)


def _w_pass(
    ctx: LowerContext,
    shape: CubeShape,
    plan: Blocking,
    memo: dict[Hashable, Any],
    w_noc: bool = False,
) -> int:
    """`_w_cycles` (through DDR, or on chip as `w_noc` says), memoised by the plan's N and K
    blocks (plans share them)."""
    key = ("w", plan.nb, plan.kb, w_noc)
    value = memo.get(key)
    if value is None:
        value = memo[key] = _w_cycles(ctx, shape, plan, w_noc)
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
    x_pieces: tuple[tuple[int, int], ...],
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
    x_pieces: tuple[tuple[int, int], ...],
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
    x_pieces: tuple[tuple[int, int], ...],
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
) -> _Pipes:
    """Per-pipe cycles of the L0 tiles of one instance, and the epilogue's DMAs and bytes; an
    A tile is staged once per group of N tiles."""
    eb, t = ctx.target.elem_bytes, plan.tiles
    mte2_noc = mte3_noc = 0
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
            p["MTE3"] += c * _dma(ctx, "TIER_DDR", stored)
            mte3_noc += c * _dma(ctx, "TIER_DDR", stored, True)
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
            p["MTE2"] += c * _dma(ctx, "DDR_UB", m * n)
            mte2_noc += c * _dma(ctx, "DDR_UB", m * n, True)
            res_bytes += c * m * n * eb
    return _Pipes(
        p["MTE1"], p["MTE2"], mte2_noc, p["CUBE"], p["VECTOR"], p["MTE3"], mte3_noc, dmas,
        res_bytes, out_bytes,
    )  # fmt: skip


class _Pipes(NamedTuple):
    """`_tile_pipes`: the cycles of the L0 tiles of one instance on each pipe, MTE2's and
    MTE3's with the residual's loads and the output's stores through DDR and over the NoC, and
    the epilogue's DMAs and bytes."""

    mte1: int
    mte2: int
    mte2_noc: int
    cube: int
    vector: int
    mte3: int
    mte3_noc: int
    dmas: int
    res_bytes: int
    out_bytes: int


def _tiles_of(
    ctx: LowerContext,
    shape: CubeShape,
    variant: Blocking,
    blocks: list[MBlock],
    memo: dict[Hashable, Any],
) -> _Pipes:
    """`_tile_pipes` of `variant`, memoised.

    NOTE: they read of the plan only its L0 tile, N block, whether K is blocked and where the
    bias is added (whatever the operands on chip: both places of the output and residual)"""
    key = (id(blocks), variant.tiles, variant.nb, variant.kb < shape.k, variant.cube_bias)
    found = memo.get(key)
    if found is None:
        found = memo[key] = _tile_pipes(ctx, shape, variant, blocks)
    return found


def _single_l0c(ctx: LowerContext, plan: Blocking, k: int, memo: dict[Hashable, Any]) -> bool:
    """Whether an output block's accumulators (kept in L0C across K blocks) exceed L0C's
    share: the next block's cannot be placed until they drain (block_cost then adds the
    epilogue's VECTOR and MTE3 cycles to the busiest pipe's). NOTE: measured on ResNet-50,
    without that price its stem's bands take one output block each and it is 80 K cycles
    slower; with it, 3,615,481 -> 3,533,955 cycles. Memoised by the accumulators' size and
    count (plans share them)."""
    if plan.kb >= k:
        return False
    t = plan.tiles
    key = ("l0c", t.m * t.n, plan.mb * -(-plan.nb // t.n))  # an accumulator's size, how many
    found = memo.get(key)
    if found is None:
        found = memo[key] = not ctx.share_fits("L0C", (key[1],) * key[2])
    return found
