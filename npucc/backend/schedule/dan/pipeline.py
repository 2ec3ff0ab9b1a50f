"""DAN-Scheduler (paper 000): MPAS order -> DLR layout and spills -> CPE timing refinement."""

from __future__ import annotations

import time

from npucc import progress
from npucc.backend.schedule.dan.cpe import cpe
from npucc.backend.schedule.dan.dlr import DlrVictim
from npucc.backend.schedule.dan.mpas import Prep, mpas, prepare
from npucc.backend.schedule.scan import (
    LinearScan,
    ScanState,
    TooManySpills,
    Trail,
    Uses,
    buffer_tiers,
    scan_arrays,
    topo_order,
)
from npucc.backend.schedule.scan_kernel import Space
from npucc.errors import NpuccError
from npucc.ir.replay import Replay, replay, replay_base, replay_within
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph
from npucc.parallel import fork_map, forks
from npucc.target.cost import SpillModel

# Stage-1 orders placed by DLR: MPAS with the paper's key (lambda, Delta, -h, ord), MPAS with the
# memory-first key (lambda, Delta, ord), and the lowering order (smallest ready id first)
ORDERS = ("full", "memory", "lowering")
# The order in which they are placed (the winner does not depend on it, see dan): the cheap
# lowering order first, then the memory-first key, whose plan is usually the better MPAS plan
# where plans spill (docs/dan.md), so the paper key's scan stops at its first spill that ranks
# it worse instead of running to the end
TRIAL = ("lowering", "memory", "full")
AHEAD = (8, 16)  # reload distances tried (`dlr(..., ahead=)`) when the best plan spills
# NOTE: measured (docs/design.md, danpar31, sched35): below this many nodes a graph's tries stay
# in this process, as forking workers and pickling their results back costs more than it saves
# (at 2 workers the tries' workers cost 2-3x their work in process; 1e6 nodes broke even)
FORK_NODES = 1_000_000


# A plan's replay measured by a worker within a makespan: (that makespan, its (makespan, peak)
# or None when slower)
Hint = tuple[int, tuple[int, int] | None]


