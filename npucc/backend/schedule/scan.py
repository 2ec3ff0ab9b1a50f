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
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise, repeat
from operator import attrgetter

import numpy as np

from npucc.backend.schedule import scan_kernel
from npucc.backend.schedule.scan_kernel import INF
from npucc.errors import NpuccError
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph


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
    off, idx = scan_kernel.csr(succs)
    return bool((idx > np.repeat(np.arange(len(succs), dtype=np.int64), np.diff(off))).all())


class Uses:
    """Per buffer: the positions in an order of the nodes using it, its ALLOC excluded (the
    kernel's CSR, `scan_kernel.index_uses`), and the order as an int64 array."""

    __slots__ = ("order", "uoff", "upos")

    def __init__(
        self, graph: TileGraph, order: list[int], arrays: ScanArrays | None = None
    ) -> None:
        op, boff, bidx, *_ = scan_arrays(graph) if arrays is None else arrays
        self.order = np.array(order, np.int64)
        self.uoff = np.zeros(len(graph.buffers) + 1, np.int64)
        self.upos = scan_kernel.index_uses(op, boff, bidx, self.order, self.uoff)


def buffer_tiers(graph: TileGraph) -> list[str]:
    """The tiers of the graph's buffers, each once, in the order of their first buffer."""
    return list(dict.fromkeys(map(attrgetter("tier"), graph.buffers)))


# per node its kind (scan_kernel.OP_*) and its buffers as a CSR (offsets, entries), per buffer
# the index of its tier in buffer_tiers(graph), its size and whether it outlives its layer
ScanArrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def scan_arrays(graph: TileGraph, tiers: list[str] | None = None) -> ScanArrays:
    """The graph's arrays a scan's kernel reads (ScanArrays; `tiers`: buffer_tiers(graph))."""
    nodes, buffers = graph.nodes, graph.buffers
    kinds = {"ALLOC": scan_kernel.OP_ALLOC, "FREE": scan_kernel.OP_FREE}
    other = scan_kernel.OP_OTHER
    ops = map(attrgetter("op"), nodes)
    op = np.fromiter(map(kinds.get, ops, repeat(other)), np.uint8, len(nodes))
    boff, bidx = scan_kernel.csr(list(map(attrgetter("bufs"), nodes)))
    index = {t: i for i, t in enumerate(buffer_tiers(graph) if tiers is None else tiers)}
    tier_of = np.fromiter((index[buf.tier] for buf in buffers), np.int64, len(buffers))
    size_of = np.fromiter(map(attrgetter("size"), buffers), np.int64, len(buffers))
    outl = np.zeros(len(buffers), np.uint8)
    outl[list(outliving_buffers(graph))] = 1
    return op, boff, bidx, tier_of, size_of, outl


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

    free: dict[str, tuple[list[int], list[int]]]  # tier -> its Space's free starts, ends
    released: dict[str, tuple[list[int], list[int], list[int]]]  # tier -> its release labels
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
    where: np.ndarray | None = None  # the recording scan's offsets at ALLOC (-1: not placed)


class TooManySpills(Exception):
    """A scan given `limit` needed more extra DDR or spills than that (it was abandoned)."""


