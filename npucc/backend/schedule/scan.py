"""Linear-scan placement of a fixed order: offsets by first-fit or best-fit, spills when full.

Shared by the `original` baseline (first-fit, least-recently-used victims) and DAN's DLR stage
(best-fit, tier-aware victims). A victim policy picks one buffer among the evictable residents
of a tier; the scan inserts its SPILL_OUT at the current position and its SPILL_IN just before
the buffer's next use (its FREE counts as a use: rule 1 orders SPILL_IN before FREE). With
`prefetch`, the SPILL_IN moves back to just after the later of the buffer's SPILL_OUT and the last
release of its new address range: that range is free from there on, so capacities, overlaps and
the spill edges of rule 1 still hold, and the reload can overlap earlier work.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from operator import attrgetter

from npucc.backend.schedule.freelist import FreeList
from npucc.errors import NpuccError
from npucc.ir.labelmap import LabelMap
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph

INF = 1 << 62
USES_CHUNK = 4096  # Uses indexes at least this many positions at a time


def topo_order(graph: TileGraph) -> list[int]:
    """The topological order taking the smallest ready id first (the ids, if topological)."""
    n = len(graph.nodes)
    if _forward(graph.succs):
        return list(range(n))
    indeg = [len(p) for p in graph.preds]
    ready = [v for v in range(n) if not indeg[v]]
    heapq.heapify(ready)
    order: list[int] = []
    succs = graph.succs
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if not indeg[w]:
                heapq.heappush(ready, w)
    if len(order) != n:
        stuck = min(v for v in range(n) if indeg[v])
        raise NpuccError(f"graph has a cycle through node {stuck} ({graph.name})")
    return order


def _forward(succs: list[list[int]]) -> bool:
    """Does every edge go from a lower id to a higher one?"""
    for v, outs in enumerate(succs):
        for w in outs:
            if w <= v:
                return False
    return True


class Uses:
    """Per buffer: the positions in an order of the nodes using it, its ALLOC excluded; found
    only as far into the order as the questions asked so far needed (a scan abandoned early
    does not index the whole order)."""

    __slots__ = ("nodes", "order", "lists", "upto")

    def __init__(self, graph: TileGraph, order: list[int]) -> None:
        self.nodes = graph.nodes
        self.order = order
        self.lists: list[list[int]] = [[] for _ in graph.buffers]
        self.upto = 0  # every use before this position is listed

    def after(self, b: int, k: int) -> int:
        """Position of the first use of `b` after position k (INF if none)."""
        uses = self.lists[b]
        i = bisect_right(uses, k)
        while i == len(uses) and self.upto < len(self.order):
            self._index(max(2 * self.upto, k + 1, USES_CHUNK))
            i = bisect_right(uses, k)
        return uses[i] if i < len(uses) else INF

    def _index(self, to: int) -> None:
        """List the uses at the positions from `upto` to `to`."""
        lists, nodes, order = self.lists, self.nodes, self.order
        end = min(to, len(order))
        for k in range(self.upto, end):
            node = nodes[order[k]]
            if node.op != "ALLOC":
                for b in node.bufs:
                    lists[b].append(k)
        self.upto = end


def buffer_tiers(graph: TileGraph) -> list[str]:
    """The tiers of the graph's buffers, each once, in the order of their first buffer."""
    return list(dict.fromkeys(map(attrgetter("tier"), graph.buffers)))


def buffer_columns(graph: TileGraph, tiers: list[str]) -> tuple[list[int], list[int]]:
    """Per buffer the index of its tier in `tiers` (buffer_tiers(graph)) and its size."""
    index = {t: i for i, t in enumerate(tiers)}
    buffers = graph.buffers
    return [index[buf.tier] for buf in buffers], [buf.size for buf in buffers]


def outliving_buffers(graph: TileGraph) -> set[int]:
    """The buffers that outlive the layer allocating them (resident layer outputs)."""
    # NOTE: LinearScan places them from the top of their tier, the layers' tiles where the
    # placement says, so the tiles' churn does not split the free space around them into
    # pieces too small to use
    nodes = graph.nodes
    free_of = graph.free_of
    return {
        b
        for b, a in graph.alloc_of.items()
        if b in free_of and nodes[a].layer != nodes[free_of[b]].layer
    }


@dataclass(slots=True)
class ScanState:
    """What a LinearScan built up to a position: free lists, release labels, residents,
    offsets, last uses and the order so far (one node per position: no spill yet)."""

    free: dict[str, tuple[list[int], list[int]]]  # tier -> FreeList starts, ends
    released: dict[str, tuple[list[int], list[int], list[int]]]  # tier -> LabelMap lists
    live: dict[str, dict[int, int]]
    where: dict[int, int]
    last_use: list[int]
    result: list[int]
    labels: bool  # were release labels kept (LinearScan.labels)


