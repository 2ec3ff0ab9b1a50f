"""Exact optima on small graphs, to measure the lower bounds against (tests, `bench dan`).

Both searches solve a relaxation of the replay rules, so their optimum is <= the true optimum
and a bound below it is a valid bound: capacity is a byte budget per tier (no addresses, so no
fragmentation and no rule-4 reuse edges, which only add precedence). Moves: run a ready node
(its unscheduled ALLOC predecessors just before it: an ALLOC has no cost and memory is freer
the later it runs), SPILL_OUT a resident buffer, SPILL_IN a spilled one. A FREE runs as soon
as it is ready and its buffer resident. Two spills of one buffer with no use between are never
needed (merging them removes work and frees memory), so a buffer is spilled at most once more
than it is used. `min_extra_ddr` is a Dijkstra search on (scheduled, spilled-out) states;
`min_makespan` a depth-first branch and bound over move sequences, timed by rules 1 and 5.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from npucc.ir.replay import clean_buffers
from npucc.ir.tiled import TileGraph
from npucc.target.cost import SpillModel


@dataclass(slots=True)
class _Moves:
    """The move rules of the relaxed problem on one graph."""

    graph: TileGraph
    capacity: dict[str, int]
    pred_mask: list[int]  # non-ALLOC predecessors of each node, as a node bit mask
    allocs: list[list[int]]  # unscheduled-ALLOC predecessors to run right before each node
    uses: list[int]  # buffer -> its users' bit mask (ALLOC and FREE excluded)

    @classmethod
    def of(cls, graph: TileGraph, capacity: dict[str, int]) -> _Moves:
        """Precompute masks for `graph`."""
        nodes = graph.nodes
        pred_mask, allocs = [], []
        for v in range(len(nodes)):
            ps = graph.preds[v]
            mask = 0
            for u in ps:
                mask |= 0 if nodes[u].op == "ALLOC" else 1 << u
            pred_mask.append(mask)
            allocs.append(sorted({u for u in ps if nodes[u].op == "ALLOC"}))
        uses = [0] * len(graph.buffers)
        for node in nodes:
            if node.op not in ("ALLOC", "FREE"):
                for b in node.bufs:
                    uses[b] |= 1 << node.id
        return cls(graph, capacity, pred_mask, allocs, uses)

    def resident(self, done: int, out: int, b: int) -> bool:
        """Is b allocated, not freed and not spilled out?"""
        g = self.graph
        return bool(done >> g.alloc_of[b] & 1) and not done >> g.free_of[b] & 1 and not out >> b & 1

    def used(self, done: int, out: int) -> dict[str, int]:
        """Resident bytes per tier."""
        used: dict[str, int] = {}
        for b, buf in enumerate(self.graph.buffers):
            if self.resident(done, out, b):
                used[buf.tier] = used.get(buf.tier, 0) + buf.size
        return used

    def runnable(self, done: int, out: int) -> list[tuple[int, list[int]]]:
        """(node, ALLOCs run before it) for every pipe or FREE node that may run next."""
        g = self.graph
        used = self.used(done, out)
        moves = []
        for v, node in enumerate(g.nodes):
            if done >> v & 1 or node.op == "ALLOC" or self.pred_mask[v] & ~done:
                continue
            new = [a for a in self.allocs[v] if not done >> a & 1]
            extra: dict[str, int] = {}
            for a in new:
                buf = g.buffers[g.nodes[a].bufs[0]]
                extra[buf.tier] = extra.get(buf.tier, 0) + buf.size
            if any(used.get(t, 0) + x > self.capacity[t] for t, x in extra.items()):
                continue
            newbufs = {g.nodes[a].bufs[0] for a in new}
            if any(b not in newbufs and not self.resident(done, out, b) for b in node.bufs):
                continue
            moves.append((v, new))
        return moves

    def free_ready(self, done: int, out: int) -> int:
        """`done` with every ready FREE of a resident buffer run."""
        g = self.graph
        for b in range(len(g.buffers)):
            f = g.free_of[b]
            if not done >> f & 1 and not self.pred_mask[f] & ~done and not out >> b & 1:
                if done >> g.alloc_of[b] & 1:
                    done |= 1 << f
        return done

    def spill_ins(self, done: int, out: int) -> list[int]:
        """Spilled buffers that fit back."""
        used = self.used(done, out)
        g = self.graph
        return [
            b
            for b in range(len(g.buffers))
            if out >> b & 1
            and used.get(g.buffers[b].tier, 0) + g.buffers[b].size
            <= self.capacity[g.buffers[b].tier]
        ]


def min_extra_ddr(
    graph: TileGraph, capacity: dict[str, int], spill_model: SpillModel, limit: int = 200_000
) -> int | None:
    """Least extra DDR bytes of any schedule (relaxed as above); None past `limit` states."""
    m = _Moves.of(graph, capacity)
    clean = clean_buffers(graph)
    cost = [spill_model.traffic(buf.size, clean[buf.id]) for buf in graph.buffers]
    full = (1 << len(graph.nodes)) - 1
    start = m.free_ready(0, 0)
    best = {(start, 0): 0}
    heap = [(0, start, 0)]
    while heap:
        d, done, out = heapq.heappop(heap)
        if done == full:
            return d
        if best.get((done, out), d + 1) < d:
            continue
        succ: list[tuple[int, int, int]] = []
        for v, new in m.runnable(done, out):
            nd = done | 1 << v
            for a in new:
                nd |= 1 << a
            succ.append((d, m.free_ready(nd, out), out))
        for b in m.spill_ins(done, out):
            succ.append((d, m.free_ready(done, out & ~(1 << b)), out & ~(1 << b)))
        for b in range(len(graph.buffers)):
            if m.resident(done, out, b):
                succ.append((d + cost[b], done, out | 1 << b))
        for nd_cost, nd, no in succ:
            if nd_cost < best.get((nd, no), nd_cost + 1):
                if len(best) >= limit:
                    return None
                best[(nd, no)] = nd_cost
                heapq.heappush(heap, (nd_cost, nd, no))
    return None


@dataclass(slots=True)
class _Clock:
    """Timing state of a partial move sequence (rules 1 and 5, no reuse edges)."""

    finish: list[int]  # per graph node
    pipe: dict[str, int]  # when each pipe is free
    touch: list[int]  # per buffer: latest finish of its ALLOC, users and spill nodes so far
    reload: list[int]  # per buffer: finish of its latest SPILL_IN
    spills: list[int]  # per buffer: spills so far
    fresh: list[bool]  # per buffer: used since its last spill (another spill may follow)

    def copy(self) -> _Clock:
        """An independent copy."""
        return _Clock(
            list(self.finish),
            dict(self.pipe),
            list(self.touch),
            list(self.reload),
            list(self.spills),
            list(self.fresh),
        )

    def key(self, done: int) -> tuple:
        """Everything later moves' times depend on."""
        return (
            tuple(sorted(self.pipe.items())),
            tuple(f for v, f in enumerate(self.finish) if done >> v & 1),
            tuple(self.touch),
            tuple(self.reload),
            tuple(self.spills),
            tuple(self.fresh),
        )


