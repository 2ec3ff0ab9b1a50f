"""Stage 1, MPAS (paper 000, Alg. 1, eqs. 17-21): memory-pressure-aware list scheduling.

The ready node chosen next minimises (level: FREE 0 < other 1 < ALLOC 2, the change of L1+UB
residency, minus the downstream criticality h(v), input order). The key of a node never
changes, so one heap serves: O((V + E) log V).

Two optional gates (npucc additions, off in the paper's Alg. 1):
- `single_l0` (rule 7, each L0 tier holds one live buffer): L0 ALLOCs are not scheduled on their
  own but just in time, together with the first node that needs them, and only when their tiers
  are empty; a node that waits for a tier is held until a FREE of that tier. Allocating all of
  a node's L0 buffers at once avoids the circular wait of two half-allocated consumers.
- `capacity`: an L1/UB ALLOC that would overflow its tier is held until a FREE of that tier.
When nothing else is ready the best held node runs anyway, so the gates never deadlock.
"""

from __future__ import annotations

import heapq

from npucc.backend.schedule.replay import L0_TIERS, PEAK_TIERS
from npucc.backend.schedule.scan import topo_order
from npucc.ir.tiled import TileGraph


def criticality(graph: TileGraph) -> list[int]:
    """h(v) of eq. 20: the node's cycles plus the largest h of its successors."""
    h = [0] * len(graph.nodes)
    nodes = graph.nodes
    for v in reversed(topo_order(graph)):
        best = 0
        for w in graph.succs[v]:
            if h[w] > best:
                best = h[w]
        h[v] = best + (nodes[v].cycles if nodes[v].pipe is not None else 0)
    return h


def mpas(
    graph: TileGraph,
    single_l0: bool = False,
    capacity: dict[str, int] | None = None,
    h: list[int] | None = None,
) -> list[int]:
    """The Stage-1 order of the graph's nodes."""
    nodes = graph.nodes
    buffers = graph.buffers
    if h is None:
        h = criticality(graph)
    n = len(nodes)
    preds = graph.preds
    done = [False] * n
    deferred = [node.op == "ALLOC" for node in nodes]  # scheduled with their first consumer

    def key_of(v: int) -> tuple[int, int, int, int]:
        node = nodes[v]
        if node.op == "FREE":
            buf = buffers[node.bufs[0]]
            return (0, -buf.size if buf.tier in PEAK_TIERS else 0, -h[v], v)
        level, delta = 1, 0
        for u in preds[v]:
            if deferred[u] and not done[u]:
                level = 2
                buf = buffers[nodes[u].bufs[0]]
                if buf.tier in PEAK_TIERS:
                    delta += buf.size
        return (level, delta, -h[v], v)

    pending = [len(p) for p in graph.preds]
    ready: list[tuple[int, int, int, int]] = []
    held: dict[str, list[tuple[int, int, int, int]]] = {}
    live_bytes: dict[str, int] = {}
    live_count: dict[str, int] = {}
    order: list[int] = []
    succs = graph.succs

    def release(v: int) -> None:
        # v ran (or, for a deferred ALLOC, became available): count it off its successors
        stack = [v]
        while stack:
            x = stack.pop()
            for w in succs[x]:
                pending[w] -= 1
                if not pending[w]:
                    if deferred[w]:
                        stack.append(w)
                    else:
                        heapq.heappush(ready, key_of(w))

    def hold(tier: str, key: tuple[int, int, int, int]) -> None:
        heapq.heappush(held.setdefault(tier, []), key)

    users: dict[int, set[int]] = {}  # L0 buffer -> its consumers (single_l0 only)
    if single_l0:
        for node in nodes:
            if node.op not in ("ALLOC", "FREE"):
                for b in node.bufs:
                    if buffers[b].tier in L0_TIERS:
                        users.setdefault(b, set()).add(node.id)
        for buf in buffers:
            users.setdefault(buf.id, set())
    live_l0: list[int] = []

    def emit(v: int) -> None:
        node = nodes[v]
        if node.op in ("ALLOC", "FREE"):
            buf = buffers[node.bufs[0]]
            if single_l0 and buf.tier in L0_TIERS:
                if node.op == "ALLOC":
                    live_l0.append(buf.id)
                else:
                    live_l0.remove(buf.id)
            sign = 1 if node.op == "ALLOC" else -1
            live_bytes[buf.tier] = live_bytes.get(buf.tier, 0) + sign * buf.size
            live_count[buf.tier] = live_count.get(buf.tier, 0) + sign
            if sign < 0 and buf.tier in held:
                for key in held.pop(buf.tier):
                    heapq.heappush(ready, key)
        done[v] = True
        order.append(v)
        if not deferred[v]:
            release(v)

    for v in [v for v in range(n) if not pending[v]]:  # roots, before any release
        if deferred[v]:
            release(v)
        else:
            heapq.heappush(ready, key_of(v))
    while ready or held:
        forced = not ready
        if forced:  # only held nodes remain: run the best one anyway
            tier = min(held, key=lambda t: held[t][0])
            heapq.heappush(ready, heapq.heappop(held[tier]))
            if not held[tier]:
                del held[tier]
        key = heapq.heappop(ready)
        v = key[3]
        node = nodes[v]
        jit = [u for u in preds[v] if deferred[u] and not done[u]]
        if not forced:
            busy = None
            for u in jit:
                b = nodes[u].bufs[0]
                tier = buffers[b].tier
                if not single_l0 or tier not in L0_TIERS:
                    continue
                if live_count.get(tier, 0):
                    busy = tier
                    break
                # a live L0 buffer of another tier must share a consumer with b: no tile
                # starts in one L0 tier while another tile is half-way through the others
                other = next((x for x in live_l0 if not users[x].intersection(users[b])), None)
                if other is not None:
                    busy = buffers[other].tier
                    break
            if busy is None and capacity is not None:
                need: dict[str, int] = {}
                for u in jit:
                    buf = buffers[nodes[u].bufs[0]]
                    need[buf.tier] = need.get(buf.tier, 0) + buf.size
                for tier, size in need.items():
                    cap = capacity.get(tier)
                    if cap is not None and live_count.get(tier, 0):
                        if live_bytes[tier] + size > cap:
                            busy = tier
                            break
            if busy is not None:
                hold(busy, key)
                continue
        for u in sorted(jit):
            emit(u)
        emit(v)
    return order
