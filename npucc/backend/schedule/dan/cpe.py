"""Stage 3, CPE (paper 000, Alg. 3, eqs. 32-36): timing refinement under a fixed memory plan.

The Stage-2 augmented graph G2 (original, spill and address-reuse edges) stays fixed, so every
buffer's address, the spill plan and the traffic are unchanged; the paper also keeps the
relative order of the memory events (ALLOC, FREE, SPILL_OUT, SPILL_IN) of L1+UB and of each L0
tier (lifetimes and peaks unchanged too), and only the order of work inside each pipe moves.
Two refinements, each kept only when the replayed makespan strictly drops (eq. 36):
1. a list-scheduling pass over G2 that runs, at each step, the node that can start earliest
   (ties: larger downstream criticality), which re-sorts every pipe's queue at once; on a plan
   without spills also with the memory events free but for L1+UB's ALLOCs, kept in order and
   each run only once the live L1+UB bytes fit the plan's peak (ties: criticality, then
   the plan's order). G2's address-reuse edges keep the addresses safe: the edges, offsets and
   the L1+UB peak stay; lifetimes and each tier's own peak may change; no deadlock: an ALLOC
   waits only for FREEs the plan put before it. Without spills and with `overlap` (a compiled
   program on one core) also with no memory order kept at all (ties: the plan's order), each
   ALLOC run just before its first user (`budget_order`): G2's edges alone order it, so the
   addresses and the spill plan stay safe, and a layer's first blocks may load beside the
   previous layer's last ones as far as the plan's memory profile leaves room
   (`headroom.Headroom`): the L1+UB peak stays within `overlap` times the plan's (unbounded:
   within what the plan's addresses span). With a finite `overlap` the same order is also
   built within `overlap` times the peak of the plan's order re-sequenced where its peak sits
   (`repeak`), followed instead of the plan's, and kept when its peak is lower and it is at
   most 1/PEAK_TRADE slower (so DAN's peak can go below the lowering order's);
2. Alg. 3's local moves (`moves.py`): along the critical chain (eq. 34), move a node before up
   to W predecessors in the order (eq. 35) when no G2 edge or memory-order constraint forbids
   it. A trial re-times only the nodes past the moved-to position whose timing can change
   (incremental), and the trials share a fixed budget of re-timed nodes (bounded,
   deterministic).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np

from npucc.backend.schedule.dan.headroom import (
    Events,
    Headroom,
    order_peak,
    peak_steps,
    plan_events,
)
from npucc.backend.schedule.dan.moves import WINDOW, Preds, local_moves
from npucc.backend.schedule.dan.mpas import tails
from npucc.backend.schedule.dan.repeak import lower_peak
from npucc.ir.replay import L0_TIERS, Replay
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileNode
from npucc.parallel import fork_map, forks

# A lower overlap budget (repeak) is kept when its order is at most 1/PEAK_TRADE slower: DAN
# ranks makespan before peak, and this is the price paid for a peak below the plan's
PEAK_TRADE = 256
UNCAPPED = 1 << 62  # an overlap budget of inf: the plan's addresses alone bound the live bytes
NONE = (1 << 62, 0, -1)  # list_order's candidate of a pipe with nothing queued


def _groups(r: Replay) -> list[int]:
    """Per augmented node: its memory-order group (0 = L1+UB, 1.. = an L0 tier, -1 = none)."""
    graph = r.graph
    group = [-1] * len(r.nodes)
    # NOTE: the memory events are each buffer's ALLOC and FREE and the spill nodes
    of_tier = {
        tier: 1 + L0_TIERS.index(tier) if tier in L0_TIERS else 0
        for tier in {buf.tier for buf in graph.buffers}
    }
    buffers = graph.buffers
    for events in (graph.alloc_of, graph.free_of):
        for b, v in events.items():
            group[v] = of_tier[buffers[b].tier]
    n = len(graph.nodes)
    for k, (b, _) in enumerate(r.spill_plan):
        group[n + 2 * k] = group[n + 2 * k + 1] = of_tier[buffers[b].tier]
    return group


def _succs(r: Replay) -> list[list[int]]:
    """The successor lists of `r.preds` (the same edges; order within a list is free)."""
    # NOTE: the graph's lists are shared, read only; a node with spill or reuse edges out of
    # it gets its own copy
    succs = [*r.graph.succs, *([] for _ in range(len(r.nodes) - len(r.graph)))]
    copied = set(range(len(r.graph), len(r.nodes)))
    for edges in (r.spill_edges, r.reuse_edges):
        for src, dst in edges:
            if src not in copied:
                succs[src] = list(succs[src])
                copied.add(src)
            succs[src].append(dst)
    return succs


def downstream(r: Replay, succs: Preds) -> list[int]:
    """Per augmented node: its downstream criticality, the longest path of pipe cycles from it
    (itself included) over G2's successors `succs`."""
    return tails(r.order, succs, r.nodes)


