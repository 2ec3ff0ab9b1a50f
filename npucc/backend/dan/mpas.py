"""Stage 1, MPAS (paper 000, Alg. 1, eqs. 17-21): memory-pressure-aware list scheduling.

The ready node chosen next minimises the lexicographic key (eq. 21)
(lambda: FREE 0 < other 1 < ALLOC 2, Delta_pk: change of L1+UB residency, -h(v), input order).

How npucc reads the step of eq. 19 (documented in docs/dan.md): an ALLOC is never chosen on its
own, ahead of need; it is scheduled just in time, right before the first node that uses its
buffer, and that node's step carries lambda = 2 and the ALLOC's +size. Symmetrically a node's
step carries -size for every L1/UB FREE it makes ready (FREEs go first, so they follow at once).
A key only ever decreases (an ALLOC done by a sibling, a FREE's other users done); each change
re-pushes the node (lazy decrease-key), so the heap holds O(V + E) entries: O((V + E) log V).

Rule 7 (`single_l0`, the Stage-1 output on traces): each L0 tier holds at most one live buffer.
A node whose L0 ALLOC finds its tier occupied waits in that tier's queue, and so does one whose
new L0 buffer shares no consumer with a live L0 buffer of another tier (two half-built tiles
would otherwise wait for each other's tiers). When a tier empties, its best waiter is woken.
A node that would allocate L1/UB while every successor waits for an L0 tier is futile (the load
of a tile that cannot start); it is parked in that tier's queue too, and runs only when nothing
else can. Strict mode also refuses an L0 allocation while an unscheduled ancestor of one of the
buffer's consumers allocates the same tier (that buffer could never be released: docs/dan.md).
"""

from __future__ import annotations

import heapq

from npucc.backend.schedule.replay import L0_TIERS, PEAK_TIERS
from npucc.backend.schedule.scan import topo_order
from npucc.errors import NpuccError
from npucc.ir.tiled import TileGraph

CONE_LIMIT = 256  # unscheduled ancestors searched per L0 admission (rule 7 deadlock check)
MODES = ("full", "memory", "critical")  # DAN; Fig. 7 ablations: memory-first, criticality-first


def criticality(graph: TileGraph) -> list[int]:
    """h(v) of eq. 20: the node's cycles plus the largest h of its successors."""
    h = [0] * len(graph.nodes)
    nodes = graph.nodes
    succs = graph.succs
    for v in reversed(topo_order(graph)):
        best = 0
        for w in succs[v]:
            if h[w] > best:
                best = h[w]
        h[v] = best + (nodes[v].cycles if nodes[v].pipe is not None else 0)
    return h