def min_makespan(
    graph: TileGraph, capacity: dict[str, int], spill_model: SpillModel, limit: int = 300_000
) -> int | None:
    """Least makespan of any schedule (relaxed as above); None past `limit` search states.

    Node ids must be topological (as `dan_hard.small_instance` makes them).
    """
    m = _Moves.of(graph, capacity)
    nodes = graph.nodes
    n, nbuf = len(nodes), len(graph.buffers)
    if any(w < v for v in range(n) for w in graph.succs[v]):
        raise ValueError("min_makespan needs node ids in topological order")
    clean = clean_buffers(graph)
    out_c = [spill_model.out_cycles(b.tier, b.size, clean[b.id]) for b in graph.buffers]
    in_c = [spill_model.in_cycles(b.tier, b.size, clean[b.id]) for b in graph.buffers]
    nuses = [bin(u).count("1") for u in m.uses]
    tail = [0] * n  # longest path from a node's start to the end
    for v in reversed(range(n)):
        tail[v] = nodes[v].cycles + max((tail[w] for w in graph.succs[v]), default=0)
    remaining: dict[str, int] = {}  # pipe cycles not yet scheduled
    for node in nodes:
        if node.pipe is not None:
            remaining[node.pipe] = remaining.get(node.pipe, 0) + node.cycles
    pipes = dict.fromkeys([*remaining, "MTE2", "MTE3"], 0)
    clock = _Clock([0] * n, pipes, [0] * nbuf, [0] * nbuf, [0] * nbuf, [True] * nbuf)
    best = [1 << 62]
    seen: set[tuple] = set()
    visits = [0]

    def run(c: _Clock, v: int) -> int:
        node = nodes[v]
        t = max((c.finish[u] for u in graph.preds[v]), default=0)
        for b in node.bufs:
            t = max(t, c.reload[b])
        if node.pipe is not None:
            t = max(t, c.pipe[node.pipe])
            c.pipe[node.pipe] = t + node.cycles
        c.finish[v] = t + node.cycles
        for b in node.bufs:
            c.touch[b] = max(c.touch[b], c.finish[v])
            if node.op not in ("ALLOC", "FREE"):
                c.fresh[b] = True
        return c.finish[v]

    def lower(c: _Clock, done: int, span: int) -> int:
        lb = span
        for p, left in remaining.items():
            lb = max(lb, c.pipe[p] + left)
        for v in range(n):
            if not done >> v & 1:
                est = max((c.finish[u] for u in graph.preds[v] if done >> u & 1), default=0)
                lb = max(lb, est + tail[v])
        return lb

    def frees(c: _Clock, before: int, after: int, span: int) -> int:
        for v in range(n):
            if after >> v & 1 and not before >> v & 1:
                span = max(span, run(c, v))
        return span

    def search(c: _Clock, done: int, out: int, span: int) -> None:
        visits[0] += 1
        if visits[0] > limit:
            return
        if done == (1 << n) - 1:
            best[0] = min(best[0], span)
            return
        if lower(c, done, span) >= best[0]:
            return
        key = (done, out, c.key(done))
        if key in seen:
            return
        seen.add(key)
        for v, new in m.runnable(done, out):
            d, s, nc = done, span, c.copy()
            for a in (*new, v):
                s = max(s, run(nc, a))
                d |= 1 << a
            pipe = nodes[v].pipe  # the ALLOCs run on no pipe
            if pipe is not None:
                remaining[pipe] -= nodes[v].cycles
            full = m.free_ready(d, out)
            search(nc, full, out, frees(nc, d, full, s))
            if pipe is not None:
                remaining[pipe] += nodes[v].cycles
        for b in range(nbuf):
            if m.resident(done, out, b) and c.fresh[b] and c.spills[b] <= nuses[b]:
                nc = c.copy()
                t = max(nc.pipe["MTE3"], nc.touch[b]) + out_c[b]
                nc.pipe["MTE3"] = nc.touch[b] = t
                nc.spills[b] += 1
                nc.fresh[b] = False
                search(nc, done, out | 1 << b, max(span, t))
        for b in m.spill_ins(done, out):
            nc = c.copy()
            t = max(nc.pipe["MTE2"], nc.touch[b]) + in_c[b]
            nc.pipe["MTE2"] = nc.touch[b] = nc.reload[b] = t
            no = out & ~(1 << b)
            full = m.free_ready(done, no)
            search(nc, full, no, frees(nc, done, full, max(span, t)))

    search(clock, m.free_ready(0, 0), 0, 0)
    return None if visits[0] > limit or best[0] == 1 << 62 else best[0]