class _Plans:
    """The best Stage-2 plan so far. Plans compare by extra DDR traffic, spills, makespan, then
    peak residency (then the ORDERS index); a plan is replayed only to break a tie on the first
    two, and DLR abandons a plan as soon as those rank it worse than the best."""

    __slots__ = (
        "graph",
        "capacity",
        "model",
        "alignment",
        "victim",
        "known",
        "schedule",
        "key",
        "order",
        "win",
        "timed",
        "tiers",
        "arrays",
        "base",
    )

    def __init__(
        self, graph: TileGraph, capacity: dict[str, int], model: SpillModel, alignment: int
    ) -> None:
        self.graph, self.capacity, self.model, self.alignment = graph, capacity, model, alignment
        self.victim = DlrVictim(graph, model)
        # per order placed: (order, its Uses, placement -> LinearScan.first of its scan,
        # placement -> the Trail of its plain scan)
        self.known: list[tuple[list[int], Uses, dict[str, ScanState], dict[str, Trail]]] = []
        self.schedule: Schedule | None = None
        self.key: tuple[int, int] | None = None  # the best plan's (extra DDR, spills)
        self.order: list[int] = []  # its Stage-1 order
        self.win = len(ORDERS)  # its ORDERS index (len(ORDERS): a spill variant)
        self.timed: Replay | None = None  # its replay, once needed
        self.tiers = buffer_tiers(graph)  # what every scan of the graph needs
        self.arrays = scan_arrays(graph, self.tiers)
        self.base = replay_base(graph)  # what every replay of the graph needs

    def offer(
        self,
        order: list[int],
        index: int,
        placement: str = "cold",
        prefetch: bool = False,
        ahead: int = 0,
        stop: str = "worse",
        times: list[int] | None = None,
    ) -> tuple[int, int] | None:
        """Place `order` and keep the plan if it ranks better; its (extra DDR, spills), None
        if DLR abandoned it: once it ranks worse (`stop` "worse"), at its first spill
        ("spill"; a later offer of the order resumes there) or never ("never"). `times`:
        the release times of placement "timed" (LinearScan)."""
        limit = {"worse": self.key, "spill": (-1, -1), "never": None}[stop]
        cand = self.place(order, placement, prefetch, ahead, limit, times)
        if cand is None:
            return None
        return self.keep(cand, order, index)

    def place(
        self,
        order: list[int],
        placement: str,
        prefetch: bool,
        ahead: int,
        limit: tuple[int, int] | None,
        times: list[int] | None = None,
    ) -> Schedule | None:
        """DLR's plan of `order`, None once its (extra DDR, spills) exceed `limit`."""
        _, uses, first, trails = self._known(order)
        start = first.get(placement)
        trail = trails.get(placement)
        # NOTE: a plain scan records its trail where variants may follow it: the cold
        # placement's (prefetch and reloads ahead place cold)
        if not prefetch and not ahead and placement == "cold":
            at = 0 if start is None else len(start.result)
            if trail is None or not trail.marks or trail.marks[-1].pos < at:  # it records one
                trail = trails[placement] = Trail()
        scan = LinearScan(
            self.graph,
            order,
            self.capacity,
            self.alignment,
            placement,
            prefetch,
            limit,
            ahead,
            self.victim.traffic,
            uses,
            times,
            self.tiers,
            self.arrays,
        )
        try:
            return scan.run(self.victim, start, trail)
        except TooManySpills:
            return None
        finally:
            if placement not in first and scan.first is not None:
                first[placement] = scan.first

    def _known(self, order: list[int]) -> tuple[list[int], Uses, dict, dict]:
        """What the scans of `order` so far left (`known`)."""
        known = next((x for x in self.known if x[0] is order), None)
        if known is None:
            known = (order, Uses(self.graph, order, self.arrays), {}, {})
            self.known.append(known)
        return known

    def probe(self, order: list[int]) -> tuple[Schedule | None, ScanState | None]:
        """`order`'s cold plan if it places without spills; else None and the scan's state at
        its first spill (None if it failed before: its offer meets the error in turn)."""
        try:
            cand = self.place(order, "cold", False, 0, (-1, -1))
        except NpuccError:
            return None, None
        return cand, None if cand is not None else self._known(order)[2].get("cold")

    def resume(self, order: list[int], first: ScanState) -> None:
        """Let the cold scans of `order` resume at `first`, its cold scan's state at its first
        spill (made by a worker's `probe`)."""
        self._known(order)[2]["cold"] = first

    def rank(self, cand: Schedule) -> tuple[int, int]:
        """Plan `cand`'s (extra DDR, spills)."""
        return (sum(self.victim.traffic[b] for b, _ in cand.spills), len(cand.spills))

    def keep(
        self, cand: Schedule, order: list[int], index: int, hint: Hint | None = None
    ) -> tuple[int, int]:
        """Keep plan `cand` (of `order`, ORDERS index `index`) if it ranks better than the
        best; its (extra DDR, spills). `hint`: cand's replay measured against an earlier
        best's (`Hint`)."""
        key = self.rank(cand)
        timed = None
        if self.key == key:  # a tie: makespan, peak, then the ORDERS index decide
            best = self.replay()
            # NOTE: a hint measured within a makespan at least the best's tells a plan that
            # loses without its replay (one that wins is replayed as it would be without)
            if hint is not None and hint[0] >= best.makespan:
                if hint[1] is None or (*hint[1], index) >= (best.makespan, best.peak, self.win):
                    return key
            # NOTE: a plan slower than the best loses, so its replay stops once it is; it
            # goes on from the best's replay where the two plans part (the spill variants
            # part late, where a reload moves or is issued ahead)
            timed = replay_within(self.graph, cand, self.model, best.makespan, self.base, best)
            if timed is None or (timed.makespan, timed.peak, index) >= (
                best.makespan,
                best.peak,
                self.win,
            ):
                return key
        elif self.key is not None and key > self.key:
            return key
        self.schedule, self.key, self.order, self.win, self.timed = cand, key, order, index, timed
        return key

    def replay(self) -> Replay:
        """The best plan's replay."""
        assert self.schedule is not None
        if self.timed is None:
            self.timed = replay(
                self.graph,
                self.schedule,
                self.capacity,
                self.model,
                self.alignment,
                self.base,
                marked=True,
            )
        return self.timed