def list_order(
    r: Replay,
    preds: Preds,
    succs: Preds,
    group: list[int],
    cap: int | None = None,
    critical: Sequence[int] | None = None,
    beat: int | None = None,
    tables: Tables | None = None,
) -> tuple[list[int], list[int]] | None:
    """Refinement 1: earliest-start list scheduling over G2 (ties: the larger `critical`, the
    nodes' `downstream` criticality, or without the plan's order), memory order per group
    kept; with `cap`, only L1+UB's ALLOCs keep their order, each run once the live bytes fit
    `cap`. The order and its finish times under rule 5; None once a bound proves
    its makespan is not below `beat` (`tables`: the replay's, if the caller has them)."""
    nodes = r.nodes
    total = len(nodes)
    if tables is None:
        tables = Tables(r, preds)
    last: dict[int, int] = {}
    chain_next = [-1] * total
    indeg = tables.indeg[:]
    for v in r.order:
        g = group[v]
        if g >= 0 and (cap is None or (g == 0 and nodes[v].op == "ALLOC")):
            if g in last:
                chain_next[last[g]] = v
                indeg[v] += 1
            last[g] = v
    h = [0] * total if critical is None else critical
    finish = [0] * total
    # NOTE: with `cap` a parked ALLOC waits for the FREE that lets it fit, which rule 5 does
    # not: its order is timed apart (`timed`); without, the two timings are the same
    timed = finish if cap is None else [0] * total
    ready_at = [0] * total
    queue, cycles, left, queues = tables.queue, tables.cycles, tables.work[:], tables.count
    # NOTE: a node's tie key (-h, its position in the plan's order) is unique: its rank in
    # that key's order stands for it in the queues (`Tables.ranks`)
    rank, ranked = tables.ranks(critical)
    pending: list[list[tuple[int, int]]] = [[] for _ in range(queues)]  # (ready time, rank)
    avail: list[list[int]] = [[] for _ in range(queues)]  # ranks
    pipe_free = [0] * queues
    timed_free = pipe_free if cap is None else [0] * queues
    # NOTE: rule 5 runs a pipe's later nodes after its last finish, and a node's successors
    # after it: once timed_free[p] plus the pipe's work left, or a finish plus the downstream
    # criticality, reaches `beat`, so does the makespan
    stop = (1 << 62) if beat is None else beat
    # NOTE: a pipe's candidate depends on its own queues and pipe_free alone, so it is
    # recomputed only for the pipes pushed to or run since (`dirty`)
    # NOTE: a pipe with nothing queued holds NONE, which every real candidate beats (times
    # stay far below it), so the pick is a plain min over the list
    cands: list[tuple[int, int, int]] = [NONE] * len(pending)
    dirty: set[int] = set()
    sizes = [0] * total  # with `cap`: per L1+UB ALLOC its size, per FREE minus it
    if cap is not None:
        for node in nodes:
            if group[node.id] == 0:
                size = r.graph.buffers[node.bufs[0]].size
                sizes[node.id] = size if node.op == "ALLOC" else -size
    live = 0
    parked = -1  # the next L1+UB ALLOC (with `cap`), ready but not fitting yet
    fits = (1 << 62) if cap is None else cap
    heappush, heappop = heapq.heappush, heapq.heappop
    avail0 = avail[0]  # the pipe-less nodes, ready and so available (their pipe is never busy)
    idle = queues - 1  # pipes not yet busy past time 0
    ready = [v for v in range(total) if not indeg[v]]
    order: list[int] = []
    v = -1
    while True:
        for w in ready:  # NOTE: w's predecessors have all run (rule 5's start: their finish)
            if sizes[w] > 0 and live + sizes[w] > fits:
                parked = w
                continue
            t = 0
            for u in preds[w]:
                if finish[u] > t:
                    t = finish[u]
            if parked == w:  # a parked ALLOC runs no earlier than the node that let it fit
                parked = -1
                if finish[v] > t:
                    t = finish[v]
            ready_at[w] = t
            q = queue[w]
            if q:
                # NOTE: a node ready by its pipe's free time is available at once (the pick
                # would move it there before its pipe's next candidate)
                if t > pipe_free[q]:
                    heappush(pending[q], (t, rank[w]))
                else:
                    heappush(avail[q], rank[w])
                dirty.add(q)
            else:  # NOTE: a pipe-less node is available once ready
                heappush(avail0, rank[w])
        if len(order) == total:
            return order, timed
        if avail0 and not idle:  # NOTE: every pipe's candidate starts after time 0
            p, v = 0, ranked[heappop(avail0)]
        else:
            # the next pipe: the candidates of the pipes in `dirty` brought up to date, the
            # earliest start (ties: the least rank)
            for p in dirty:
                free, waiting, running = pipe_free[p], pending[p], avail[p]
                while waiting and waiting[0][0] <= free:
                    heappush(running, heappop(waiting)[1])
                if running:
                    cands[p] = (free, running[0], p)
                elif waiting:
                    t, k = waiting[0]
                    cands[p] = (t if t > free else free, k, p)
                else:
                    cands[p] = NONE
            dirty.clear()
            cands[0] = (0, avail0[0], 0) if avail0 else NONE
            p = min(cands)[2]
            if p > 0:
                dirty.add(p)
            elif p < 0:  # NOTE: cannot happen with `cap` at least the order's own peak
                raise AssertionError("the list order stalled: an ALLOC never fits the cap")
            v = ranked[heappop(avail[p]) if avail[p] else heappop(pending[p])[1]]
        if p:
            c = cycles[v]
            free = ready_at[v] if ready_at[v] > pipe_free[p] else pipe_free[p]
            if not pipe_free[p] and free + c:
                idle -= 1
            finish[v] = pipe_free[p] = free + c
            if cap is not None:
                t = timed_free[p]
                for u in preds[v]:
                    if timed[u] > t:
                        t = timed[u]
                t = timed[v] = timed_free[p] = t + c
            left[p] -= c
            if timed_free[p] + left[p] >= stop or timed[v] + h[v] - c >= stop:
                return None
        else:
            finish[v] = ready_at[v]
            if cap is not None:
                t = 0
                for u in preds[v]:
                    if timed[u] > t:
                        t = timed[u]
                timed[v] = t
        order.append(v)
        live += sizes[v]
        ready = []
        for w in succs[v]:
            indeg[w] -= 1
            if not indeg[w]:
                ready.append(w)
        c = chain_next[v]
        if c >= 0:
            indeg[c] -= 1
            if not indeg[c]:
                ready.append(c)
        if parked >= 0 and live + sizes[parked] <= fits:
            ready.append(parked)