def mpas(
    graph: TileGraph, single_l0: bool = False, mode: str = "full", strict: bool = True
) -> list[int]:
    """The Stage-1 order (mode "memory"/"critical": the Fig. 7 ablations).

    With `single_l0` and not `strict`, rule 7 is kept where it can be and broken (rather than
    raising) when L0 tiers would wait for each other, as before Stage 2 on compiled programs.
    """
    nodes = graph.nodes
    buffers = graph.buffers
    n = len(nodes)
    preds, succs = graph.preds, graph.succs
    h = criticality(graph)
    use_delta = mode != "critical"
    use_h = mode != "memory"
    is_alloc = [node.op == "ALLOC" for node in nodes]
    is_free = [node.op == "FREE" for node in nodes]
    size_pk = [0] * n  # L1+UB bytes of an ALLOC/FREE node
    l0_tier = [-1] * n  # L0 tier index of an ALLOC node
    for node in nodes:
        if is_alloc[node.id] or is_free[node.id]:
            buf = buffers[node.bufs[0]]
            if buf.tier in PEAK_TIERS:
                size_pk[node.id] = buf.size
            elif node.op == "ALLOC" and buf.tier in L0_TIERS:
                l0_tier[node.id] = L0_TIERS.index(buf.tier)
    done = [False] * n
    pending = [0] * n  # unfinished non-ALLOC predecessors
    jit = [0] * n  # L1+UB bytes of not-yet-done ALLOC predecessors
    jit_count = [0] * n
    for v in range(n):
        for u in preds[v]:
            if is_alloc[u]:
                jit[v] += size_pk[u]
                jit_count[v] += 1
            else:
                pending[v] += 1
    enabled = [0] * n  # L1+UB bytes of FREEs whose last pending predecessor is v
    last_pred = [-1] * n  # for a FREE with one pending predecessor: which one
    key = [(0, 0, 0, 0)] * n
    in_ready = [False] * n
    ready: list[tuple[int, int, int, int]] = []

    def make_key(v: int) -> tuple[int, int, int, int]:
        if is_free[v]:
            return (0, -size_pk[v] if use_delta else 0, -h[v] if use_h else 0, v)
        level = 2 if jit_count[v] else 1
        delta = jit[v] - enabled[v] if use_delta else 0
        return (level, delta, -h[v] if use_h else 0, v)

    def refresh(v: int) -> None:
        if in_ready[v]:
            k = make_key(v)
            if k != key[v]:
                key[v] = k
                heapq.heappush(ready, k)

    def make_ready(v: int) -> None:
        in_ready[v] = True
        key[v] = make_key(v)
        heapq.heappush(ready, key[v])

    def free_progress(f: int) -> None:
        # FREE f lost a pending predecessor: credit its last one, or make f ready
        if pending[f] == 1:
            p = next(u for u in preds[f] if not done[u] and not is_alloc[u])
            last_pred[f] = p
            enabled[p] += size_pk[f]
            refresh(p)
        elif pending[f] == 0:
            make_ready(f)

    users_l0: dict[int, set[int]] = {}  # L0 ALLOC node -> consumers of its buffer (rule 7)
    if single_l0:
        for v in range(n):
            if l0_tier[v] >= 0:
                users_l0[v] = set()
        for node in nodes:
            if not is_alloc[node.id] and not is_free[node.id]:
                for b in node.bufs:
                    a = graph.alloc_of[b]
                    if l0_tier[a] >= 0:
                        users_l0[a].add(node.id)
    live_l0: list[int] = [-1, -1, -1]  # per L0 tier: its live ALLOC node, or -1
    live_count = [0, 0, 0]
    waiting: list[list[tuple[int, int, int, int]]] = [[], [], []]
    woken: list[int] = [0, 0, 0]  # waiters woken from each tier and not yet reconsidered
    wake_tier = [-1] * n
    settled = [False, False, False]  # empty tier whose woken head still waits (for ancestors)

    def needs_tier(u: int, v: int, t: int) -> bool:
        """Does an unscheduled ancestor of a consumer of u's buffer (not v) allocate tier t?"""
        seen = {u, v}
        stack = [c for c in users_l0[u] if c != v]
        while stack and len(seen) < CONE_LIMIT:
            x = stack.pop()
            for y in preds[x]:
                if y not in seen and not done[y]:
                    if l0_tier[y] == t:
                        return True
                    seen.add(y)
                    stack.append(y)
        return False

    def blocker(v: int) -> int:
        """The L0 tier v must wait for (rule 7), or -1."""
        for u in preds[v]:
            t = l0_tier[u]
            if t < 0 or done[u]:
                continue
            if live_count[t] or (strict and needs_tier(u, v, t)):
                return t
            for s in range(3):
                a = live_l0[s]
                if s != t and a >= 0 and users_l0[a].isdisjoint(users_l0[u]):
                    return s
        return -1

    def futile(v: int) -> int:
        """The L0 tier blocking every successor of v, when v would allocate L1/UB for nothing."""
        tier = -1
        for w in succs[v]:
            if is_free[w]:
                continue
            b = blocker(w)
            if b < 0:
                return -1
            if tier < 0:
                tier = b
        return tier

    def wake() -> None:
        for t in range(3):
            if not live_count[t] and waiting[t] and not woken[t] and not settled[t]:
                k = heapq.heappop(waiting[t])
                woken[t] += 1
                wake_tier[k[3]] = t
                make_ready(k[3])

    order: list[int] = []

    def emit(v: int) -> None:
        done[v] = True
        order.append(v)
        if is_alloc[v]:
            t = l0_tier[v]
            if single_l0 and t >= 0:
                live_l0[t] = v
                live_count[t] += 1
            for w in succs[v]:
                jit[w] -= size_pk[v]
                jit_count[w] -= 1
                refresh(w)
            return
        if is_free[v] and single_l0:
            t = l0_tier[graph.alloc_of[nodes[v].bufs[0]]]
            if t >= 0:
                live_count[t] -= 1
                if not live_count[t]:
                    live_l0[t] = -1
                    settled[t] = False
                    wake()
        for w in succs[v]:
            pending[w] -= 1
            if is_free[w]:
                if last_pred[w] == v:
                    last_pred[w] = -1
                free_progress(w)
            elif not pending[w]:
                make_ready(w)

    for v in range(n):
        if is_free[v] and pending[v] == 1:
            free_progress(v)
    for v in range(n):
        if not pending[v] and not is_alloc[v]:
            make_ready(v)
    while len(order) < n:
        if not ready:
            # parked nodes whose wait is over first, else the best futile allocation
            parked = [
                (futile(x[3]) >= 0, x, t) for t in range(3) for x in waiting[t] if blocker(x[3]) < 0
            ]
            if not parked and not strict:  # rule 7 is a preference here: break the wait
                parked = [(True, x, t) for t in range(3) for x in waiting[t]]
            if not parked:
                stuck = min(v for v in range(n) if not done[v])
                raise NpuccError(f"no schedule: node {stuck} waits forever ({graph.name})")
            _, k, t = min(parked)
            waiting[t].remove(k)
            heapq.heapify(waiting[t])
            for u in preds[k[3]]:
                if is_alloc[u] and not done[u]:
                    emit(u)
            emit(k[3])
            wake()
            continue
        k = heapq.heappop(ready)
        v = k[3]
        if done[v] or not in_ready[v] or k != key[v]:
            continue  # a stale entry
        in_ready[v] = False
        t = wake_tier[v]
        if t >= 0:
            wake_tier[v] = -1
            woken[t] -= 1
        if single_l0 and jit_count[v]:
            b = blocker(v)
            if b < 0 and jit[v]:
                b = futile(v)
            if b >= 0:
                heapq.heappush(waiting[b], k)
                if b == t and not live_count[t]:
                    settled[t] = True
                wake()
                continue
        for u in preds[v]:
            if is_alloc[u] and not done[u]:
                emit(u)
        emit(v)
        if single_l0:
            wake()
    return order