def stage1(graph: TileGraph, mode: str, prep: Prep | None = None) -> list[int]:
    """The Stage-1 order of one ORDERS entry (MPAS keeps rule 7 strictly where it can;
    `prep`: mpas.prepare(graph))."""
    if mode == "lowering":
        return topo_order(graph)
    try:
        return mpas(graph, single_l0=True, mode=mode, strict=True, prep=prep)
    except NpuccError:  # L0 tiers would wait for each other: rule 7 as a preference
        return mpas(graph, single_l0=True, mode=mode, strict=False, prep=prep)


def dan(
    graph: TileGraph,
    capacity: dict[str, int],
    spill_model: SpillModel,
    alignment: int = 1,
    stage: str = "full",
    overlap: float | None = None,
    jobs: int = 1,
) -> Schedule:
    """Run DAN up to `stage` ("mpas" alone: no capacities, strict rule 7; else best order);
    `overlap` (a budget, a multiple of the plan's L1+UB peak, or inf): CPE may drop the plan's
    memory order within it (`cpe.cpe`); None: the paper's contract. `jobs`: worker processes
    for the independent tries of a large graph (the same schedule whatever the number)."""
    jobs = jobs if len(graph.nodes) >= FORK_NODES else 1
    seconds = {"mpas": 0.0, "dlr": 0.0, "cpe": 0.0}
    t0 = time.perf_counter()
    if stage == "mpas":
        try:
            order = mpas(graph, single_l0=True, strict=True)
        except NpuccError as exc:  # NOTE: Stage 2 relaxes rule 7 here (stage1); alone it cannot
            raise NpuccError(
                f"scheduler 'dan-mpas' keeps at most one live buffer per L0 tier (rule 7) and "
                f"found no such order: {exc}; use dan, which relaxes rule 7 where it must"
            ) from None
        seconds["mpas"] = time.perf_counter() - t0
        schedule = unbounded_layout(graph, order, alignment)
    else:
        with progress.task("dan", len(ORDERS) + 2) as bar:
            plans = _Plans(graph, capacity, spill_model, alignment)
            # The cheap lowering order goes first: once a plan has neither spills nor extra DDR
            # traffic, any plan that spills ranks worse, so the others stop at their first spill
            # (generally: at the first spill that ranks them worse than the best so far). A
            # lowering plan that spills waits at its first spill and resumes after the MPAS
            # orders, to stop as soon as it ranks worse than theirs (plans rank the same in
            # any order of trial).
            tried = [ORDERS.index(mode) for mode in TRIAL]
            prep: Prep | None = None  # what the MPAS runs share
            premade: dict[int, Premade] = {}  # MPAS orders made (and probed) by workers
            orders: dict[int, list[int]] = {}
            keys: dict[int, tuple[int, int]] = {}  # ORDERS index -> (extra DDR, spills)
            waits = -1  # the ORDERS index of the lowering order while its plan waits
            for k, i in enumerate(tried):
                if bar is not None:
                    bar.update(k, f"dan: {ORDERS[i]} order (MPAS), layout (DLR)")
                t1 = t2 = time.perf_counter()
                try:
                    if ORDERS[i] != "lowering" and prep is None:
                        prep = prepare(graph, topo=orders.get(ORDERS.index("lowering")))
                        premade = _stage1_ahead(plans, tried[k:], prep, jobs)
                    made = premade.pop(i, None)
                    if isinstance(made, NpuccError):
                        raise made
                    cand = None
                    if made is None:
                        order = stage1(graph, ORDERS[i], prep)
                    else:
                        order, cand, first = made
                        if first is not None:
                            plans.resume(order, first)
                    orders[i] = order
                    t2 = time.perf_counter()
                    stop = "spill" if ORDERS[i] == "lowering" else "worse"
                    if cand is None:
                        key = plans.offer(order, i, stop=stop)
                    else:  # NOTE: without spills a limit never acts: the plan offer would place
                        key = plans.keep(cand, order, i)
                except NpuccError:  # the waiting plan's error comes first, as it did
                    if waits >= 0:
                        plans.offer(orders[waits], waits, stop="never")
                    raise
                seconds["mpas"] += t2 - t1
                seconds["dlr"] += time.perf_counter() - t2
                if key is not None:
                    keys[i] = key
                elif ORDERS[i] == "lowering":
                    waits = i
            if waits >= 0:
                t2 = time.perf_counter()
                key = plans.offer(orders[waits], waits)
                seconds["dlr"] += time.perf_counter() - t2
                if key is not None:
                    keys[waits] = key
            # NOTE: the variants below go in this order (lowering, then ORDERS'), which
            # decides between variants tied on every criterion
            ranked = sorted(range(len(ORDERS)), key=lambda i: ORDERS[i] != "lowering")
            placed = [(keys[i], orders[i]) for i in ranked if i in keys]
            # NOTE: the order packed besides the winner is the lowering order, or, where its
            # plan was abandoned, the paper key's: placed right after it (before TRIAL), that
            # order's plan was never abandoned and came first among the placed
            packed = orders[ranked[0]] if ranked[0] in keys else orders[ranked[1]]
            assert plans.schedule is not None and plans.key is not None
            if plans.schedule.spills:
                if bar is not None:
                    bar.update(len(ORDERS), "dan: spill variants (DLR)")
                t2 = time.perf_counter()
                _offer_variants(
                    plans, _spill_variants(plans.order, placed, plans.key, packed), jobs
                )
                seconds["dlr"] += time.perf_counter() - t2
            else:
                # the winner's order placed again, each range's release labelled with its
                # time in the winner's replay instead of its position: a layer's first loads
                # then take the space freed earliest in time, not the space freed last in
                # the order. NOTE: only without spills: on the 1e5 synthetic trace (16
                # spills) the timed plan lost, at 0.33 CPU s
                t2 = time.perf_counter()
                plans.offer(plans.order, plans.win, "timed", times=plans.replay().finish)
                seconds["dlr"] += time.perf_counter() - t2
            schedule = plans.schedule
            if stage == "full":
                if bar is not None:
                    bar.update(len(ORDERS) + 1, "dan: timing refinement (CPE)")
                t3 = time.perf_counter()
                schedule = cpe(schedule, plans.replay(), overlap=overlap, jobs=jobs)
                seconds["cpe"] = time.perf_counter() - t3
            # NOTE: CPE keeps G2's edges, so the final replay is derived from the plan's
            schedule.basis = plans.timed
    assert schedule is not None  # every stage above produces one
    schedule.method = "dan" if stage == "full" else f"dan-{stage}"
    schedule.seconds = seconds
    return schedule