def _queues(nodes: Sequence[TileNode]) -> tuple[list[str], list[int], list[int], list[int]]:
    """The list orders' pipe queues: the pipes (sorted), per node its queue (0: pipe-less, else
    1 + its pipe's index) and cycles, and per queue the cycles of its nodes (not run yet)."""
    pipes = sorted({node.pipe for node in nodes if node.pipe is not None})
    pipe_index = {p: i + 1 for i, p in enumerate(pipes)}
    queue = [0 if node.pipe is None else pipe_index[node.pipe] for node in nodes]
    cycles = [node.cycles for node in nodes]
    left = [0] * (len(pipes) + 1)
    for q, c in zip(queue, cycles, strict=True):
        left[q] += c
    return pipes, queue, cycles, left


class Tables:
    """What CPE's orders over one replay's G2 (`preds`) share: the pipe queues (`_queues`), the
    in-degrees, per node whether an ALLOC and its L1+UB step, and each reference order's events."""

    __slots__ = (
        "r",
        "preds",
        "count",
        "queue",
        "cycles",
        "work",
        "indeg",
        "is_alloc",
        "steps",
        "_events",
        "_ranks",
    )

    def __init__(self, r: Replay, preds: Preds) -> None:
        self.r, self.preds = r, preds
        pipes, self.queue, self.cycles, self.work = _queues(r.nodes)
        self.count = len(pipes) + 1  # queues, the pipe-less one first
        self.indeg = [len(p) for p in preds]
        self.is_alloc = [node.op == "ALLOC" for node in r.nodes]
        self.steps = peak_steps(r.graph, r.nodes)
        self._events: dict[int, tuple[Sequence[int], Events]] = {}
        self._ranks: dict[int, tuple[Sequence[int], list[int], list[int]]] = {}

    def events(self, plan: Sequence[int]) -> Events:
        """`headroom.plan_events` of the order `plan` (worked out once per order object)."""
        kept = self._events.get(id(plan))
        if kept is None or kept[0] is not plan:
            r = self.r
            kept = self._events[id(plan)] = (plan, plan_events(r.graph, r.nodes, self.preds, plan))
        return kept[1]

    def ranks(self, critical: Sequence[int] | None) -> tuple[Sequence[int], Sequence[int]]:
        """Per node its rank by (-`critical`, position in the plan's order), and per rank its
        node (None: by position alone; worked out once per `critical` object)."""
        r = self.r
        if critical is None:
            return r.position, r.order
        kept = self._ranks.get(id(critical))
        if kept is None or kept[0] is not critical:
            by = np.lexsort((np.asarray(r.position), -np.asarray(critical, dtype=np.int64)))
            rank = np.empty(len(by), dtype=np.int64)
            rank[by] = np.arange(len(by))
            kept = self._ranks[id(critical)] = (critical, rank.tolist(), by.tolist())
        return kept[1], kept[2]

    def peak(self, order: Sequence[int]) -> int:
        """The L1+UB peak of `order` (`headroom.order_peak`)."""
        return order_peak(self.steps, order)


