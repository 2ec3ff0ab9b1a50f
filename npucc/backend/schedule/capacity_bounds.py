"""Capacity-aware lower bounds: the spill traffic and spill cycles that the capacities force.

A red-blue-pebble style argument on checkpoints. Take a chain of pipe nodes c_0 < c_1 < ...
(the longest path by pipe-node count, so every order runs them in chain order). Buffer b is
*forced* at c_i when ALLOC_b is an ancestor of c_i and FREE_b a descendant: at c_i's position
b is resident or spilled out, and the resident bytes of a tier are at most its capacity, so
the forced bytes beyond capacity must be out. One spill of b (its SPILL_OUT..SPILL_IN gap)
holds no use of b, so a spill out at c_i covers at most c_i..reach(b, i): up to the first use
u of b with c_i < u in the DAG (a use on the chain ends it before that checkpoint).

The least spilled bytes that cover every checkpoint's excess with such intervals is an interval
multi-cover (consecutive ones: totally unimodular), solved exactly for the byte relaxation by
the greedy that serves the leftmost short checkpoint with the intervals reaching farthest.
Costs per byte differ (rule 2: a clean spill moves Size bytes, a dirty one 2*Size), so with
rate levels r_1 < r_2 < ... cost >= sum_k (r_k - r_{k-1}) x (bytes from buffers of rate >= r_k),
each term a cover in which the cheaper buffers are out for free. This bounds the extra DDR
bytes, the SPILL_IN cycles on MTE2 and the SPILL_OUT cycles on MTE3 (`replay.spill_nodes`) of
any legal schedule; makespan >= each pipe's cycles plus the spill cycles forced onto it.
NOTE: tests/schedule/test_capacity_bounds.py checks both bounds against exhaustive optima.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable
from fractions import Fraction

from npucc.backend.schedule.original import bounds, pipe_cycles
from npucc.backend.schedule.scan import topo_order
from npucc.ir.replay import clean_buffers
from npucc.ir.tiled import TileGraph
from npucc.target.cost import SpillModel

RATE_LEVELS = 4  # distinct cost-per-byte rates priced separately (fewer: a weaker bound)
COSTS = ("extra_ddr", "MTE2", "MTE3")  # what each spill costs: traffic, SPILL_IN, SPILL_OUT cycles


def _chain(graph: TileGraph, order: list[int]) -> list[int]:
    """The pipe nodes of a path with the most pipe nodes (smallest ids on ties)."""
    count = [0] * len(graph.nodes)
    parent = [-1] * len(graph.nodes)
    for v in order:
        best = -1
        for u in graph.preds[v]:
            if best < 0 or count[u] > count[best] or (count[u] == count[best] and u < best):
                best = u
        parent[v] = best
        count[v] = (count[best] if best >= 0 else 0) + (graph.nodes[v].pipe is not None)
    if not order:
        return []
    v = min(range(len(order)), key=lambda x: (-count[x], x))
    path = []
    while v >= 0:
        if graph.nodes[v].pipe is not None:
            path.append(v)
        v = parent[v]
    return path[::-1]


def _reach(graph: TileGraph, order: list[int], chain: list[int]) -> tuple[list[int], list[int]]:
    """Per node: the first chain index it strictly precedes, the last one strictly before it."""
    n = len(graph.nodes)
    big = len(chain)
    idx = {c: i for i, c in enumerate(chain)}
    after = [big] * n  # min chain index j with v < c_j (strict)
    before = [-1] * n  # max chain index i with c_i < v (strict)
    for v in reversed(order):
        m = big
        for w in graph.succs[v]:
            m = min(m, idx.get(w, after[w]))
        after[v] = m
    for v in order:
        m = -1
        for u in graph.preds[v]:
            m = max(m, idx.get(u, before[u]))
        before[v] = m
    return after, before


def _separations(graph: TileGraph, chain: list[int], after: list[int], before: list[int]):
    """Per buffer, its uses as (lo, hi) sorted by lo, and the suffix minima of hi."""
    idx = {c: i for i, c in enumerate(chain)}
    seps: list[list[tuple[int, int]]] = [[] for _ in graph.buffers]
    for node in graph.nodes:
        if node.op not in ("ALLOC", "FREE"):
            k = idx.get(node.id)
            pair = (k, k) if k is not None else (before[node.id], after[node.id])
            for b in node.bufs:
                seps[b].append(pair)
    los: list[list[int]] = []
    min_hi: list[list[int]] = []
    for s in seps:
        s.sort()
        suffix, m = [], len(chain) + 1
        for _, hi in reversed(s):
            m = min(m, hi)
            suffix.append(m)
        los.append([lo for lo, _ in s])
        min_hi.append(suffix[::-1])
    return los, min_hi


def capacity_bounds(
    graph: TileGraph, capacity: dict[str, int], spill_model: SpillModel
) -> dict[str, int]:
    """Lower bounds on extra DDR bytes and on the spill cycles forced onto MTE2 and MTE3."""
    order = topo_order(graph)
    chain = _chain(graph, order)
    after, before = _reach(graph, order, chain)
    clean = clean_buffers(graph)
    nbuf = len(graph.buffers)
    size = [buf.size for buf in graph.buffers]
    first = [after[graph.alloc_of[b]] for b in range(nbuf)]
    last = [before[graph.free_of[b]] for b in range(nbuf)]
    los, min_hi = _separations(graph, chain, after, before)

    def reach(b: int, i: int) -> int:
        """Last chain index a spill of b out at c_i can still cover (i - 1: b cannot be out)."""
        k = bisect_left(los[b], i)
        sep = min_hi[b][k] if k < len(los[b]) else len(chain) + 1
        return min(sep - 1, last[b])

    cost_of: dict[str, Callable[[int], int]] = {
        "extra_ddr": lambda b: spill_model.traffic(size[b], clean[b]),
        "MTE2": lambda b: spill_model.in_cycles(graph.buffers[b].tier, size[b], clean[b]),
        "MTE3": lambda b: spill_model.out_cycles(graph.buffers[b].tier, size[b], clean[b]),
    }
    totals = dict.fromkeys(COSTS, Fraction(0))
    for tier in sorted({buf.tier for buf in graph.buffers}):
        forced = [
            b
            for b in range(nbuf)
            if graph.buffers[b].tier == tier and first[b] <= last[b] and size[b]
        ]
        starts: dict[int, list[int]] = {}
        ends: dict[int, list[int]] = {}
        for b in forced:
            starts.setdefault(first[b], []).append(b)
            ends.setdefault(last[b], []).append(b)
        pinned = [[b for b in graph.nodes[c].bufs if graph.buffers[b].tier == tier] for c in chain]
        covers: dict[frozenset[int], Fraction] = {}
        for name in COSTS:
            rate = {b: Fraction(cost_of[name](b), size[b]) for b in forced}
            levels = sorted(set(rate.values()))[:RATE_LEVELS]
            prev = Fraction(0)
            for level in levels:  # cost >= sum over levels of (step) x bytes at rate >= level
                free = frozenset(b for b in forced if rate[b] < level)
                if free not in covers:
                    covers[free] = _cover(
                        chain, capacity[tier], size, starts, ends, reach, free, pinned
                    )
                totals[name] += (level - prev) * covers[free]
                prev = level
    return {name: -(-totals[name].numerator // totals[name].denominator) for name in COSTS}


def _cover(chain, cap, size, starts, ends, reach, free, pinned) -> Fraction:
    """Least spilled-out bytes covering every checkpoint's excess over `cap` (interval greedy).

    Each buffer's spill out at c_i covers c_i..reach(b, i); buffers in `free` are out for
    nothing wherever c_i does not use them. Covering points on a line by intervals is totally
    unimodular, so the greedy that serves the leftmost short checkpoint with the intervals
    reaching farthest is optimal for the byte relaxation.
    """
    load = free_bytes = 0
    active: set[int] = set()
    chosen: dict[int, Fraction] = {}  # buffer -> bytes of it out now (covering this checkpoint)
    expiry: list[tuple[int, int, Fraction]] = []  # (last covered index, buffer, bytes)
    covered = Fraction(0)
    total = Fraction(0)
    for i in range(len(chain)):
        for b in starts.get(i, ()):
            load += size[b]
            if b in free:
                free_bytes += size[b]
            else:
                active.add(b)
        while expiry and expiry[0][0] < i:
            _, b, x = heapq.heappop(expiry)
            chosen[b] -= x
            covered -= x
        out_free = free_bytes - sum(size[b] for b in pinned[i] if b in free)
        short = load - cap - covered - out_free
        if short > 0:
            cands = sorted(
                ((reach(b, i), b) for b in active if size[b] > chosen.get(b, 0)), reverse=True
            )
            for r, b in cands:
                if short <= 0 or r < i:
                    break
                x = min(Fraction(size[b]) - chosen.get(b, 0), short)
                chosen[b] = chosen.get(b, 0) + x
                covered += x
                total += x
                short -= x
                heapq.heappush(expiry, (r, b, x))
        for b in ends.get(i, ()):
            load -= size[b]
            if b in free:
                free_bytes -= size[b]
            active.discard(b)
    return total


def memory_bounds(
    graph: TileGraph, capacity: dict[str, int], spill_model: SpillModel
) -> dict[str, int]:
    """`bounds` plus the capacity-aware ones: extra DDR bytes and makespan with forced spills.

    makespan_capacity = max(no-memory makespan bound, each pipe's cycles plus the spill cycles
    that the capacities force onto it).
    """
    b = bounds(graph)
    forced = capacity_bounds(graph, capacity, spill_model)
    pipes = pipe_cycles(graph)
    for pipe in ("MTE2", "MTE3"):
        pipes[pipe] = pipes.get(pipe, 0) + forced[pipe]
    return {
        **b,
        "makespan_capacity": max([b["makespan"], *pipes.values()]),
        "extra_ddr": forced["extra_ddr"],
    }