TRAIL_EVERY = 256  # a Trail marks the state every this many positions


@dataclass(slots=True)
class Mark:
    """A plain scan's state before one position of its order (see Trail); the tier lists are
    copies, per tier in LinearScan.free's order."""

    pos: int
    events: int  # evictions and reloads before pos
    rlen: int  # len(result)
    nwhere: int  # buffers placed before pos
    free: list[tuple[list[int], list[int]]]
    live: list[list[tuple[int, int]]]  # resident -> offset, in insertion order
    last: list[int]  # last_use of the residents, in that order
    released: list[tuple[list[int], list[int], list[int]]]


@dataclass(slots=True)
class Trail:
    """The marks of a plain scan (no prefetch, no reloads ahead) of one order and placement.

    Between two marks with no eviction or reload between them the scan only placed and freed,
    which prefetch, reload distance and limit do not change; a scan of the same order and
    placement that reaches a mark in the same state (same free lists, residents, their last
    uses and released ranges, labels ordered alike; then the same buffers are spilled out)
    makes the same decisions up to the last such mark (before any reload ahead it has
    pending), so it copies them instead of scanning (`LinearScan.run`).
    """

    start: int = 0
    marks: list[Mark] = field(default_factory=list)
    where: dict[int, int] = field(default_factory=dict)  # the recording scan's offsets
    allocs: list[int] = field(default_factory=list)  # its buffers in placement order, once read


class TooManySpills(Exception):
    """A scan given `limit` needed more extra DDR or spills than that (it was abandoned)."""