def budget_order(
    r: Replay,
    preds: Preds,
    succs: Preds,
    cap: int,
    critical: Sequence[int],
    beat: int | None = None,
    ref: Sequence[int] | None = None,
    tables: Tables | None = None,
) -> tuple[list[int], list[int]] | None:
    """Refinement 1 with no memory order kept, within `cap` live L1+UB bytes (at least the sunk
    peak of `ref`, a topological order of G2, default the plan's): earliest-start list
    scheduling over G2 (ties: the plan's order), each ALLOC run just before its first user; a
    pipe whose next node would start buffers beyond the `Headroom` of `ref` waits, and when
    every pipe waits the first node of `ref` not run yet runs (it always fits).
    The order and its finish times under rule 5; None once a bound (`critical`: the nodes'
    `downstream` criticality) proves its makespan is not below `beat` (`tables`: the
    replay's, if the caller has them)."""
    nodes = r.nodes
    total = len(nodes)
    ref = r.order if ref is None else ref
    if tables is None:
        tables = Tables(r, preds)
    room = Headroom(r.graph, nodes, preds, ref, cap, tables.events(ref))
    size, event = room.size, room.event
    ends = [False] * total  # the FREEs of counted buffers
    for v, a in room.alloc_of.items():
        ends[v] = size[a] > 0
    pos = r.position
    is_alloc = tables.is_alloc
    plan = [v for v in ref if not is_alloc[v]]
    queue, cycles, left, queues = tables.queue, tables.cycles, tables.work[:], tables.count
    stop = (1 << 62) if beat is None else beat
    indeg = tables.indeg[:]
    pulled: list[list[int]] = [[] for _ in range(total)]  # per node: its ALLOC preds, ready
    done = [False] * total
    finish = [0] * total  # NOTE: a ready ALLOC's finish is its ready time, whenever it runs
    # NOTE: a node's position in the plan's order (its tie key) stands for it in the queues
    at = r.order
    pending: list[list[tuple[int, int]]] = [[] for _ in range(queues)]  # (ready time, key)
    avail: list[list[int]] = [[] for _ in range(queues)]  # keys
    pipe_free = [0] * queues
    # NOTE: a pipe's candidate (start, key) depends on its queues and pipe_free alone,
    # so it is recomputed only for the pipes pushed to or run since (`dirty`)
    cands: list[tuple[int, int] | None] = [None] * queues
    dirty = set(range(1, queues))
    waiting: list[int] = []  # pipe-less nodes ready (they run at once if they fit)
    held: list[int] = []  # ... that did not fit
    heappush, heappop = heapq.heappush, heapq.heappop
    order: list[int] = []
    frontier = 0  # the plan's first node (ALLOCs aside) not run yet

    # NOTE: a queued node's ALLOCs are all pulled, and only room.start marks one done, so
    # its answer holds until the room moves
    asked = [-1] * total  # per node: room.moves when it was last asked about
    answer = [False] * total  # ... and the answer then

    def fits(w: int) -> bool:
        if asked[w] == room.moves:
            return answer[w]
        wanted = [a for a in pulled[w] if size[a] and not done[a]]
        asked[w], answer[w] = room.moves, not wanted or room.fits(wanted)
        return answer[w]

    def ready(stack: list[int]) -> None:
        while stack:
            w = stack.pop()
            t = 0
            for u in preds[w]:
                if finish[u] > t:
                    t = finish[u]
            finish[w] = t
            if is_alloc[w]:
                for x in succs[w]:
                    pulled[x].append(w)
                    indeg[x] -= 1
                    if not indeg[x]:
                        stack.append(x)
            elif queue[w]:
                q = queue[w]
                # NOTE: a node ready by its pipe's free time is available at once (the
                # candidates' update would move it there first)
                if t > pipe_free[q]:
                    heappush(pending[q], (t, pos[w]))
                else:
                    heappush(avail[q], pos[w])
                dirty.add(q)
            else:
                waiting.append(w)

    def run(w: int, t: int) -> None:
        nonlocal frontier
        finish[w] = t
        allocs = pulled[w]
        if len(allocs) > 1:
            allocs.sort(key=lambda a: (event[a], a))
        for a in allocs:
            if not done[a]:
                done[a] = True
                order.append(a)
                if size[a]:
                    room.start(a)
        done[w] = True
        order.append(w)
        if ends[w]:
            room.end(w)
        while frontier < len(plan) and done[plan[frontier]]:
            frontier += 1
        stack = []
        for x in succs[w]:
            indeg[x] -= 1
            if not indeg[x]:
                stack.append(x)
        ready(stack)

    ready([v for v in range(total) if not indeg[v]])
    while len(order) < total:
        moved = True
        while moved and (waiting or held):  # NOTE: pipe-less nodes run once they fit
            moved = False
            batch = waiting + held
            waiting.clear()
            held.clear()
            for w in batch:
                if fits(w):
                    run(w, finish[w])
                    moved = True
                else:
                    held.append(w)
        if len(order) == total:
            break
        for p in dirty:
            free, later, now = pipe_free[p], pending[p], avail[p]
            while later and (later[0][0] <= free or done[at[later[0][1]]]):
                key = heappop(later)[1]
                if not done[at[key]]:
                    heappush(now, key)
            while now and done[at[now[0]]]:
                heappop(now)
            if now:
                cands[p] = (free, now[0])
            elif later:
                t, key = later[0]
                cands[p] = (t if t > free else free, key)
            else:
                cands[p] = None
        dirty.clear()
        best: tuple[int, int] | None = None
        p = 0
        for q, cand in enumerate(cands):
            # NOTE: a candidate without room waits: no later node of its pipe jumps the queue
            if cand is not None and (best is None or cand < best):
                w = at[cand[1]]
                if pulled[w] and not fits(w):
                    continue
                best, p = cand, q
        if best is None:  # every pipe waits: the plan's next node fits
            w = plan[frontier]
            p = queue[w]
            if not p:
                held.remove(w)
                run(w, finish[w])
                continue
        else:
            w = at[best[1]]
        c = cycles[w]
        t = pipe_free[p] = max(finish[w], pipe_free[p]) + c
        dirty.add(p)
        run(w, t)
        left[p] -= c
        if t + left[p] >= stop or t + critical[w] - c >= stop:
            return None
    return order, finish


