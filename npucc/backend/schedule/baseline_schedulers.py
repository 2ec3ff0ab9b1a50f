"""Baselines measured in the same replay as DAN (sources named in docs/dan.md), and bounds.

- `mpas-memory`, `mpas-critical`: DAN with the MPAS key cut to (lambda, Delta, ord) or
  (lambda, -h, ord), the paper's Fig. 7 ablation.
- `dan-lru`: DAN with least-recently-used victims instead of the cost-aware rule (Table 4).
- `dan-dlr`: DAN without CPE (Table 5) is the registry's Stage-2 entry.
- `hmcos`: a memory-minimising order, HMCOS/Serenity style: dynamic programming over frontier
  states (the set of scheduled nodes), pruned to the BEAM best states by (peak, live) per step
  and the CHILDREN lowest-pressure successors per state, keeping one live buffer per L0 tier
  when it can (rule 7, as every Stage-1 order); then DLR places it.
- `tflite-greedy`, `xla-best-fit`: offline placement of the MPAS order's lifetimes, buffers by
  decreasing size, at the first (TFLite greedy-by-size) or tightest (XLA best-fit heap) gap;
  a tier whose plan exceeds its capacity falls back to online first-fit with Belady spills.
- `belady`: the MPAS order, best-fit, evicting the buffer used farthest ahead in every tier.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from npucc.backend.schedule.dan.cpe import cpe
from npucc.backend.schedule.dan.dlr import dlr
from npucc.backend.schedule.dan.mpas import mpas
from npucc.backend.schedule.scan import INF, LinearScan, lru_victim
from npucc.ir.replay import L0_TIERS, replay
from npucc.ir.residency import PEAK_TIERS
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph

BEAM = 4
CHILDREN = 6
DOWNSET_LIMIT = 200_000  # exact minimum peak only when the DP visits at most this many states


def _timed(method: str, fn: Callable[[], Schedule]) -> Schedule:
    t0 = time.perf_counter()
    schedule = fn()
    schedule.method = method
    schedule.seconds = {method: time.perf_counter() - t0}
    return schedule


def _full(graph, capacity, spill_model, alignment, order, victim=None) -> Schedule:
    """DLR (optionally with another victim rule) and CPE on a given order."""
    if victim is None:
        s = dlr(graph, order, capacity, spill_model, alignment)
    else:
        s = LinearScan(graph, order, capacity, alignment, "cold").run(victim)
    r = replay(graph, s, capacity, spill_model, alignment)
    out = cpe(s, r)
    out.basis = r  # NOTE: CPE keeps the plan's edges (replay(..., like=))
    return out


def mpas_memory(graph, capacity, spill_model, alignment=1) -> Schedule:
    """DAN with the memory-first MPAS key (lambda, Delta, ord)."""
    return _timed(
        "mpas-memory",
        lambda: _full(
            graph, capacity, spill_model, alignment, mpas(graph, True, "memory", strict=False)
        ),
    )


def mpas_critical(graph, capacity, spill_model, alignment=1) -> Schedule:
    """DAN with the criticality-first MPAS key (lambda, -h, ord)."""
    return _timed(
        "mpas-critical",
        lambda: _full(
            graph, capacity, spill_model, alignment, mpas(graph, True, "critical", strict=False)
        ),
    )


def dan_lru(graph, capacity, spill_model, alignment=1) -> Schedule:
    """DAN with LRU eviction in Stage 2."""
    return _timed(
        "dan-lru",
        lambda: _full(
            graph, capacity, spill_model, alignment, mpas(graph, True, strict=False), lru_victim
        ),
    )


def belady_victim(scan: LinearScan, candidates: list[int], k: int) -> int:
    """Belady: the candidate whose next use is farthest (lowest id on ties)."""
    return scan.core.farthest(candidates, k)


def belady(graph, capacity, spill_model, alignment=1) -> Schedule:
    """MPAS order, best-fit placement, farthest-next-use spilling in every tier."""
    del spill_model
    return _timed(
        "belady",
        lambda: LinearScan(graph, mpas(graph, True, strict=False), capacity, alignment, "best").run(
            belady_victim
        ),
    )


def memory_order(graph: TileGraph) -> list[int]:
    """HMCOS/Serenity-style order: beam-pruned DP over frontier states minimising peak L1+UB."""
    nodes, preds, succs = graph.nodes, graph.preds, graph.succs
    n = len(nodes)
    delta = [0] * n
    l0 = [0] * n  # +1 / -1 per L0 tier bit for L0 ALLOC / FREE (rule 7: one live buffer)
    for node in nodes:
        if node.op in ("ALLOC", "FREE"):
            buf = graph.buffers[node.bufs[0]]
            if buf.tier in PEAK_TIERS:
                delta[node.id] = buf.size if node.op == "ALLOC" else -buf.size
            elif buf.tier in L0_TIERS:
                bit = 1 << L0_TIERS.index(buf.tier)
                l0[node.id] = bit if node.op == "ALLOC" else -bit
    # a state: (peak, live, order, indegrees, ready, busy L0 tiers); FREEs run once ready
    start = [len(p) for p in preds]
    states: list[tuple[int, int, list[int], list[int], list[int], int]] = [
        (0, 0, [], start, sorted(v for v in range(n) if not start[v]), 0)
    ]
    for _ in range(n):
        children: list[tuple[int, int, list[int], list[int], list[int], int]] = []
        seen: set[tuple[int, ...]] = set()
        for peak, live, order, indeg, ready, busy in states:
            frees = [v for v in ready if nodes[v].op == "FREE"]
            allowed = [v for v in ready if l0[v] <= 0 or not busy & l0[v]] or ready
            picks = frees[:1] or heapq.nsmallest(CHILDREN, allowed, key=lambda v: (delta[v], v))
            for v in picks:
                ind = indeg.copy()
                rdy = [x for x in ready if x != v]
                for w in succs[v]:
                    ind[w] -= 1
                    if not ind[w]:
                        rdy.append(w)
                rdy.sort()
                sig = tuple(rdy)
                if sig in seen:
                    continue
                seen.add(sig)
                lv = live + delta[v]
                children.append((max(peak, lv), lv, order + [v], ind, rdy, busy + l0[v]))
        children.sort(key=lambda c: (c[0], c[1], c[2]))
        states = children[:BEAM]
    return states[0][2]


def hmcos(graph, capacity, spill_model, alignment=1) -> Schedule:
    """Memory-minimising order (memory_order) placed and spilled by DLR."""
    return _timed(
        "hmcos",
        lambda: dlr(graph, memory_order(graph), capacity, spill_model, alignment),
    )


def offline_plan(
    graph: TileGraph, order: list[int], capacity: dict[str, int], alignment: int, best: bool
) -> dict[int, int] | None:
    """Offsets by decreasing size at the first/best gap among time-overlapping buffers."""
    pos = {v: i for i, v in enumerate(order)}
    life = {b.id: (pos[graph.alloc_of[b.id]], pos[graph.free_of[b.id]]) for b in graph.buffers}
    offsets: dict[int, int] = {}
    placed: dict[str, list[int]] = {}
    for b in sorted(graph.buffers, key=lambda x: (-x.size, life[x.id][0], x.id)):
        lo, hi = life[b.id]
        busy = sorted(
            (offsets[x], offsets[x] + graph.buffers[x].size)
            for x in placed.get(b.tier, [])
            if life[x][0] < hi and lo < life[x][1]
        )
        gaps, cur = [], 0
        for s, e in busy:
            if s > cur:
                gaps.append((cur, s))
            cur = max(cur, e)
        gaps.append((cur, INF))
        fits = []
        for s, e in gaps:
            off = -(-s // alignment) * alignment
            if off + b.size <= e:
                fits.append((e - off - b.size if best else 0, off))
        off = min(fits)[1]
        if off + b.size > capacity[b.tier]:
            return None
        offsets[b.id] = off
        placed.setdefault(b.tier, []).append(b.id)
    return dict(sorted(offsets.items()))


def _offline(method: str, best: bool):
    def run(graph, capacity, spill_model, alignment=1) -> Schedule:
        def body() -> Schedule:
            order = mpas(graph, True, strict=False)
            offsets = offline_plan(graph, order, capacity, alignment, best)
            if offsets is None:
                return LinearScan(graph, order, capacity, alignment).run(belady_victim)
            return Schedule(order, offsets)

        del spill_model
        return _timed(method, body)

    run.__doc__ = f"MPAS order with {method} offline placement."
    return run


tflite_greedy = _offline("tflite-greedy", best=False)
xla_best_fit = _offline("xla-best-fit", best=True)


def exact_min_peak(graph: TileGraph) -> int | None:
    """Minimum over all orders of peak L1+UB (minimax DP over downsets); None past the limit."""
    nodes, preds = graph.nodes, graph.preds
    n = len(nodes)
    delta = [0] * n
    for node in nodes:
        if node.op in ("ALLOC", "FREE"):
            buf = graph.buffers[node.bufs[0]]
            if buf.tier in PEAK_TIERS:
                delta[node.id] = buf.size if node.op == "ALLOC" else -buf.size
    pmask = [sum(1 << u for u in preds[v]) for v in range(n)]
    full = (1 << n) - 1
    best = {0: 0}
    heap = [(0, 0, 0)]  # (peak so far, live, downset)
    while heap:
        peak, live, ds = heapq.heappop(heap)
        if ds == full:
            return peak
        if best.get(ds, INF) < peak:
            continue
        for v in range(n):
            if not ds >> v & 1 and pmask[v] & ds == pmask[v]:
                nd = ds | 1 << v
                lv = live + delta[v]
                pk = max(peak, lv)
                if pk < best.get(nd, INF):
                    if len(best) >= DOWNSET_LIMIT:
                        return None
                    best[nd] = pk
                    heapq.heappush(heap, (pk, lv, nd))
    return None


BASELINES = {
    "mpas-memory": mpas_memory,
    "mpas-critical": mpas_critical,
    "dan-lru": dan_lru,
    "hmcos": hmcos,
    "tflite-greedy": tflite_greedy,
    "xla-best-fit": xla_best_fit,
    "belady": belady,
}
