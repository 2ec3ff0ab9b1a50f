"""Peak floor: the least L1+UB peak any order of a core's DAG can have (a lower bound).

The peak (npucc.ir.residency) is the largest sum of L1+UB buffers live at a position of the
order, b live at v when ALLOC_b is at or before v and FREE_b after it. Two bounds, per node v:

- **must-live** (every topological order, spills or not; a spilled buffer still counts): b is
  live at v in every order when ALLOC_b is v or an ancestor of v and FREE_b a descendant.
- **capacity-forced** (every order that spills nothing, so each tier's live bytes stay within
  its capacity at every position, whatever the addresses): a buffer b with ALLOC_b at or before
  v but FREE_b neither before nor after v in the DAG is live at v unless FREE_b precedes v.
  Then every ancestor of FREE_b precedes v, so every buffer c allocated by one of them whose
  FREE is a descendant of v is live at v, as is each must-live buffer; when those alone exceed
  some tier's capacity, FREE_b cannot precede v, and b is live at v. The same argument on the
  reversed DAG (ALLOC and FREE swapped, the live set at the position just before v) covers a
  buffer whose FREE follows v but whose ALLOC could come after it.

NOTE: the floor is the largest over v of the L1+UB bytes these sets force live at v, so
floor <= every order's peak (floor.unspilled for orders without spills). Sets are searched
within each buffer's span in the lowering order and counted only for v where they are proved;
a smaller set only weakens the bound, never makes it wrong. tests/schedule/test_peak_floor.py
checks it against every topological order of small random DAGs and against the compiled
programs' own peaks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.backend.schedule.scan import topo_order
from npucc.ir.residency import PEAK_TIERS
from npucc.ir.tiled import TileGraph

UNBOUNDED = 1 << 62  # the capacity of a tier `capacity` does not name
REACH = 2  # a capacity test looks this many times b's span beyond FREE_b for c's FREE


@dataclass(frozen=True, slots=True)
class PeakFloor:
    """Lower bounds on a DAG's L1+UB peak: over every order, and over orders without spills."""

    any: int  # every topological order (spilled buffers count, rule 6)
    unspilled: int  # every order whose tiers stay within their capacities (>= any)


@dataclass(slots=True)
class _Dag:
    """A DAG in position space (node p = the p-th of a topological order): edges, buffers."""

    succs: list[list[int]]
    preds: list[list[int]]
    alloc: list[int]  # buffer -> position of its ALLOC
    free: list[int]  # buffer -> position of its FREE
    tier: list[int]  # buffer -> index into `tiers`
    size: list[int]
    tiers: list[str]

    def reversed(self) -> _Dag:
        """The reversed DAG with ALLOC and FREE swapped (orders read backwards)."""
        last = len(self.succs) - 1
        return _Dag(
            [[last - u for u in self.preds[last - q]] for q in range(last + 1)],
            [[last - w for w in self.succs[last - q]] for q in range(last + 1)],
            [last - f for f in self.free],
            [last - a for a in self.alloc],
            self.tier,
            self.size,
            self.tiers,
        )


def _dag(graph: TileGraph) -> _Dag:
    order = topo_order(graph)
    pos = [0] * len(order)
    for p, v in enumerate(order):
        pos[v] = p
    tiers = sorted({b.tier for b in graph.buffers})
    index = {t: i for i, t in enumerate(tiers)}
    return _Dag(
        [[pos[w] for w in graph.succs[v]] for v in order],
        [[pos[u] for u in graph.preds[v]] for v in order],
        [pos[graph.alloc_of[b.id]] for b in graph.buffers],
        [pos[graph.free_of[b.id]] for b in graph.buffers],
        [index[b.tier] for b in graph.buffers],
        [b.size for b in graph.buffers],
        tiers,
    )


