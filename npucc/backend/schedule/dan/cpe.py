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
   (`headroom`): the L1+UB peak stays within `overlap` times the plan's (unbounded:
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

import math
from collections.abc import Callable, Sequence

import numpy as np

from npucc.backend.schedule.dan import cpe_kernel
from npucc.backend.schedule.dan.headroom import (
    Events,
    event_arrays,
    g2_arrays,
    order_peak,
    peak_steps,
    plan_events,
    room,
)
from npucc.backend.schedule.dan.moves import WINDOW, Preds, local_moves
from npucc.backend.schedule.dan.mpas import pipe_cycles, tails
from npucc.backend.schedule.dan.repeak import lower_peak
from npucc.backend.schedule.scan_kernel import csr
from npucc.errors import NpuccError
from npucc.ir.replay import L0_TIERS, Replay
from npucc.ir.schedule import Schedule
from npucc.parallel import fork_map, forks

# A lower overlap budget (repeak) is kept when its order is at most 1/PEAK_TRADE slower: DAN
# ranks makespan before peak, and this is the price paid for a peak below the plan's
PEAK_TRADE = 256
UNCAPPED = 1 << 62  # an overlap budget of inf: the plan's addresses alone bound the live bytes


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


def downstream(r: Replay, succs: Preds, tables: Tables | None = None) -> list[int]:
    """Per augmented node: its downstream criticality, the longest path of pipe cycles from it
    (itself included) over G2's successors `succs` (`tables`: the replay's, if the caller has
    them)."""
    if tables is None:
        return tails(r.order, csr(succs), pipe_cycles(r.nodes)).tolist()
    return tails(r.order, (tables.arrays.succ_off, tables.arrays.succ_idx), tables.cost).tolist()


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
    its makespan is not below `beat` (`tables`: the replay's, if the caller has them).
    The rule's home is the kernel, `cpe_kernel.list_order`."""
    if tables is None:
        tables = Tables(r, preds, succs)
    # NOTE: a node's tie key (-h, its position in the plan's order) is unique: its rank in
    # that key's order stands for it in the queues (`Tables.ranks`)
    rank, ranked = tables.ranks(critical)
    total = len(r.nodes)
    h = tables.zeros if critical is None else tables.array(critical)
    order = np.zeros(total, np.int64)
    timed = np.zeros(total, np.int64)
    outcome = cpe_kernel.list_order(
        tables.arrays,
        tables.array(r.order),
        tables.array(group),
        tables.sizes() if cap is not None else tables.zeros,
        h,
        rank,
        ranked,
        cap is not None,
        cpe_kernel.NO_BOUND if cap is None else cap,
        cpe_kernel.NO_BOUND if beat is None else min(beat, cpe_kernel.NO_BOUND),
        order,
        timed,
    )
    if outcome == cpe_kernel.STALLED:  # NOTE: cannot happen with `cap` at least its own peak
        raise AssertionError("the list order stalled: an ALLOC never fits the cap")
    if outcome == cpe_kernel.BEATEN:
        return None
    return tables.listed(order), timed.tolist()


def _queues(r: Replay) -> tuple[list[str], list[int], list[int], list[int]]:
    """The list orders' pipe queues: the pipes (sorted), per node of `r` its queue (0:
    pipe-less, else 1 + its pipe's index) and cycles, and per queue the cycles of its nodes
    (not run yet)."""
    # NOTE: a replay's `pipes` and `cycles` are its nodes' (rule 5 reads them)
    pipes = sorted({p for p in r.pipes if p is not None})
    pipe_index = {p: i + 1 for i, p in enumerate(pipes)}
    queue = [0 if p is None else pipe_index[p] for p in r.pipes]
    cycles = r.cycles
    left = [0] * (len(pipes) + 1)
    for q, c in zip(queue, cycles, strict=True):
        left[q] += c
    return pipes, queue, cycles, left


class Tables:
    """What CPE's orders over one replay's G2 (`preds`, `succs`) share: the kernel's arrays
    (`cpe_kernel.Arrays`: G2, the pipe queues of `_queues`), per node whether an ALLOC, and,
    made once when first asked for, each reference order's events (their graph-only arrays
    once for all), the ranks by a criticality, the L1+UB steps and int64 copies of lists."""

    __slots__ = (
        "r",
        "preds",
        "arrays",
        "is_alloc",
        "g2",
        "cost",
        "zeros",
        "_sizes",
        "_steps",
        "_events",
        "_graphed",
        "_ranks",
        "_arrays",
    )

    def __init__(self, r: Replay, preds: Preds, succs: Preds) -> None:
        self.r, self.preds = r, preds
        _, queue, cycles, work = _queues(r)
        # NOTE: every time of an order is at most the sum of all cycles: below 2^60 it and a
        # bound's sums stay below the kernel's NO_BOUND (2^62) in int64
        if sum(work) >= 1 << 60:
            raise NpuccError(f"{sum(work)} cycles of work: more than CPE's int64 times hold")
        self.g2 = g2_arrays(r.nodes, preds)
        pred_off, pred_idx, self.is_alloc = self.g2
        queues, costs = np.array(queue, np.int64), np.array(cycles, np.int64)
        self.cost = np.where(queues > 0, costs, 0)  # per node its pipe cycles (`pipe_cycles`)
        self.arrays = cpe_kernel.Arrays(  # type: ignore[call-arg]  # a Cython class
            pred_off,
            pred_idx,
            *csr(succs),
            queues,
            costs,
            np.diff(pred_off),
            self.is_alloc,
            np.array(work, np.int64),
        )
        self.zeros = np.zeros(len(r.nodes), np.int64)
        self._sizes: np.ndarray | None = None
        self._steps: np.ndarray | None = None
        self._events: dict[int, tuple[Sequence[int], Events]] = {}
        self._graphed: tuple[np.ndarray, np.ndarray] | None = None  # `event_arrays`
        self._ranks: dict[int, tuple[Sequence[int], np.ndarray, np.ndarray]] = {}
        self._arrays: dict[int, tuple[Sequence[int], np.ndarray]] = {}

    def sizes(self) -> np.ndarray:
        """Per node the size of its first buffer (0: none)."""
        if self._sizes is None:
            size = [buf.size for buf in self.r.graph.buffers]
            self._sizes = np.array(
                [size[n.bufs[0]] if n.bufs else 0 for n in self.r.nodes], np.int64
            )
        return self._sizes

    def events(self, plan: Sequence[int]) -> Events:
        """`headroom.plan_events` of the order `plan` (worked out once per order object)."""
        kept = self._events.get(id(plan))
        if kept is None or kept[0] is not plan:
            r = self.r
            if self._graphed is None:
                self._graphed = event_arrays(r.graph, len(r.nodes))
            events = plan_events(r.graph, r.nodes, self.preds, plan, self.g2, self._graphed)
            kept = self._events[id(plan)] = (plan, events)
        return kept[1]

    def ranks(self, critical: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray]:
        """Per node its rank by (-`critical`, position in the plan's order), and per rank its
        node (None: by position alone; worked out once per `critical` object)."""
        r = self.r
        if critical is None:
            return self.array(r.position), self.array(r.order)
        kept = self._ranks.get(id(critical))
        if kept is None or kept[0] is not critical:
            by = np.lexsort((self.array(r.position), -self.array(critical)))
            rank = np.empty(len(by), dtype=np.int64)
            rank[by] = np.arange(len(by))
            kept = self._ranks[id(critical)] = (critical, rank, by.astype(np.int64))
        return kept[1], kept[2]

    def array(self, values: Sequence[int]) -> np.ndarray:
        """`values` as an int64 array (made once per list object)."""
        kept = self._arrays.get(id(values))
        if kept is None or kept[0] is not values:
            kept = self._arrays[id(values)] = (values, np.array(values, np.int64))
        return kept[1]

    def listed(self, values: np.ndarray) -> list[int]:
        """`values` (int64, not written after) as a list, whose `array` they are."""
        out = values.tolist()
        self._arrays[id(out)] = (out, values)
        return out

    def peak(self, order: Sequence[int]) -> int:
        """The L1+UB peak of `order` (`headroom.order_peak`)."""
        if self._steps is None:
            self._steps = peak_steps(self.r.graph, len(self.r.nodes))
        return order_peak(self._steps, self.array(order))


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
    pipe whose next node would start buffers beyond the headroom of `ref` waits, and when
    every pipe waits the first node of `ref` not run yet runs (it always fits).
    The order and its finish times under rule 5; None once a bound (`critical`: the nodes'
    `downstream` criticality) proves its makespan is not below `beat` (`tables`: the
    replay's, if the caller has them).
    The rule's home is the kernel, `cpe_kernel.budget_order`."""
    ref = r.order if ref is None else ref
    if tables is None:
        tables = Tables(r, preds, succs)
    total = len(r.nodes)
    order = np.zeros(total, np.int64)
    finish = np.zeros(total, np.int64)
    plan = tables.array(ref)
    outcome = cpe_kernel.budget_order(
        tables.arrays,
        room(r.graph, r.nodes, preds, ref, cap, tables.events(ref)),
        tables.array(r.position),
        tables.array(r.order),
        plan[~tables.is_alloc[plan]],
        tables.array(critical),
        cpe_kernel.NO_BOUND if beat is None else min(beat, cpe_kernel.NO_BOUND),
        order,
        finish,
    )
    if outcome == cpe_kernel.STALLED:  # NOTE: cannot happen: `ref` is topological
        raise AssertionError("the budgeted order stalled: the plan's next node is not ready")
    if outcome == cpe_kernel.BEATEN:
        return None
    return tables.listed(order), finish.tolist()


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
    ref = lower_peak(r.graph, r.nodes, preds, r.order, g2=tables.g2)
    low = int(int(tables.events(ref)[3].max()) * overlap)  # NOTE: the sunk peak of ref
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
    tables = Tables(r, preds, succs)
    h = downstream(r, succs, tables)
    cap = None  # with `overlap`: the budget every order kept must stay within
    if overlap is not None and not r.spills:
        # NOTE: a multiple of the plan's peak with its ALLOCs sunk to their first users (the
        # sequence budget_order follows; at most r.peak), so the plan's next node always fits
        peak = int(tables.events(r.order)[3].max())
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
    order = local_moves(preds, tables.arrays, group, order, timed, window)
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
