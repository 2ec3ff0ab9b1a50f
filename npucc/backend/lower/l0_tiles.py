"""The L0 tiles of a cube layer: tile sizes (m_t, n_t, k_t) whose buffers fit every tier's share."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from npucc.backend.lower.context import LowerContext, largest
from npucc.ir.graph import Layer


@dataclass(slots=True, unsafe_hash=True)
class MatTiles:
    """Tile sizes of a tiled matrix multiply (a value: not frozen, as blocking.MTile)."""

    m: int
    n: int
    k: int


def candidates(total: int, quantum: int = 1) -> list[int]:
    """Tile-size candidates: powers of two times `quantum`, capped by `total`, plus `total`."""
    out = {total}
    size = quantum
    while size < total:
        out.add(size)
        size *= 2
    return sorted(out)


L1Buffers = Callable[[int, int, int], tuple[int, ...]]


def fitting_tiles(
    ctx: LowerContext,
    layer: Layer,
    dims: tuple[int, int, int],
    l1_buffers: L1Buffers,
    ub_per_mn: int = 2,
    k_quantum: int = 1,
    m_options: list[int] | None = None,
) -> list[MatTiles]:
    """The L0 tiles (m_t, n_t, k_t) of an M x N x K product whose buffers fit every tier's share,
    none of which another fitting tile contains.

    `l1_buffers(m_t, n_t, k_t)` gives the elements of each L1 buffer of a one-tile block;
    `ub_per_mn` is the number of m_t x n_t tiles the epilogue keeps in UB; K tiles are
    multiples of `k_quantum` (a conv's taps per input channel). Tiles are multiples of the
    cube's fractal (m0, n0, k0) where one fits, else any size down to 1 x 1 x k_quantum;
    `m_options`, when given, are the M tile sizes a lowering emits (a conv's whole-row bands),
    tried before the fractal fallback.
    """
    m, n, k = dims
    cube = ctx.target.cube

    def buffers(mt: int, nt: int, kt: int) -> dict[str, tuple[int, ...]]:
        return {
            "L0A": (mt * kt,),
            "L0B": (kt * nt,),
            "L0C": (mt * nt,),
            "L1": l1_buffers(mt, nt, kt),
            "UB": (mt * nt,) * ub_per_mn,
        }

    # NOTE: `share_fits` of each of `buffers`' tiers, each tier's share read once (the
    # candidates run to hundreds a layer signature; `l1_buffers` is a pure size formula)
    a, b, c, l1, ub = (ctx.share_bytes(tier) for tier in ("L0A", "L0B", "L0C", "L1", "UB"))
    size = ctx.tile_bytes

    def fits(mt: int, nt: int, kt: int) -> bool:
        return (
            size((mt * kt,), "L0A") <= a
            and size((kt * nt,), "L0B") <= b
            and size((mt * nt,), "L0C") <= c
            and size((mt * nt,) * ub_per_mn, "UB") <= ub
            and size(l1_buffers(mt, nt, kt), "L1") <= l1
        )

    for m0, n0, k0 in ((cube.m0, cube.n0, cube.k0), (1, 1, 1)):
        if k_quantum > 1:
            k_options = [c * k_quantum for c in candidates(k // k_quantum)]
        else:
            k_options = candidates(k, k0)
        ms = m_options if m_options and m0 > 1 else candidates(m, m0)
        found = [t for t in itertools.product(ms, candidates(n, n0), k_options) if fits(*t)]
        if found:
            return [MatTiles(*t) for t in _maximal(found)]
    # NOTE: every tier's need grows with each tile dimension, so the smallest tile is the one
    # that fits if any does: the first tier it overflows is the one to name
    smallest = buffers(1, 1, k_options[0])
    tier = next(t for t, b in smallest.items() if not ctx.share_fits(t, b))
    raise ctx.share_error(layer, tier, smallest[tier])


def _maximal(tiles: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The tiles no other tile contains (`_contains`), in their order.

    NOTE: a tile that contains another comes before it in descending order, so each is checked
    against the maximal ones before it alone (one containing it is, or is contained by one
    that is): a few each, not every tile (light ResNet-50 mesh8x8's ~90 fitting tiles)."""
    top: list[tuple[int, int, int]] = []
    for t in sorted(set(tiles), reverse=True):
        if not any(_contains(big, t) for big in top):
            top.append(t)
    kept = set(top)
    return [t for t in tiles if t in kept]


def _contains(big: tuple[int, int, int], small: tuple[int, int, int]) -> bool:
    """True when `big` is another tile (m, n, k) at least as large as `small` in every
    dimension."""
    return big != small and big[0] >= small[0] and big[1] >= small[1] and big[2] >= small[2]


def l0c_fits(ctx: LowerContext, accs: tuple[int, ...]) -> bool:
    """Whether an output block's accumulators fit L0C: all of it on one core, its share on a
    mesh. NOTE: measured, on mesh8x8 the whole L0C made the BERT encoder 1,390,677 ->
    1,424,010 cycles."""
    if ctx.target.cores == 1:
        return ctx.tile_bytes(accs, "L0C") <= ctx.room("L0C")
    return ctx.share_fits("L0C", accs)


def acc_group(ctx: LowerContext, t: MatTiles, count: int) -> int:
    """How many of `count` L0 tiles' accumulators (m_t x n_t each) fit L0C's share together
    (at least one: the tile fits alone)."""
    return max(1, largest(lambda g: ctx.share_fits("L0C", (t.m * t.n,) * g), count))