class LinearScan:
    """One pass over a fixed order of graph nodes that yields offsets and a spill plan; its
    per-node loop, placements and releases run in the kernel (scan_kernel.Core), the spill
    decisions here."""

    __slots__ = (
        "graph",
        "order",
        "capacity",
        "placement",
        "free",
        "where",
        "out",
        "uses",
        "last_use",
        "spills",
        "prefetch",
        "out_at",
        "early",
        "limit",
        "traffic",
        "extra",
        "ahead",
        "wanted",
        "first",
        "events",
        "labels",
        "core",
        "tier_of",
        "size_of",
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
        times: list[int] | None = None,
        tiers: list[str] | None = None,
        arrays: ScanArrays | None = None,
    ) -> None:
        self.graph = graph
        self.order = order
        self.capacity = capacity
        # first, best, cold (coldest fit, Space.coldest_fit) or timed (coldest by `times`)
        self.placement = placement
        # `tiers`: buffer_tiers(graph), if the caller has it; per tier its Space (free
        # segments and release labels). NOTE: the scan keeps those objects for its life
        # (_restore and _follow refill them)
        tiers = buffer_tiers(graph) if tiers is None else tiers
        self.free: dict[str, scan_kernel.Space] = {}
        for tier in tiers:
            if tier not in capacity:
                raise NpuccError(f"no capacity given for tier {tier} ({graph.name})")
            self.free[tier] = scan_kernel.Space(capacity[tier], alignment)
        # `arrays`: scan_arrays(graph, tiers), `uses`: Uses of the order, if the caller has them
        arrays = scan_arrays(graph, tiers) if arrays is None else arrays
        self.tier_of, self.size_of = arrays[3], arrays[4]
        self.uses = Uses(graph, order, arrays) if uses is None else uses
        self.where = np.full(len(graph.buffers), -1, np.int64)  # buffer -> offset at ALLOC
        self.last_use = np.full(len(graph.buffers), -1, np.int64)
        self.out: dict[int, int] = {}  # spilled-out buffer -> its spill index
        self.spills: list[tuple[int, int]] = []
        self.prefetch = prefetch
        self.out_at: dict[int, int] = {}  # spilled-out buffer -> index of its SPILL_OUT in result
        self.early: list[tuple[int, int]] = []  # (result index to precede, SPILL_IN node)
        # NOTE: a spill's traffic is >= 0, so (extra DDR, spills) only grows during a scan
        self.limit = limit  # (extra DDR, spills) beyond which the scan is abandoned
        self.traffic = traffic  # per buffer: extra DDR bytes of one spill (needed with `limit`)
        self.extra = 0  # extra DDR bytes of the spills so far (with `limit`)
        self.ahead = ahead  # reload a spilled buffer once its next use is this many nodes away
        self.wanted: list[tuple[int, int]] = []  # (next use, buffer) heap of spilled buffers
        self.first: ScanState | None = None  # the state at the first spill, once there is one
        # `times` (placement "timed"): per graph node, the time its releases are labelled with
        # (a replay's finish times), instead of their position; SPILL_IN prefetch reads
        # positions, so the two do not mix
        if (placement == "timed") != (times is not None) or (times is not None and prefetch):
            raise ValueError("times go with placement 'timed' and without prefetch")
        self.events = 0  # evictions and reloads so far (Trail)
        # NOTE: the release labels are read by the cold and timed placements, by prefetch and
        # by a Trail's marks alone: a best-fit or first-fit scan with none of them keeps none
        self.labels = placement in ("cold", "timed") or prefetch
        fit = (
            scan_kernel.FIT_COLD
            if placement in ("cold", "timed")
            else scan_kernel.FIT_BEST
            if placement == "best"
            else scan_kernel.FIT_FIRST
        )
        self.core = scan_kernel.Core(
            list(self.free.values()),
            arrays,
            (self.uses.order, self.uses.uoff, self.uses.upos),
            times,
            self.where,
            self.last_use,
            fit,
            self.labels,
        )

    def next_use(self, b: int, k: int) -> int:
        """Position of the first use of `b` after position k (INF if none)."""
        return self.core.next_use(b, k)

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
        core = self.core
        self.labels = self.labels or trail is not None
        core.labels = self.labels
        if start is not None and start.labels != self.labels:  # NOTE: its labels do not fit
            start = None
        k0 = 0 if start is None else self._restore(start)
        end = len(self.order)
        record = follow = None
        if trail is not None and trail.marks:
            follow = trail
        elif trail is not None and not (self.prefetch or self.ahead or self.placement == "timed"):
            record = trail
            trail.start = k0
        try:
            self._scan(k0, end, victim, record, follow)
        finally:
            if record is not None:  # NOTE: its marks are good up to where it stopped
                record.where = self.where.copy()
        result = core.order_so_far()
        order = result
        if self.early:
            order = []
            done = 0  # result[:done] is in order
            # stable: ties in decision order
            for k, v in sorted(self.early, key=lambda e: e[0]):
                order += result[done:k]
                order.append(v)
                done = k
            order += result[done:]
        placed = np.flatnonzero(self.where >= 0)
        offsets = dict(zip(placed.tolist(), self.where[placed].tolist(), strict=True))
        return Schedule(order, offsets, self.spills)

    def _scan(self, k: int, end: int, victim, record: Trail | None, follow: Trail | None) -> None:
        """Take positions k..end-1: in the kernel up to a node needing a spill decision, that
        node here (`_node`); with a trail in pieces between its marks."""
        advance = self.core.advance
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
            while k < stop:
                wake = self.wanted[0][0] - self.ahead if self.ahead and self.wanted else INF
                k = advance(k, stop, wake)
                if k < stop:
                    self._node(k, victim)
                    k += 1
        if record is not None:
            record.marks.append(self._mark(end))

    def _node(self, k: int, victim) -> None:
        """Take position k, whose node needs a spill decision (kernel Core.advance)."""
        core = self.core
        v = self.order[k]
        node = self.graph.nodes[v]
        bufs = node.bufs
        wanted = self.wanted
        if self.ahead and wanted and wanted[0][0] <= k + self.ahead:
            self._reload_ahead(k, bufs, victim)
        op = node.op
        if op == "ALLOC":
            b = bufs[0]
            self.where[b] = self._place(b, bufs, k, victim)
            core.push(v)
            self.last_use[b] = k
            return
        out = self.out
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
            core.release(bufs[0])
        core.push(v)
        for b in bufs:
            self.last_use[b] = k

    def _place(self, b: int, pinned: tuple[int, ...], k: int, victim) -> int:
        core = self.core
        t = int(self.tier_of[b])
        while True:
            off = core.place(b, k)
            if off >= 0:
                core.occupy(b, off)
                return int(off)
            live = core.residents(t)
            candidates = [x for x in live if x not in pinned]
            if not candidates and core.packed != k and live:
                # NOTE: the node's own resident buffers fragment the tier: spill them too and
                # place this node's buffers first-fit from offset 0 (they fit together)
                core.set_packed(k)
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

    def _lists(self) -> tuple[list, list, list]:
        """Per tier its free lists, its (resident, offset) pairs and its released lists."""
        spaces = self.free.values()
        core = self.core
        return (
            [sp.free_lists() for sp in spaces],
            [core.items(t) for t in range(len(spaces))],
            [sp.label_lists() for sp in spaces],
        )

    def _mark(self, k: int) -> Mark:
        """The Trail mark of the state before position k."""
        free, live, released = self._lists()
        last = self.last_use
        return Mark(
            k,
            self.events,
            self.core.nres,
            free,
            live,
            [int(last[b]) for items in live for b, _ in items],
            released,
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
        free, live, released = self._lists()
        if free != mark.free or live != mark.live:
            return k
        last_use = self.last_use
        if [int(last_use[b]) for items in live for b, _ in items] != mark.last:
            return k
        # the labels: the same ranges, ordered alike (then every comparison of the placement
        # goes the same way, and later releases are later in both)
        maps: list[dict[int, int]] = []
        for (starts, ends, labels), (starts2, ends2, labels2) in zip(
            mark.released, released, strict=True
        ):
            if starts2 != starts or ends2 != ends:
                return k
            to: dict[int, int] = {}
            for x, y in zip(labels, labels2, strict=True):
                if to.setdefault(x, y) != y:
                    return k
            keys = sorted(to)
            if any(to[a] >= to[b] for a, b in pairwise(keys)):
                return k
            maps.append(to)
        target = marks[m]
        core = self.core
        shift = core.nres - mark.rlen
        old = mark.rlen  # labels below were released before the mark
        for t, (sp, to) in enumerate(zip(self.free.values(), maps, strict=True)):
            starts, ends, labels = target.released[t]
            sp.load(
                target.free[t], (starts, ends, [x + shift if x >= old else to[x] for x in labels])
            )
            core.set_items(t, target.live[t])
        for b, last in zip(
            (b for items in target.live for b, _ in items), target.last, strict=True
        ):
            last_use[b] = last
        assert trail.where is not None  # NOTE: set when its recording scan stopped
        core.extend(k, target.pos, trail.where)
        return target.pos

    def _state(self) -> ScanState:
        """A copy of what the scan built so far (its position: len(result))."""
        free, live, released = self._lists()
        placed = np.flatnonzero(self.where >= 0)
        return ScanState(
            dict(zip(self.free, free, strict=True)),
            dict(zip(self.free, released, strict=True)),
            {t: dict(items) for t, items in zip(self.free, live, strict=True)},
            dict(zip(placed.tolist(), self.where[placed].tolist(), strict=True)),
            self.last_use.tolist(),
            self.core.order_so_far(),
            self.labels,
        )

    def _restore(self, state: ScanState) -> int:
        """Take over a copy of `state`; the position to resume at."""
        core = self.core
        for t, (tier, sp) in enumerate(self.free.items()):
            sp.load(state.free[tier], state.released[tier])
            core.set_items(t, state.live[tier].items())
        self.where[list(state.where)] = list(state.where.values())
        self.last_use[:] = state.last_use
        core.set_order(state.result)
        return len(state.result)

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
        core = self.core
        self.out[x] = len(self.spills)
        core.set_out(x, True)
        self.out_at[x] = core.nres
        core.push(len(self.graph.nodes) + 2 * len(self.spills))
        self.spills.append((x, -1))
        core.release(x)
        if self.ahead:
            heapq.heappush(self.wanted, (self.next_use(x, int(self.last_use[x])), x))

    def _reload_ahead(self, k: int, pinned: tuple[int, ...], victim) -> None:
        """Reload spilled buffers used within `ahead` positions, evicting only buffers used
        later than they are (so no reload is traded for an earlier one)."""
        wanted = self.wanted
        while wanted and wanted[0][0] <= k + self.ahead:
            use, b = heapq.heappop(wanted)
            if b not in self.out or use <= k:
                continue
            t = int(self.tier_of[b])
            space = self.core.spaces[t]
            keep = (*pinned, b)
            while space.best_fit(int(self.size_of[b])) < 0:
                candidates = [x for x in self.core.residents(t) if x not in keep]
                x = victim(self, candidates, k) if candidates else None
                if x is None or self.next_use(x, k) <= use:
                    heapq.heappush(wanted, (use, b))
                    return
                self._evict(x)
            self._reload(b, keep, k, victim)
            self.last_use[b] = k

    def _reload(self, b: int, pinned: tuple[int, ...], k: int, victim) -> None:
        self.events += 1
        core = self.core
        off = self._place(b, pinned, k, victim)
        s = self.out.pop(b)
        core.set_out(b, False)
        self.spills[s] = (b, off)
        node = len(self.graph.nodes) + 2 * s + 1
        at = self.out_at.pop(b) + 1
        if self.prefetch:
            size = int(self.size_of[b])
            at = max(at, core.spaces[int(self.tier_of[b])].latest(off, off + size) + 1)
            if at < core.nres:
                self.early.append((at, node))
                return
        core.push(node)


def lru_victim(scan: LinearScan, candidates: list[int], k: int) -> int:
    """The least recently used candidate (lowest id on ties)."""
    last_use = scan.last_use
    return min(candidates, key=lambda x: (last_use[x], x))