# A Stage-1 order made by a worker with its `_Plans.probe`, or the error of its MPAS run
Premade = tuple[list[int], Schedule | None, ScanState | None] | NpuccError


def _stage1_ahead(plans: _Plans, tried: list[int], prep: Prep, jobs: int) -> dict[int, Premade]:
    """The Stage-1 orders (or their errors) of the MPAS entries of `tried` (ORDERS indices),
    each made and probed (`_Plans.probe`) by a worker process, when `jobs` forks; else none."""
    modes = [i for i in tried if ORDERS[i] != "lowering"]
    if not forks(jobs, len(modes)):
        return {}

    def made(i: int) -> Premade:
        # NOTE: an order's error is raised where the order is used, as without workers
        try:
            order = stage1(plans.graph, ORDERS[i], prep)
        except NpuccError as exc:
            return exc
        return (order, *plans.probe(order))

    return dict(zip(modes, fork_map(made, modes, jobs), strict=True))


Variant = tuple[list[int], str, bool, int]  # order, placement, prefetch, reload distance


def _offer_variants(plans: _Plans, variants: list[Variant], jobs: int) -> None:
    """Offer each variant's plan in turn (ORDERS index: a spill variant); with `jobs` that
    fork, each placed by a worker process within the best plan's (extra DDR, spills) before
    them, and a plan that ties them replayed there within the best's makespan, then kept in
    turn as without workers.

    NOTE: the same choice: a plan placed within a looser limit than its turn's is the same
    plan where it fits that turn's limit, and ranks worse than the best where it does not
    (the limit only grows looser, and (extra DDR, spills) only grows during a scan); the
    best's makespan only drops, so a replay within the earlier best's tells the losers."""
    if not forks(jobs, len(variants)):
        for order, placement, prefetch, ahead in variants:
            plans.offer(order, len(ORDERS), placement, prefetch, ahead)
        return
    limit = plans.key
    best = plans.replay()

    def place(variant: Variant) -> tuple[Schedule, Hint | None] | None:
        cand = plans.place(*variant, limit)
        if cand is None:
            return None
        if plans.rank(cand) != limit:
            return cand, None
        timed = replay_within(plans.graph, cand, plans.model, best.makespan, plans.base, best)
        return cand, (best.makespan, None if timed is None else (timed.makespan, timed.peak))

    # NOTE: a cold variant follows the trail of the plain scan of its order: the light ones
    weights = [1 if placement == "cold" else 8 for _, placement, _, _ in variants]
    for variant, got in zip(variants, fork_map(place, variants, jobs, weights), strict=True):
        if got is not None:
            plans.keep(got[0], variant[0], len(ORDERS), got[1])