class LinearScan:
    """One pass over a fixed order of graph nodes that yields offsets and a spill plan."""

    __slots__ = (
        "graph",
        "order",
        "capacity",
        "placement",
        "free",
        "released",
        "live",
        "where",
        "out",
        "uses",
        "last_use",
        "spills",
        "result",
        "prefetch",
        "out_at",
        "early",
        "limit",
        "traffic",
        "extra",
        "packed",
        "ahead",
        "wanted",
        "outliving",
        "first",
        "times",
        "now",
        "events",
        "labels",
        "fit",
        "tier_of",
        "size_of",
        "frees",
        "lives",
        "labelmaps",
    )

    def __init__(
        self,
        graph: TileGraph,
        order: list[int],
        capacity: dict[str, int],
        alignment: int = 1,
        placement: str = "first",
        prefetch: bool = False,
        limit: tuple[int, int] | None = None,
        ahead: int = 0,
        traffic: list[int] | None = None,
        uses: Uses | None = None,
        outliving: set[int] | None = None,
        times: list[int] | None = None,
        tiers: list[str] | None = None,
        columns: tuple[list[int], list[int]] | None = None,
    ) -> None:
        self.graph = graph
        self.order = order
        self.capacity = capacity
        # first, best, cold (FreeList.coldest_fit) or timed (coldest by `times`)
        self.placement = placement
        self.free: dict[str, FreeList] = {}
        self.released: dict[str, LabelMap] = {}
        # `tiers`: buffer_tiers(graph), if the caller has it
        tiers = buffer_tiers(graph) if tiers is None else tiers
        for tier in tiers:
            if tier not in capacity:
                raise NpuccError(f"no capacity given for tier {tier} ({graph.name})")
            self.free[tier] = FreeList(capacity[tier], alignment)
            self.released[tier] = LabelMap()
        self.live: dict[str, dict[int, int]] = {t: {} for t in self.free}  # resident -> offset
        # per buffer the index of its tier in `tiers` and its size (`columns`:
        # buffer_columns(graph, tiers), if the caller has it), per tier index its FreeList,
        # resident dict and release labels. NOTE: the scan keeps those objects for its life
        # (_restore and _follow refill them)
        self.tier_of, self.size_of = buffer_columns(graph, tiers) if columns is None else columns
        self.frees = list(self.free.values())
        self.lives = list(self.live.values())
        self.labelmaps = list(self.released.values())
        self.where: dict[int, int] = {}  # buffer -> offset at ALLOC
        self.out: dict[int, int] = {}  # spilled-out buffer -> its spill index
        # positions of each buffer's uses, ALLOC excluded (`uses`: Uses of the order)
        self.uses = Uses(graph, order) if uses is None else uses
        self.last_use = [-1] * len(graph.buffers)
        self.spills: list[tuple[int, int]] = []
        self.result: list[int] = []
        self.prefetch = prefetch
        self.out_at: dict[int, int] = {}  # spilled-out buffer -> index of its SPILL_OUT in result
        self.early: list[tuple[int, int]] = []  # (result index to precede, SPILL_IN node)
        # NOTE: a spill's traffic is >= 0, so (extra DDR, spills) only grows during a scan
        self.limit = limit  # (extra DDR, spills) beyond which the scan is abandoned
        self.traffic = traffic  # per buffer: extra DDR bytes of one spill (needed with `limit`)
        self.extra = 0  # extra DDR bytes of the spills so far (with `limit`)
        self.packed = -1  # the position whose node's buffers were repacked from offset 0
        self.ahead = ahead  # reload a spilled buffer once its next use is this many nodes away
        self.wanted: list[tuple[int, int]] = []  # (next use, buffer) heap of spilled buffers
        # `outliving`: outliving_buffers(graph), if the caller has it
        self.outliving = outliving_buffers(graph) if outliving is None else outliving
        self.first: ScanState | None = None  # the state at the first spill, once there is one
        # `times` (placement "timed"): per graph node, the time its releases are labelled with
        # (a replay's finish times), instead of their position; SPILL_IN prefetch reads
        # positions, so the two do not mix
        if (placement == "timed") != (times is not None) or (times is not None and prefetch):
            raise ValueError("times go with placement 'timed' and without prefetch")
        self.times = times
        self.now = 0  # the release label of the node being placed (with `times`)
        self.events = 0  # evictions and reloads so far (Trail)
        # NOTE: the release labels are read by the cold and timed placements, by prefetch and
        # by a Trail's marks alone: a best-fit or first-fit scan with none of them keeps none
        self.labels = placement in ("cold", "timed") or prefetch
        # 0 first-fit, 1 best-fit, 2 coldest fit (cold and timed: by their labels)
        self.fit = 2 if placement in ("cold", "timed") else 1 if placement == "best" else 0

    def next_use(self, b: int, k: int) -> int:
        """Position of the first use of `b` after position k (INF if none)."""
        return self.uses.after(b, k)

    def run(
        self,
        victim: Callable[[LinearScan, list[int], int], int],
        start: ScanState | None = None,
        trail: Trail | None = None,
    ) -> Schedule:
        """Scan the order; `victim(scan, candidates, k)` picks the buffer to evict.

        `start`: the `first` state of a scan of the same graph, order, capacities, alignment
        and placement; this scan resumes there (until its first spill a scan does not depend
        on prefetch, ahead or limit; one that kept other release labels, `labels`, is not
        resumed). `trail`: an empty Trail that a plain scan (no prefetch,
        no reloads ahead, not timed) fills, or the filled Trail of a scan of the same graph,
        order, capacities, alignment, placement and victim rule, whose decisions this scan
        copies where it reaches the same state.
        """
        graph = self.graph
        nodes = graph.nodes
        order = self.order
        last_use = self.last_use
        out = self.out
        self.labels = self.labels or trail is not None
        if start is not None and start.labels != self.labels:  # NOTE: its labels do not fit
            start = None
        k0 = 0 if start is None else self._restore(start)
        ahead = self.ahead
        result = self.result  # NOTE: only _restore rebinds it, above
        where = self.where
        wanted = self.wanted
        times = self.times
        end = len(order)
        record = follow = None
        if trail is not None and trail.marks:
            follow = trail
        elif trail is not None and not (self.prefetch or ahead or times is not None):
            record = trail
            trail.start, trail.where = k0, where
        # NOTE: with a trail the order is scanned in pieces between its marks
        k = k0
        while k < end:
            stop = end
            if record is not None:
                record.marks.append(self._mark(k))
                stop = min(k + TRAIL_EVERY, end)
            elif follow is not None:
                if k >= follow.start and (k - follow.start) % TRAIL_EVERY == 0:
                    k = self._follow(follow, k)
                    if k >= end:
                        break
                origin = follow.start
                stop = min(origin + ((k - origin) // TRAIL_EVERY + 1) * TRAIL_EVERY, end)
                if k < origin:
                    stop = min(origin, end)
            for k in range(k, stop):  # noqa: B020
                v = order[k]
                node = nodes[v]
                bufs = node.bufs
                if times is not None:
                    self.now = times[v]
                if ahead and wanted and wanted[0][0] <= k + ahead:
                    self._reload_ahead(k, bufs, victim)
                op = node.op
                if op == "ALLOC":
                    b = bufs[0]
                    where[b] = self._place(b, bufs, k, victim)
                    result.append(v)
                    last_use[b] = k
                    continue
                if out:
                    for b in bufs:
                        if b in out:
                            pending = [x for x in bufs if x in out]
                            # a repack (_place) may spill the node's other buffers
                            while pending:
                                self._reload(pending[0], bufs, k, victim)
                                pending = [x for x in bufs if x in out]
                            break
                if op == "FREE":
                    b = bufs[0]
                    self._give(b)
                    result.append(v)
                    last_use[b] = k
                    continue
                result.append(v)
                for b in bufs:
                    last_use[b] = k
            k = stop
        if record is not None:
            record.marks.append(self._mark(end))
        order = self.result
        if self.early:
            order = []
            done = 0  # result[:done] is in order
            # stable: ties in decision order
            for k, v in sorted(self.early, key=lambda e: e[0]):
                order += self.result[done:k]
                order.append(v)
                done = k
            order += self.result[done:]
        nbuf = len(graph.buffers)
        # NOTE: in buffer order, without a sort where every buffer was placed (a whole scan)
        offsets = (
            {b: where[b] for b in range(nbuf)}
            if len(where) == nbuf
            else dict(sorted(where.items()))
        )
        return Schedule(order, offsets, self.spills)

    def _place(self, b: int, pinned: tuple[int, ...], k: int, victim) -> int:
        t = self.tier_of[b]
        free = self.frees[t]
        live = self.lives[t]
        size = self.size_of[b]
        while True:
            if self.packed == k:
                off = free.first_fit(size)
            elif b in self.outliving:
                off = free.last_fit(size)
            elif self.fit == 2:
                off = free.coldest_fit(size, self.labelmaps[t])
            elif self.fit:
                off = free.best_fit(size)
            else:
                off = free.first_fit(size)
            if off is not None:
                free.take(off, size)
                live[b] = off
                return off
            candidates = [x for x in live if x not in pinned]
            if not candidates and self.packed != k and live:
                # NOTE: the node's own resident buffers fragment the tier: spill them too and
                # place this node's buffers first-fit from offset 0 (they fit together)
                self.packed = k
                for x in sorted(live):
                    self._evict(x)
                continue
            if not candidates:
                buf = self.graph.buffers[b]
                raise NpuccError(
                    f"buffer {b} ({buf.size} B) does not fit in {buf.tier} "
                    f"(capacity {self.capacity[buf.tier]}) even after spilling every other "
                    f"buffer ({self.graph.name})"
                )
            self._evict(victim(self, candidates, k))

    def _mark(self, k: int) -> Mark:
        """The Trail mark of the state before position k."""
        live = [list(x.items()) for x in self.live.values()]
        return Mark(
            k,
            self.events,
            len(self.result),
            len(self.where),
            [(fl.starts[:], fl.ends[:]) for fl in self.free.values()],
            live,
            [self.last_use[b] for items in live for b, _ in items],
            [(m.starts[:], m.ends[:], m.label[:]) for m in self.released.values()],
        )

    def _follow(self, trail: Trail, k: int) -> int:
        """At the position of a mark of `trail`: where this scan is in the mark's state, take
        over the recording scan's decisions up to its next eviction or reload (and before any
        reload ahead this scan has pending); the position to go on from."""
        marks = trail.marks
        j = (k - trail.start) // TRAIL_EVERY
        if j >= len(marks) or marks[j].pos != k:
            return k
        mark = marks[j]
        cap = self.wanted[0][0] - self.ahead if self.wanted else INF
        m = j
        while m + 1 < len(marks) and marks[m + 1].events == mark.events and marks[m + 1].pos <= cap:
            m += 1
        if m == j:
            return k
        for fl, (starts, ends) in zip(self.free.values(), mark.free, strict=True):
            if fl.starts != starts or fl.ends != ends:
                return k
        for live, items in zip(self.live.values(), mark.live, strict=True):
            if len(live) != len(items) or list(live.items()) != items:
                return k
        last_use = self.last_use
        if [last_use[b] for items in mark.live for b, _ in items] != mark.last:
            return k
        # the labels: the same ranges, ordered alike (then every comparison of the placement
        # goes the same way, and later releases are later in both)
        maps: list[dict[int, int]] = []
        for lm, (starts, ends, labels) in zip(self.released.values(), mark.released, strict=True):
            if lm.starts != starts or lm.ends != ends:
                return k
            to: dict[int, int] = {}
            for x, y in zip(labels, lm.label, strict=True):
                if to.setdefault(x, y) != y:
                    return k
            keys = sorted(to)
            if any(to[a] >= to[b] for a, b in pairwise(keys)):
                return k
            maps.append(to)
        target = marks[m]
        shift = len(self.result) - mark.rlen
        for fl, (starts, ends) in zip(self.free.values(), target.free, strict=True):
            fl.starts, fl.ends = starts[:], ends[:]
        for live, items in zip(self.live.values(), target.live, strict=True):
            live.clear()
            live.update(items)
        for b, last in zip(
            (b for items in target.live for b, _ in items), target.last, strict=True
        ):
            last_use[b] = last
        old = mark.rlen  # labels below were released before the mark
        for lm, to, (starts, ends, labels) in zip(
            self.released.values(), maps, target.released, strict=True
        ):
            lm.starts, lm.ends = starts[:], ends[:]
            lm.label = [x + shift if x >= old else to[x] for x in labels]
        if not trail.allocs:
            trail.allocs = list(trail.where)
        where = self.where
        base = trail.where
        for b in trail.allocs[mark.nwhere : target.nwhere]:
            where[b] = base[b]
        self.result.extend(self.order[k : target.pos])
        return target.pos

    def _state(self) -> ScanState:
        """A copy of what the scan built so far (its position: len(result))."""
        return ScanState(
            {t: (fl.starts[:], fl.ends[:]) for t, fl in self.free.items()},
            {t: (m.starts[:], m.ends[:], m.label[:]) for t, m in self.released.items()},
            {t: dict(live) for t, live in self.live.items()},
            dict(self.where),
            self.last_use[:],
            self.result[:],
            self.labels,
        )

    def _restore(self, state: ScanState) -> int:
        """Take over a copy of `state`; the position to resume at."""
        for t, (starts, ends) in state.free.items():
            self.free[t].starts, self.free[t].ends = starts[:], ends[:]
        for t, (starts, ends, label) in state.released.items():
            m = self.released[t]
            m.starts, m.ends, m.label = starts[:], ends[:], label[:]
        for t, live in state.live.items():
            self.live[t].clear()
            self.live[t].update(live)
        self.where = dict(state.where)
        self.last_use[:] = state.last_use
        self.result = state.result[:]
        return len(self.result)

    def _evict(self, x: int) -> None:
        self.events += 1
        if self.first is None and not self.spills:
            self.first = self._state()
        if self.limit is not None:
            assert self.traffic is not None  # NOTE: given with `limit`
            extra = self.extra + self.traffic[x]
            if (extra, len(self.spills) + 1) > self.limit:
                raise TooManySpills(len(self.spills) + 1)
            self.extra = extra
        self.out[x] = len(self.spills)
        self.out_at[x] = len(self.result)
        self.result.append(len(self.graph.nodes) + 2 * len(self.spills))
        self.spills.append((x, -1))
        self._give(x)
        if self.ahead:
            heapq.heappush(self.wanted, (self.next_use(x, self.last_use[x]), x))

    def _give(self, b: int) -> None:
        t = self.tier_of[b]
        off = self.lives[t].pop(b)
        size = self.size_of[b]
        self.frees[t].give(off, size)
        if self.labels:
            label = len(self.result) if self.times is None else self.now
            self.labelmaps[t].put(off, off + size, label)

    def _reload_ahead(self, k: int, pinned: tuple[int, ...], victim) -> None:
        """Reload spilled buffers used within `ahead` positions, evicting only buffers used
        later than they are (so no reload is traded for an earlier one)."""
        wanted = self.wanted
        while wanted and wanted[0][0] <= k + self.ahead:
            use, b = heapq.heappop(wanted)
            if b not in self.out or use <= k:
                continue
            buf = self.graph.buffers[b]
            free, live = self.free[buf.tier], self.live[buf.tier]
            keep = (*pinned, b)
            while free.best_fit(buf.size) is None:
                candidates = [x for x in live if x not in keep]
                x = victim(self, candidates, k) if candidates else None
                if x is None or self.next_use(x, k) <= use:
                    heapq.heappush(wanted, (use, b))
                    return
                self._evict(x)
            self._reload(b, keep, k, victim)
            self.last_use[b] = k

    def _reload(self, b: int, pinned: tuple[int, ...], k: int, victim) -> None:
        self.events += 1
        off = self._place(b, pinned, k, victim)
        s = self.out.pop(b)
        self.spills[s] = (b, off)
        node = len(self.graph.nodes) + 2 * s + 1
        at = self.out_at.pop(b) + 1
        if self.prefetch:
            buf = self.graph.buffers[b]
            at = max(at, self.released[buf.tier].latest(off, off + buf.size) + 1)
            if at < len(self.result):
                self.early.append((at, node))
                return
        self.result.append(node)


def lru_victim(scan: LinearScan, candidates: list[int], k: int) -> int:
    """The least recently used candidate (lowest id on ties)."""
    return min(candidates, key=lambda x: (scan.last_use[x], x))
