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
A node whose L0 ALLOC finds its tier occupied waits, and so does one whose new L0 buffer shares
no consumer with a live L0 buffer of another tier (two half-built tiles would otherwise wait for
each other's tiers). A node that would allocate L1/UB while every successor waits for an L0 tier
is futile (the load of a tile that cannot start); it waits too, and runs only when nothing else
can. Strict mode also refuses an L0 allocation while an unscheduled ancestor of one of the
buffer's consumers allocates the same tier (that buffer could never be released: docs/dan.md).
Waiting nodes are indexed by what they wait for (their own L0 tier, or "futile"); while an L0
tier is live only the companions of its buffer can run, so waking looks at those (local fan-out)
or, with no tier live, at each class's best node: no scan over all waiters.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from npucc.backend.schedule.scan import topo_order
from npucc.errors import NpuccError
from npucc.ir.replay import L0_TIERS
from npucc.ir.residency import PEAK_TIERS
from npucc.ir.tiled import TileGraph, TileNode

CONE_LIMIT = 256  # unscheduled ancestors searched per L0 admission (rule 7 deadlock check)


def tails(
    order: Sequence[int], succs: Sequence[Sequence[int]], nodes: Sequence[TileNode]
) -> list[int]:
    """Per node, the longest path of pipe cycles from it (itself included) over `succs`;
    `order` is a topological order of those edges."""
    h = [0] * len(nodes)
    for v in reversed(order):
        best = 0
        for w in succs[v]:
            if h[w] > best:
                best = h[w]
        h[v] = best + (nodes[v].cycles if nodes[v].pipe is not None else 0)
    return h


def criticality(graph: TileGraph, topo: list[int] | None = None) -> list[int]:
    """h(v) of eq. 20: the node's cycles plus the largest h of its successors (`topo`:
    topo_order(graph), if the caller has it)."""
    return tails(topo_order(graph) if topo is None else topo, graph.succs, graph.nodes)


@dataclass(slots=True)
class Prep:
    """What MPAS derives from the graph alone, shared by the runs on one graph."""

    h: list[int]  # criticality
    is_alloc: list[bool]
    is_free: list[bool]
    size_pk: list[int]  # L1+UB bytes of an ALLOC/FREE node
    l0_tier: list[int]  # L0 tier index of an ALLOC node, or -1
    free_l0: list[int]  # L0 tier index of a FREE node's buffer, or -1
    pending: list[int]  # non-ALLOC predecessors
    jit: list[int]  # L1+UB bytes of ALLOC predecessors
    jit_count: list[int]  # ALLOC predecessors
    users_l0: dict[int, set[int]] | None  # L0 ALLOC node -> consumers of its buffer (rule 7)
    l0_preds: list[tuple[int, ...]]  # per node: its L0 ALLOC predecessors, in preds order
    low: list[int]  # per node: the low fields of its key with -h, ((hmax - h) << vbits) | id


def prepare(graph: TileGraph, single_l0: bool = True, topo: list[int] | None = None) -> Prep:
    """The graph-only part of `mpas` (`single_l0`: with the rule 7 consumer sets; `topo`:
    topo_order(graph), if the caller has it)."""
    nodes = graph.nodes
    buffers = graph.buffers
    n = len(nodes)
    preds = graph.preds
    h = criticality(graph, topo)
    alloc_of, succs = graph.alloc_of, graph.succs
    ops = [node.op for node in nodes]
    is_alloc = [op == "ALLOC" for op in ops]
    is_free = [op == "FREE" for op in ops]
    events = [v for v in range(n) if is_alloc[v] or is_free[v]]  # ALLOC and FREE nodes
    size_pk = [0] * n  # L1+UB bytes of an ALLOC/FREE node
    l0_tier = [-1] * n  # L0 tier index of an ALLOC node
    for v in events:
        buf = buffers[nodes[v].bufs[0]]
        if buf.tier in PEAK_TIERS:
            size_pk[v] = buf.size
        elif is_alloc[v] and buf.tier in L0_TIERS:
            l0_tier[v] = L0_TIERS.index(buf.tier)
    free_l0 = [-1] * n
    for v in events:
        if is_free[v]:
            free_l0[v] = l0_tier[alloc_of[nodes[v].bufs[0]]]
    jit = [0] * n
    jit_count = [0] * n
    l0_allocs: list[int] = []
    for a in events:  # NOTE: succs mirror preds, each edge once
        if is_alloc[a]:
            size = size_pk[a]
            for w in succs[a]:
                jit[w] += size
                jit_count[w] += 1
            if l0_tier[a] >= 0:
                l0_allocs.append(a)
    pending = [len(p) - c for p, c in zip(preds, jit_count, strict=True)]
    users_l0: dict[int, set[int]] | None = {} if single_l0 else None
    if users_l0 is not None:
        for a in l0_allocs:
            users_l0[a] = set()
        for node in nodes:
            if not is_alloc[node.id] and not is_free[node.id]:
                for b in node.bufs:
                    a = alloc_of[b]
                    if l0_tier[a] >= 0:
                        users_l0[a].add(node.id)
    none: tuple[int, ...] = ()
    l0_preds = [none] * n
    for a in l0_allocs:
        for w in succs[a]:
            l0_preds[w] = (*l0_preds[w], a)
    for a in l0_allocs:  # NOTE: in preds order, as blocker and need walk them
        for w in succs[a]:
            if len(l0_preds[w]) > 1:
                l0_preds[w] = tuple(u for u in preds[w] if l0_tier[u] >= 0)
    hmax, vbits = max(h, default=0), _vbits(n)
    low = [((hmax - x) << vbits) | v for v, x in enumerate(h)]
    return Prep(
        h,
        is_alloc,
        is_free,
        size_pk,
        l0_tier,
        free_l0,
        pending,
        jit,
        jit_count,
        users_l0,
        l0_preds,
        low,
    )


def _vbits(n: int) -> int:
    """The bits of a key's id field for a graph of n nodes."""
    return max(n - 1, 1).bit_length()


def mpas(
    graph: TileGraph,
    single_l0: bool = False,
    mode: str = "full",
    strict: bool = True,
    prep: Prep | None = None,
) -> list[int]:
    """The Stage-1 order (mode "memory"/"critical": the Fig. 7 ablations; `prep`: prepare(graph)).

    With `single_l0` and not `strict`, rule 7 is kept where it can be and broken (rather than
    raising) when L0 tiers would wait for each other, as before Stage 2 on compiled programs.
    """
    nodes = graph.nodes
    buffers = graph.buffers
    n = len(nodes)
    preds, succs = graph.preds, graph.succs
    if prep is None or (single_l0 and prep.users_l0 is None):
        prep = prepare(graph, single_l0)
    h, is_alloc, is_free, size_pk, l0_tier, free_l0 = (
        prep.h,
        prep.is_alloc,
        prep.is_free,
        prep.size_pk,
        prep.l0_tier,
        prep.free_l0,
    )
    use_delta = mode != "critical"
    use_h = mode != "memory"
    done = [False] * n
    pending = prep.pending[:]  # unfinished non-ALLOC predecessors
    jit = prep.jit[:]  # L1+UB bytes of not-yet-done ALLOC predecessors
    jit_count = prep.jit_count[:]
    enabled = [0] * n  # L1+UB bytes of FREEs whose last pending predecessor is v
    last_pred = [-1] * n  # for a FREE with one pending predecessor: which one
    key = [-1] * n
    in_ready = [False] * n
    ready: list[int] = []
    heappush, heappop = heapq.heappush, heapq.heappop
    # NOTE: ready FREEs apart: a FREE's key (level 0) is below every other key, so the heaps'
    # joint minimum is the FREEs' when there is one
    frees: list[int] = []
    # NOTE: a key is one int that orders as the tuple (lambda, Delta, -h, id) of eq. 21 (the
    # heaps spend their time comparing keys): each field made non-negative in its own bits,
    # Delta + span (|Delta| <= span), hmax - h and the id
    span = sum(size_pk)
    hmax = max(h, default=0) if use_h else 0
    vbits = _vbits(n)
    vmask = (1 << vbits) - 1
    dbits = (2 * span).bit_length()
    shift = hmax.bit_length() + vbits

    # NOTE: no field carries into the next, so a key is the sum of its fields' parts
    levels = (span << shift, ((1 << dbits) | span) << shift, ((2 << dbits) | span) << shift)

    # a key's low fields are ((hmax - h) << vbits) | id (prep.low; without -h the id), its
    # Delta field Delta * scale
    low = prep.low if use_h else list(range(n))
    scale = 1 << shift if use_delta else 0

    def make_key(v: int) -> int:
        if is_free[v]:
            return levels[0] - size_pk[v] * scale + low[v]
        top = levels[2] if jit_count[v] else levels[1]
        return top + (jit[v] - enabled[v]) * scale + low[v]

    def refresh(v: int) -> None:
        if in_ready[v]:
            k = make_key(v)
            if k != key[v]:
                key[v] = k
                heappush(ready, k)

    def make_ready(v: int) -> None:
        in_ready[v] = True
        if is_free[v]:  # NOTE: make_key(v), inline
            k = key[v] = levels[0] - size_pk[v] * scale + low[v]
            heappush(frees, k)
        else:
            top = levels[2] if jit_count[v] else levels[1]
            k = key[v] = top + (jit[v] - enabled[v]) * scale + low[v]
            heappush(ready, k)

    def free_progress(f: int) -> None:
        # FREE f lost a pending predecessor: credit its last one, or make f ready
        if pending[f] == 1:
            for p in preds[f]:
                if not done[p] and not is_alloc[p]:
                    break
            last_pred[f] = p
            enabled[p] += size_pk[f]
            refresh(p)
        elif pending[f] == 0:
            make_ready(f)

    users_l0 = prep.users_l0 or {}  # L0 ALLOC node -> consumers of its buffer (rule 7)
    live_l0: list[int] = [-1, -1, -1]  # per L0 tier: its live ALLOC node, or -1
    live_count = [0, 0, 0]
    first_live = -1  # the live ALLOC node of the first tier holding one, or -1 (emit keeps it)
    # parked nodes by what they wait for: class t < 3 = their own L0 tier t, class 3 = futile
    waiting: list[list[int]] = [[], [], [], []]  # lazy heaps of keys
    parked = [-1] * n  # the class of a parked node, or -1
    park_key: list[int | None] = [None] * n
    n_parked = [0, 0, 0, 0]
    epoch = 0  # L0 allocations and releases so far
    woken_at = [-1] * n  # the epoch a node was woken in, or -1
    idle = [-1] * 4  # per class: the epoch in which it had no node able to run

    # (u, v) pairs are keyed u * n + v
    witness: dict[int, int] = {}  # (u, v) -> the ancestor needs_tier last found
    # NOTE: done only grows, so the unscheduled ancestors needs_tier searches only shrink: once
    # a search covered them all (not cut at CONE_LIMIT) without a match, the answer stays no
    # per node v: the (u, v) pairs answered so, bit i for u = l0_preds[v][i] (no pair key made)
    cleared = [0] * n

    def needs_tier(u: int, v: int, t: int) -> bool:
        """Does an unscheduled ancestor of a consumer of u's buffer (not v) allocate tier t?
        (The caller has checked that (u, v) is not cleared.)"""
        w = witness.get(u * n + v, -1)
        if w >= 0 and not done[w]:  # still unscheduled: the answer stands
            return True
        seen = {u, v}
        stack = [c for c in users_l0[u] if c != v]
        while stack and len(seen) < CONE_LIMIT:
            x = stack.pop()
            for y in preds[x]:
                if y not in seen and not done[y]:
                    if l0_tier[y] == t:
                        witness[u * n + v] = y
                        return True
                    seen.add(y)
                    stack.append(y)
        if not stack:
            cleared[v] |= 1 << l0_preds[v].index(u)
        return False

    l0_preds = prep.l0_preds

    def blocker(v: int) -> int:
        """The L0 tier v must wait for (rule 7), or -1."""
        ok = cleared[v]
        bit = 1
        for u in l0_preds[v]:
            if not done[u]:
                t = l0_tier[u]
                if live_count[t] or (strict and not ok & bit and needs_tier(u, v, t)):
                    return t
                if first_live >= 0:  # some tier is live
                    for a in live_l0:  # NOTE: tier t holds none (live_count[t] == 0)
                        if a >= 0 and users_l0[a].isdisjoint(users_l0[u]):
                            return l0_tier[a]
            bit <<= 1
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

    def passes(v: int) -> bool:
        """Would v run now (no tier to wait for, no allocation for nothing)?"""
        return blocker(v) < 0 and not (jit[v] and futile(v) >= 0)

    # NOTE: with no L0 tier live, passes(v) is decided by strict's ancestor checks and futility
    # alone (without strict it is true). Once v passed with no check left to make (its own
    # pending L0 admissions cleared, and, if it allocates, its first successor that is not a
    # FREE likewise, which makes futile stop there), it passes in every later state with no
    # tier live (cleared pairs stay cleared, `jit` only falls), and the test would record
    # nothing (no needs_tier call): sure[v]
    sure = [False] * n

    def settled(v: int) -> bool:
        """Is every pending L0 admission of v a cleared pair (without strict: checked by none)?"""
        if not strict:
            return True
        ok = cleared[v]
        bit = 1
        for u in l0_preds[v]:
            if not ok & bit and not done[u]:
                return False
            bit <<= 1
        return True

    def passes_unheld(v: int) -> bool:
        """passes(v) while no L0 tier is live (sure[v] kept)."""
        if sure[v]:
            return True
        if not passes(v):
            return False
        if settled(v):
            w = next((w for w in succs[v] if not is_free[w]), -1) if jit[v] else -1
            sure[v] = w < 0 or settled(w)
        return True

    def need(v: int) -> int:
        """The L0 tier of v's first unscheduled L0 allocation."""
        for u in l0_preds[v]:
            if not done[u]:
                break
        return l0_tier[u]

    def park(k: int, c: int) -> None:
        """Park the node of key k in class c."""
        v = k & vmask
        parked[v] = c
        park_key[v] = k
        if near_epoch >= 0 and v in near_found:
            near_parked.add(v)
        n_parked[c] += 1
        idle[c] = -1
        heappush(waiting[c], k)

    def unpark(v: int) -> None:
        """Take v out of its class (its heap entry goes stale)."""
        n_parked[parked[v]] -= 1
        parked[v] = -1
        park_key[v] = None
        near_parked.discard(v)

    def head(c: int) -> int | None:
        """The best node parked in class c (stale heap entries dropped)."""
        heap = waiting[c]
        while heap:
            k = heap[0]
            x = k & vmask
            if parked[x] == c and park_key[x] == k:
                return k
            heappop(heap)
        return None

    # near_live() of the first live L0 buffer near_of, and the unscheduled producers it went
    # through: valid while none of those producers is scheduled (emit drops it: near_epoch -1;
    # else the last epoch at which near_of was confirmed the first live buffer)
    near_epoch = -1
    near_of = -1
    near_found: dict[int, None] = {}
    near_producers: set[int] = set()
    near_parked: set[int] = set()  # the parked nodes of near_found (kept by park and unpark)

    def near_current() -> bool:
        """Is near_live() of the current state the one kept? (An L0 change since that leaves
        the same first live buffer leaves it so: it depends on that buffer and what is done.)"""
        nonlocal near_epoch
        if near_epoch == epoch:
            return True
        if near_epoch < 0 or first_live != near_of:
            return False
        near_epoch = epoch
        return True

    def near_live() -> dict[int, None]:
        """The nodes sharing a consumer with the first live L0 buffer (no repeats)."""
        nonlocal near_epoch, near_of, near_found
        # while an L0 tier is live only these can pass (any other would start a tile that
        # cannot finish), so waking costs the local fan-out, not a scan of every waiter
        if near_epoch == epoch or near_current():
            return near_found
        a = first_live
        found: dict[int, None] = {}
        producers = near_producers
        producers.clear()
        for w in users_l0[a]:  # its consumers, their producers and those producers' loads
            found[w] = None
            for x in preds[w]:
                if not done[x]:
                    found[x] = None
                    producers.add(x)
                    for y in preds[x]:
                        found[y] = None
        near_epoch, near_of = epoch, a
        near_found = found
        near_parked.clear()
        near_parked.update([x for x in found if parked[x] >= 0])
        return found

    def companions() -> list[list[int]]:
        """Per class, the keys of its nodes sharing a consumer with a live L0 buffer, best
        first (one pass over near_live())."""
        near: list[list[int]] = [[], [], [], []]
        near_live()
        for x in near_parked:
            near[parked[x]].append(park_key[x])  # type: ignore[arg-type]
        for keys in near:
            keys.sort()
        return near

    def first(c: int, test: Callable[[int], bool]) -> int | None:
        """The best node of class c that passes `test` (heap order; the head unless strict)."""
        # NOTE: a sorted list is a valid heap, so the class keeps its live keys, stale ones
        # dropped, and is scanned in key order without popping and re-pushing each
        live = sorted(k for k in waiting[c] if parked[k & vmask] == c and park_key[k & vmask] == k)
        waiting[c] = live
        return next((k for k in live if test(k & vmask)), None)

    def wake(tested: bool = False) -> None:
        """Make ready the best node of each class that can run, if any (`tested`: the caller
        has made its first test)."""
        # a class with none idles until the next L0 change (without `strict`, nothing else
        # changes what can run)
        # NOTE: waking makes nodes ready and schedules none, so what is done, which L0 tiers
        # are live and near_live stay the same for the four classes, and waking a node of one
        # class changes no other class's parked nodes
        e = epoch
        if not tested and strict and (near_epoch == e or near_current()) and not near_parked:
            return  # (near_live is current, so a tier is live) no parked node can pass
        near: list[list[int]] | None = None  # companions, per class
        any_live = first_live >= 0
        if any_live and strict:
            near_live()
            if not near_parked:  # no parked node can pass
                return
        for c in range(4):
            if not n_parked[c] or idle[c] == e:
                continue
            k: int | None = None
            if c < 3 and live_count[c]:
                pass  # its own tier is held: nothing in it can run
            elif any_live:  # only the nodes near the live buffer can pass
                if near is None:
                    near = [[], [], [], []]
                    near_live()
                    for x in near_parked:
                        near[parked[x]].append(park_key[x])  # type: ignore[arg-type]
                cands = near[c]
                if cands:
                    if len(cands) > 1:
                        cands.sort()
                    k = next((x for x in cands if passes(x & vmask)), None)
            else:  # no tier live: only strict's ancestor check or futility can hold it back
                k = head(c)
                if k is not None and not (sure[k & vmask] or passes_unheld(k & vmask)):
                    k = None
            if k is not None:
                unpark(k & vmask)
                woken_at[k & vmask] = e
                make_ready(k & vmask)
            elif not strict:
                idle[c] = e

    def unblocked(v: int) -> bool:
        """Does no L0 tier hold v back?"""
        return blocker(v) < 0

    def useful(v: int) -> bool:
        """Unblocked, and not allocating for nothing?"""
        return blocker(v) < 0 and futile(v) < 0

    def fallback() -> int | None:
        """When nothing is ready: the best parked node no tier holds back, futile ones last."""
        # NOTE: testing changes nothing parked nor near_live, so the companions are found once
        live = first_live >= 0
        near: list[list[int]] | None = None
        for test in (useful, unblocked):
            cands = []
            for c in range(4):
                if not n_parked[c] or (c < 3 and live_count[c]):
                    continue
                if live:
                    if near is None:
                        near = companions()
                    cands += [k for k in near[c] if test(k & vmask)]
                else:
                    k = first(c, test)
                    if k is not None:
                        cands.append(k)
            if cands:
                return min(cands)
        if strict:
            return None
        # rule 7 is a preference here: break the wait
        return min((k for k in map(head, range(4)) if k is not None), default=None)

    order: list[int] = []

    def emit(v: int) -> None:
        nonlocal near_epoch, epoch, first_live
        done[v] = True
        if v in near_producers:
            near_epoch = -1
        order.append(v)
        if is_alloc[v]:
            t = l0_tier[v]
            if single_l0 and t >= 0:
                live_l0[t] = v
                live_count[t] += 1
                epoch += 1
                a0, a1, a2 = live_l0
                first_live = a0 if a0 >= 0 else a1 if a1 >= 0 else a2
            size = size_pk[v]
            for w in succs[v]:
                jit[w] -= size
                jit_count[w] -= 1
                # NOTE: refresh(w), inline (a FREE's key does not depend on jit)
                if in_ready[w] and not is_free[w]:
                    top = levels[2] if jit_count[w] else levels[1]
                    k = top + (jit[w] - enabled[w]) * scale + low[w]
                    if k != key[w]:
                        key[w] = k
                        heappush(ready, k)
            return
        t = free_l0[v]
        if t >= 0 and single_l0:
            live_count[t] -= 1
            if not live_count[t]:
                live_l0[t] = -1
                a0, a1, a2 = live_l0
                first_live = a0 if a0 >= 0 else a1 if a1 >= 0 else a2
            epoch += 1
            wake()
        for w in succs[v]:
            left = pending[w] = pending[w] - 1
            if is_free[w]:
                if last_pred[w] == v:
                    last_pred[w] = -1
                if left:
                    if left == 1:
                        free_progress(w)
                else:  # NOTE: make_ready(w), inline
                    in_ready[w] = True
                    k = key[w] = levels[0] - size_pk[w] * scale + low[w]
                    heappush(frees, k)
            elif not left:  # NOTE: make_ready(w), inline
                in_ready[w] = True
                top = levels[2] if jit_count[w] else levels[1]
                k = key[w] = top + (jit[w] - enabled[w]) * scale + low[w]
                heappush(ready, k)

    for v in range(n):
        if is_free[v] and pending[v] == 1:
            free_progress(v)
    for v in range(n):
        if not pending[v] and not is_alloc[v]:
            make_ready(v)
    while len(order) < n:
        if not ready and not frees:
            k = fallback()
            if k is None:
                stuck = min(v for v in range(n) if not done[v])
                what = nodes[stuck].op
                if nodes[stuck].bufs:
                    buf = buffers[nodes[stuck].bufs[0]]
                    what += f" of {buf.tier} buffer b{buf.id} '{buf.name}'"
                raise NpuccError(f"no schedule: node {stuck} ({what}) waits forever ({graph.name})")
            unpark(k & vmask)
            for u in preds[k & vmask]:
                if is_alloc[u] and not done[u]:
                    emit(u)
            emit(k & vmask)
            wake()
            continue
        k = heappop(frees) if frees else heappop(ready)
        v = k & vmask
        if done[v] or not in_ready[v] or k != key[v]:
            continue  # a stale entry
        in_ready[v] = False
        stale = woken_at[v] == epoch  # woken, and no L0 tier changed since
        woken_at[v] = -1
        # NOTE: a sure node passes while no L0 tier is live (see sure)
        if single_l0 and jit_count[v] and not (sure[v] and first_live < 0):
            b = blocker(v)
            if b >= 0 or (jit[v] and futile(v) >= 0):
                c = need(v) if b >= 0 else 3
                park(k, c)
                if stale:  # nothing changed since it was woken: do not wake it again yet
                    idle[c] = epoch
                # NOTE: wake's first test, inline (as below)
                if not (strict and (near_epoch == epoch or near_current()) and not near_parked):
                    wake(True)
                continue
        if jit_count[v]:  # NOTE: its ALLOC predecessors not yet done, if any
            for u in preds[v]:
                if is_alloc[u] and not done[u]:
                    emit(u)
        emit(v)
        # NOTE: wake's first test, inline: most wakes find near_live current and unparked
        if single_l0 and not (
            strict and (near_epoch == epoch or near_current()) and not near_parked
        ):
            wake(True)
    return order