def _reach(start: int, edges: list[list[int]], lo: int, hi: int) -> set[int]:
    """Nodes reachable from `start` (itself included) through nodes in [lo, hi)."""
    seen = {start}
    stack = [start]
    while stack:
        for w in edges[stack.pop()]:
            if lo <= w < hi and w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def _must_live(d: _Dag, counted: list[bool]) -> tuple[np.ndarray, dict[int, tuple[set, set]]]:
    """Per tier and node, the bytes live there in every order; each counted buffer's
    (descendants of its ALLOC, ancestors of its FREE) within its span."""
    n = len(d.succs)
    live = np.zeros((len(d.tiers), n), np.int64)
    spans: dict[int, tuple[set, set]] = {}
    for b, (a, f) in enumerate(zip(d.alloc, d.free, strict=True)):
        down = _reach(a, d.succs, a, f)  # ALLOC_b <= v, v before FREE_b in the order
        up = _reach(f, d.preds, a, f + 1)  # v <= FREE_b
        up.discard(f)
        live[d.tier[b], list(down & up)] += d.size[b]
        if counted[b]:
            spans[b] = (down, up)
    return live, spans


def _bits(
    d: _Dag, starts: dict[int, int], edges: list[list[int]], lo: int, hi: int, back: bool
) -> dict[int, int]:
    """Per node in [lo, hi], a bit k set when it reaches (back: is reached from) the node
    `starts` maps to k, through nodes in [lo, hi]: one sweep in (reverse) position order."""
    bits: dict[int, int] = {}
    for p in range(hi, lo - 1, -1) if back else range(lo, hi + 1):
        x = starts.get(p, 0)
        for w in edges[p]:
            if lo <= w <= hi:
                x |= bits[w]
        bits[p] = x
    return bits


def _forced(
    d: _Dag, live: np.ndarray, spans: dict[int, tuple[set, set]], caps: list[int]
) -> np.ndarray:
    """Per node, the L1+UB bytes beyond the must-live ones that no spill-free order frees."""
    rows = live.tolist()
    extra = np.zeros(len(d.succs), np.int64)
    allocated = {a: c for c, a in enumerate(d.alloc)}
    for b, (down, up) in spans.items():
        a, f = d.alloc[b], d.free[b]
        cand = [v for v in down if v not in up]  # ALLOC_b <= v, v not before FREE_b
        if not cand:
            continue
        limit = f + REACH * (f - a) + 1
        # K_b: buffers allocated by an ancestor of FREE_b, freed within reach
        ks = sorted(
            {
                allocated[w]
                for u in up
                for w in (u, *d.preds[u])
                if w in allocated and allocated[w] != b and d.free[allocated[w]] <= limit
            }
        )
        if not ks:
            continue
        hi = max(d.free[c] for c in ks)
        lo = min(a, min(d.alloc[c] for c in ks))
        to_free = _bits(d, {d.free[c]: 1 << k for k, c in enumerate(ks)}, d.succs, a, hi, True)
        from_alloc = _bits(d, {d.alloc[c]: 1 << k for k, c in enumerate(ks)}, d.preds, lo, f, False)
        groups: dict[tuple[int, int], int] = {}
        for k, c in enumerate(ks):
            key = (d.tier[c], d.size[c])
            groups[key] = groups.get(key, 0) | 1 << k
        for v in cand:
            # c live at v if FREE_b precedes v: FREE_c after v, ALLOC_c not already <= v
            x = to_free.get(v, 0) & ~from_alloc[v]
            if not x:
                continue
            over = [rows[t][v] - caps[t] for t in range(len(caps))]
            for (t, size), mask in groups.items():
                over[t] += size * (x & mask).bit_count()
            if max(over) > 0:
                extra[v] += d.size[b]
    return extra


def peak_floor(graph: TileGraph, capacity: dict[str, int]) -> PeakFloor:
    """The L1+UB peak floor of `graph` (capacity: bytes per tier, for the unspilled bound)."""
    if not graph.nodes:
        return PeakFloor(0, 0)
    fwd = _dag(graph)
    counted = [fwd.tiers[t] in PEAK_TIERS for t in fwd.tier]
    caps = [capacity.get(t, UNBOUNDED) for t in fwd.tiers]  # a tier without one proves nothing
    peaks = [t in PEAK_TIERS for t in fwd.tiers]
    any_floor = unspilled = 0
    for d in (fwd, fwd.reversed()):
        live, spans = _must_live(d, counted)
        must = live[peaks].sum(axis=0)
        any_floor = max(any_floor, int(must.max()))
        unspilled = max(unspilled, int((must + _forced(d, live, spans, caps)).max()))
    return PeakFloor(any_floor, unspilled)
