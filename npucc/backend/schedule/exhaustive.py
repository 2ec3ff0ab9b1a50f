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


def min_makespan(
    graph: TileGraph, capacity: dict[str, int], spill_model: SpillModel, limit: int = 300_000
) -> int | None:
    """Least makespan of any schedule (relaxed as above); None past `limit` search states."""
    m = _Moves.of(graph, capacity)
    nodes = graph.nodes
    n, nbuf = len(nodes), len(graph.buffers)
    clean = clean_buffers(graph)
    out_c = [spill_model.out_cycles(b.tier, b.size, clean[b.id]) for b in graph.buffers]
    in_c = [spill_model.in_cycles(b.tier, b.size, clean[b.id]) for b in graph.buffers]
    nuses = [bin(u).count("1") for u in m.uses]
    tail = [0] * n
    for v in sorted(range(n), key=lambda v: -v):  # ids are topological in the test graphs
        tail[v] = nodes[v].cycles + max((tail[w] for w in graph.succs[v]), default=0)
    if any(w < v for v in range(n) for w in graph.succs[v]):
        raise ValueError("min_makespan needs node ids in topological order")
    remaining: dict[str, int] = {}
    for node in nodes:
        if node.pipe is not None:
            remaining[node.pipe] = remaining.get(node.pipe, 0) + node.cycles
    state = {
        "finish": [0] * n,
        "pipe": dict.fromkeys([*remaining, "MTE2", "MTE3"], 0),
        "touch": [0] * nbuf,  # latest finish of b's ALLOC, users and spill nodes so far
        "reload": [0] * nbuf,  # finish of b's latest SPILL_IN
        "spills": [0] * nbuf,
        "fresh": [True] * nbuf,  # no spill since b's last use (a spill may follow)
    }
    best = [1 << 62]
    seen: set = set()
    visits = [0]

    def run(v: int) -> int:
        node = nodes[v]
        f = state["finish"]
        t = max((f[u] for u in graph.preds[v]), default=0)
        for b in node.bufs:
            t = max(t, state["reload"][b])
        if node.pipe is not None:
            t = max(t, state["pipe"][node.pipe])
            state["pipe"][node.pipe] = t + node.cycles
        f[v] = t + node.cycles
        for b in node.bufs:
            state["touch"][b] = max(state["touch"][b], f[v])
            if node.op not in ("ALLOC", "FREE"):
                state["fresh"][b] = True
        return f[v]

    def lower(done: int, span: int) -> int:
        lb = span
        for p, left in remaining.items():
            lb = max(lb, state["pipe"][p] + left)
        f = state["finish"]
        for v in range(n):
            if not done >> v & 1:
                est = max((f[u] for u in graph.preds[v] if done >> u & 1), default=0)
                lb = max(lb, est + tail[v])
        return lb

    def search(done: int, out: int, span: int) -> None:
        visits[0] += 1
        if visits[0] > limit:
            return
        if done == (1 << n) - 1:
            best[0] = min(best[0], span)
            return
        if lower(done, span) >= best[0]:
            return
        f = state["finish"]
        key = (
            done,
            out,
            tuple(state["spills"]),
            tuple(state["fresh"]),
            tuple(sorted(state["pipe"].items())),
            tuple(f[v] for v in range(n) if done >> v & 1),
            tuple(state["touch"]),
            tuple(state["reload"]),
        )
        if key in seen:
            return
        seen.add(key)
        snapshot = (
            list(f),
            dict(state["pipe"]),
            list(state["touch"]),
            list(state["reload"]),
            list(state["spills"]),
            list(state["fresh"]),
        )

        def restore() -> None:
            state["finish"][:] = snapshot[0]
            state["pipe"] = dict(snapshot[1])
            state["touch"][:] = snapshot[2]
            state["reload"][:] = snapshot[3]
            state["spills"][:] = snapshot[4]
            state["fresh"][:] = snapshot[5]

        for v, new in m.runnable(done, out):
            nd, s = done, span
            for a in (*new, v):
                s = max(s, run(a))
                nd |= 1 << a
                if nodes[a].pipe is not None:
                    remaining[nodes[a].pipe] -= nodes[a].cycles
            full = m.free_ready(nd, out)
            for fr in range(n):
                if full >> fr & 1 and not nd >> fr & 1:
                    s = max(s, run(fr))
            search(full, out, s)
            for a in (*new, v):
                if nodes[a].pipe is not None:
                    remaining[nodes[a].pipe] += nodes[a].cycles
            restore()
        for b in range(nbuf):
            if m.resident(done, out, b) and state["fresh"][b] and state["spills"][b] <= nuses[b]:
                t = max(state["pipe"]["MTE3"], state["touch"][b])
                state["pipe"]["MTE3"] = t + out_c[b]
                state["touch"][b] = t + out_c[b]
                state["spills"][b] += 1
                state["fresh"][b] = False
                search(done, out | 1 << b, max(span, t + out_c[b]))
                restore()
        for b in m.spill_ins(done, out):
            t = max(state["pipe"]["MTE2"], state["touch"][b])
            state["pipe"]["MTE2"] = t + in_c[b]
            state["touch"][b] = state["reload"][b] = t + in_c[b]
            s = max(span, t + in_c[b])
            no = out & ~(1 << b)
            full = m.free_ready(done, no)
            for fr in range(n):
                if full >> fr & 1 and not done >> fr & 1:
                    s = max(s, run(fr))
            search(full, no, s)
            restore()

    start = m.free_ready(0, 0)
    search(start, 0, 0)
    return None if visits[0] > limit or best[0] == 1 << 62 else best[0]