def _lower(
    r: Replay,
    preds: Preds,
    succs: Preds,
    critical: Sequence[int],
    overlap: float,
    cap: int,
    beat: int | None,
    tables: Tables,
) -> tuple[list[int], list[int], int] | None:
    """The budgeted order within `overlap` times the sunk peak of the plan's order re-sequenced
    where its peak sits (`repeak`), its finish times and L1+UB peak; None when that budget is
    not below `cap` or a bound proves its makespan is not below `beat`."""
    ref = lower_peak(r.graph, r.nodes, preds, r.order)
    low = int(max(tables.events(ref)[3]) * overlap)  # NOTE: the sunk peak of ref
    if low >= cap:
        return None
    found = budget_order(r, preds, succs, low, critical, beat, ref, tables)
    return None if found is None else (found[0], found[1], tables.peak(found[0]))


def cpe(
    schedule: Schedule,
    r: Replay,
    window: int = WINDOW,
    overlap: float | None = None,
    jobs: int = 1,
) -> Schedule:
    """A refined Stage-2 schedule (same offsets and spills); the input order if none is faster.

    With `overlap` (a compiled program: an L1+UB budget, a multiple of the plan's peak, or inf)
    and no spills also the list order that keeps no memory order, within that budget
    (`budget_order`); with None, the paper's contract: the plan's memory order stays. `jobs`:
    worker processes for the orders tried (the same schedule whatever the number)."""
    preds = r.preds
    succs = _succs(r)
    group = _groups(r)
    order = list(schedule.order)
    # NOTE: r replays schedule: its finish times are rule 5's of this order over G2
    timed = list(r.finish)
    # NOTE: measured on bench/roofline.py's models, each of the first three wins somewhere;
    # the budgeted order (`overlap` only) wins on all five (r50f, danpeak)
    h = downstream(r, succs)
    tables = Tables(r, preds)
    cap = None  # with `overlap`: the budget every order kept must stay within
    if overlap is not None and not r.spills:
        # NOTE: a multiple of the plan's peak with its ALLOCs sunk to their first users (the
        # sequence budget_order follows; at most r.peak), so the plan's next node always fits
        peak = max(tables.events(r.order)[3])
        cap = UNCAPPED if math.isinf(overlap) else int(peak * overlap)
    kept_ok = cap is None or tables.peak(order) <= cap
    tries: list[tuple[list[int], int | None, list[int] | None]] = [(group, None, h)]
    if not r.spills:
        tries += [(group, r.peak, h), (group, r.peak, None)]
    budget = len(tries)  # the index of the budgeted order's try, then of the lower budget's
    lower = cap is not None and overlap is not None and not math.isinf(overlap)

    def attempt(j: int, beat: int | None) -> tuple[list[int], list[int], int] | None:
        """Try j's order, finish times and L1+UB peak (with `cap`; else 0), None once a
        bound proves its makespan is not below `beat`."""
        if j < budget:
            kept, limit, critical = tries[j]
            found = list_order(r, preds, succs, kept, limit, critical, beat, tables)
        elif j == budget:
            assert cap is not None
            found = budget_order(r, preds, succs, cap, h, beat, tables=tables)
        else:
            assert cap is not None and overlap is not None
            return _lower(r, preds, succs, h, overlap, cap, beat, tables)
        if found is None:
            return None
        return found[0], found[1], 0 if cap is None else tables.peak(found[0])

    # NOTE: bounds of the tries made ahead: the plan's makespan, and for the lower budget's
    # the makespan it may trade up to (the list tries 1, the budgeted ones about twice that;
    # the lower budget's also re-sequences the plan)
    best = max(timed, default=0)
    beats = [best] * (budget + (cap is not None)) + [best + best // PEAK_TRADE + 1] * lower
    weights = [1] * budget + [2] * (cap is not None) + [4] * lower
    ahead = _tries_ahead(attempt, beats, weights, kept_ok, jobs)
    get = attempt if ahead is None else lambda j, _: ahead[j]
    for j in range(budget):
        found = get(j, max(timed, default=0))
        if found is None or (cap is not None and found[2] > cap):
            continue
        if not kept_ok or max(found[1], default=0) < max(timed, default=0):
            order, timed, kept_ok = found[0], found[1], True
    if cap is not None:
        found = get(budget, max(timed, default=0) if kept_ok else None)
        if found is not None and (not kept_ok or max(found[1], default=0) < max(timed, default=0)):
            order, timed = found[0], found[1]
        if lower:
            # NOTE: kept when its peak is lower and it is at most 1/PEAK_TRADE slower
            best = max(timed, default=0)
            limit = best + best // PEAK_TRADE
            found = get(budget + 1, limit + 1)
            if (
                found is not None
                and max(found[1], default=0) <= limit
                and found[2] < tables.peak(order)
            ):
                order, timed = found[0], found[1]
    order = local_moves(r, preds, succs, group, order, timed, window)
    return Schedule(order, dict(schedule.offsets), list(schedule.spills))


def _tries_ahead(
    attempt: Callable[[int, int | None], tuple[list[int], list[int], int] | None],
    beats: list[int],
    weights: list[int],
    kept_ok: bool,
    jobs: int,
) -> list[tuple[list[int], list[int], int] | None] | None:
    """`cpe`'s tries, try j made by a worker process bounded by `beats[j]`, when `jobs` forks
    and the plan's order is within the budget (`kept_ok`); else None (they are made in turn).

    NOTE: the same choice: a try is kept when it beats the makespan of the best so far (the
    lower budget's: when within 1/PEAK_TRADE of it), which only drops from the plan's, so a
    try bounded by the plan's either is the same order or loses; with the plan's order over
    the budget the first order within it is kept however slow, so its bound is its turn's."""
    if not kept_ok or not forks(jobs, len(beats)):
        return None
    return fork_map(lambda j: attempt(j, beats[j]), range(len(beats)), jobs, weights)