def _spill_variants(
    best: list[int],
    placed: list[tuple[tuple[int, int], list[int]]],
    key: tuple[int, int],
    lowering: list[int],
) -> list[Variant]:
    """The DLR re-placements tried when the best plan spills.

    The winner with SPILL_INs prefetched; the orders whose plans tie the winner's traffic and
    spills with reloads issued ahead of their use (spilled buffers come back while the pipes
    still work on others); the winner's and the lowering order packed best-fit and first-fit
    (coldest fit can fragment a tight tier into spills that a packed placement avoids;
    `lowering`: the order dan packs besides the winner).
    """
    tied = [o for k, o in placed if k == key]
    variants: list[Variant] = [(best, "cold", True, 0)]
    variants += [(o, "cold", False, a) for o in tied for a in AHEAD]
    for o in (best, lowering) if best is not lowering else (best,):
        variants += [(o, placement, False, 0) for placement in ("best", "first")]
    return variants


def unbounded_layout(graph: TileGraph, order: list[int], alignment: int = 1) -> Schedule:
    """Stage-1 layout: first-fit in tiers of unbounded size, no spills."""
    free: dict[str, Space] = {}
    offsets: dict[int, int] = {}
    unbounded = 1 << 60
    for v in order:
        node = graph.nodes[v]
        if node.op not in ("ALLOC", "FREE"):
            continue
        b = node.bufs[0]
        buf = graph.buffers[b]
        fl = free.setdefault(buf.tier, Space(unbounded, alignment))
        if node.op == "ALLOC":
            off = fl.first_fit(buf.size)
            assert off >= 0
            fl.take(off, buf.size)
            offsets[b] = int(off)
        else:
            fl.give(offsets[b], buf.size)
    return Schedule(order, dict(sorted(offsets.items())))


def dan_mpas(graph, capacity, spill_model, alignment=1) -> Schedule:
    """DAN Stage 1 only (registry entry "dan-mpas")."""
    return dan(graph, capacity, spill_model, alignment, "mpas")


def dan_dlr(graph, capacity, spill_model, alignment=1, jobs=1) -> Schedule:
    """DAN Stages 1-2 (registry entry "dan-dlr")."""
    return dan(graph, capacity, spill_model, alignment, "dlr", jobs=jobs)
