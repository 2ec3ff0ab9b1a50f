"""The replay rules 1-6 of shared/dan-traces.md (one implementation) and an independent validator.

`replay` turns a graph and a `Schedule` into the augmented graph (SPILL_OUT/SPILL_IN nodes, spill
edges, address-reuse edges), start/finish times and the four metrics. It trusts the schedule to
be legal; `validate` checks legality without using anything `replay` computes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.labelmap import LabelMap
from npucc.ir.residency import Residency
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph, TileNode
from npucc.target.cost import SpillModel
from npucc.target.timing import in_order

L0_TIERS = ("L0A", "L0B", "L0C")
CLEAN_OP = "COPY_IN"  # a buffer used by this op still has its data in DDR (rule 2)
CHUNKS = 32  # replay_within times the order in this many pieces
MIN_CHUNK = 4096  # ... of at least this many nodes


class ScheduleError(NpuccError):
    """A schedule breaks a replay rule (order, memory, spill structure)."""


@dataclass(slots=True)
class Replay:
    """What the replay rules derive from one graph and one schedule."""

    graph: TileGraph
    nodes: list[TileNode]  # graph nodes, then SPILL_OUT N+2k and SPILL_IN N+2k+1 per spill k
    order: list[int]  # the schedule's order (augmented node ids)
    spill_edges: list[tuple[int, int]]  # rule 1, in spill order
    reuse_edges: list[tuple[int, int]]  # rule 4, in schedule order
    start: list[int]  # per augmented node id
    finish: list[int]
    makespan: int
    peak: int  # max summed size of live L1+UB buffers (rule 6, npucc.ir.residency)
    residency: dict[str, int]  # tier (and L1+UB) -> its peak, the same rule per tier
    extra_ddr: int  # bytes (rule 2)
    spills: int
    homes: dict[int, list[tuple[int, int]]]  # spilled buffer -> [(position, offset)] residencies
    offsets: dict[int, int]  # buffer -> offset at ALLOC
    position: list[int]  # augmented node id -> index in order
    preds: list[Sequence[int]]  # per augmented node: its sources over `edges`, in that order
    spill_plan: list[tuple[int, int]]  # the schedule's spills
    cycles: list[int]  # per augmented node (rule 5)
    pipes: list[str | None]

    def edges(self) -> Iterator[tuple[int, int]]:
        """All augmented edges: original, then spill, then address-reuse."""
        yield from self.graph.edges()
        yield from self.spill_edges
        yield from self.reuse_edges

    def offset_at(self, node: int, buf: int) -> int:
        """Byte offset of `buf` in its tier when `node` runs (it changes at each SPILL_IN)."""
        spans = self.homes.get(buf)
        if spans is None:
            return self.offsets[buf]
        i = bisect_right(spans, (self.position[node], 1 << 62)) - 1
        return spans[max(i, 0)][1]

    def buffer_offsets(self, node: int) -> tuple[int, ...]:
        """Offsets of the node's buffers, in the order of its `bufs`."""
        return tuple(self.offset_at(node, b) for b in self.nodes[node].bufs)

    def metrics(self) -> dict[str, int]:
        """The four metrics of rule 6."""
        return {
            "peak": self.peak,
            "extra_ddr": self.extra_ddr,
            "spills": self.spills,
            "makespan": self.makespan,
        }


def clean_buffers(graph: TileGraph) -> list[bool]:
    """Per buffer: is it used by a COPY_IN node (its data still lives in DDR)?"""
    clean = [False] * len(graph.buffers)
    for node in graph.nodes:
        if node.op == CLEAN_OP:
            for b in node.bufs:
                clean[b] = True
    return clean


def spill_nodes(
    graph: TileGraph,
    spills: list[tuple[int, int]],
    model: SpillModel,
    clean: list[bool] | None = None,
) -> list[TileNode]:
    """The SPILL_OUT/SPILL_IN node pair of every spill, with ids N+2k and N+2k+1 (`clean`:
    clean_buffers(graph), if the caller has it)."""
    n = len(graph.nodes)
    if clean is None:
        clean = clean_buffers(graph) if spills else []
    out: list[TileNode] = []
    for k, (b, _) in enumerate(spills):
        buf = graph.buffers[b]
        c = clean[b]
        out.append(
            TileNode(n + 2 * k, "SPILL_OUT", "MTE3", model.out_cycles(buf.tier, buf.size, c), (b,))
        )
        out.append(
            TileNode(
                n + 2 * k + 1, "SPILL_IN", "MTE2", model.in_cycles(buf.tier, buf.size, c), (b,)
            )
        )
    return out


@dataclass(slots=True)
class ReplayBase:
    """What replaying any schedule of one graph takes from the graph alone (shared by the
    replays of one graph: `replay_base`)."""

    graph: TileGraph
    clean: list[bool]  # clean_buffers(graph)
    cycles: list[int]  # per graph node
    pipes: list[str | None]
    events: list[int | None]  # per graph node: its buffer b if an ALLOC, -1 - b if a FREE
    tiers: list[str]  # per buffer
    sizes: list[int]
    frees: list[int]  # per buffer: its FREE node (-1: none)
    busy: dict[Hashable, int] | None = None  # per pipe: its nodes' cycles (`pipe_work`)
    kinds: tuple[list[Hashable | None], np.ndarray] | None = None  # `pipe_kinds`
    use_node: np.ndarray | None = None  # every (node, buffer) use outside ALLOC/FREE, by node id
    use_buf: np.ndarray | None = None
    scans: int = 0  # users() answered by a scan of the nodes
    known: dict[int, list[int]] = field(default_factory=dict)  # users() found so far

    def pipe_work(self) -> dict[Hashable, int]:
        """Per pipe: the cycles of the graph nodes on it."""
        if self.busy is None:
            self.busy = {}
            for c, pipe in zip(self.cycles, self.pipes, strict=True):
                if pipe is not None:
                    self.busy[pipe] = self.busy.get(pipe, 0) + c
        return self.busy

    def pipe_kinds(self) -> tuple[list[Hashable | None], np.ndarray]:
        """The graph's pipes (None first) and per graph node its pipe's index among them."""
        if self.kinds is None:
            names = [None, *self.pipe_work()]
            code = {p: i for i, p in enumerate(names)}
            self.kinds = (names, np.array([code[p] for p in self.pipes], np.int64))
        return self.kinds

    def users(self, bufs: set[int]) -> dict[int, list[int]]:
        """Non-ALLOC/FREE graph nodes using each buffer of `bufs`, in id order (fresh lists)."""
        known = self.known
        missing = [b for b in bufs if b not in known]
        if missing:
            known.update(self._find(set(missing)))
        return {b: known[b][:] for b in sorted(bufs)}

    def _find(self, bufs: set[int]) -> dict[int, list[int]]:
        """`users` of the buffers not asked for before."""
        users: dict[int, list[int]] = {b: [] for b in sorted(bufs)}
        if self.use_node is None and not self.scans:  # one scan until a second replay asks
            self.scans += 1
            for node in self.graph.nodes:
                if node.op != "ALLOC" and node.op != "FREE":
                    for b in node.bufs:
                        if b in users:
                            users[b].append(node.id)
            return users
        if self.use_node is None:  # then an index of every use, searched by numpy
            nodes_of: list[int] = []
            bufs_of: list[int] = []
            for node in self.graph.nodes:
                if node.op != "ALLOC" and node.op != "FREE":
                    for b in node.bufs:
                        nodes_of.append(node.id)
                        bufs_of.append(b)
            self.use_node = np.array(nodes_of, dtype=np.int64)
            self.use_buf = np.array(bufs_of, dtype=np.int64)
        assert self.use_buf is not None
        hit = np.flatnonzero(np.isin(self.use_buf, list(users)))
        for v, b in zip(self.use_node[hit].tolist(), self.use_buf[hit].tolist(), strict=True):
            users[b].append(v)
        return users


def replay_base(graph: TileGraph) -> ReplayBase:
    """The graph-only part of `replay`, for several replays of one graph."""
    cycles: list[int] = []
    pipes: list[str | None] = []
    events: list[int | None] = []
    add_cycles, add_pipe, add_event = cycles.append, pipes.append, events.append
    for node in graph.nodes:  # NOTE: one pass over the node objects
        add_cycles(node.cycles)
        add_pipe(node.pipe)
        op = node.op
        add_event(node.bufs[0] if op == "ALLOC" else -1 - node.bufs[0] if op == "FREE" else None)
    buffers = graph.buffers
    free_of = graph.free_of
    return ReplayBase(
        graph,
        clean_buffers(graph),
        cycles,
        pipes,
        events,
        [buf.tier for buf in buffers],
        [buf.size for buf in buffers],
        [free_of.get(b, -1) for b in range(len(buffers))],
    )


def replay(
    graph: TileGraph,
    schedule: Schedule,
    capacity: dict[str, int] | None,
    spill_model: SpillModel,
    alignment: int = 1,
    base: ReplayBase | None = None,
    like: Replay | None = None,
    checked: np.ndarray | None = None,
) -> Replay:
    """Apply replay rules 1-6 to a (legal) schedule; see `validate` for the legality check
    (`base`: replay_base(graph), if the caller replays the graph more than once; `like`: a
    replay of the graph with the schedule's offsets and spills, whose edges are taken over
    when the schedule's order keeps them all, `keeps_edges`; `checked`: what `validate`
    returned for the schedule)."""
    del capacity, alignment  # legality is validate's job; kept for a uniform signature
    at = None if like is None else keeps_edges(graph, schedule, like, checked)
    if like is not None and at is not None:
        r = reordered(graph, schedule, like, at)
        assert r is not None  # NOTE: only a makespan bound stops it
        return r
    r = _replay(graph, schedule, spill_model, None, base)
    assert r is not None  # NOTE: only a makespan bound stops a replay
    return r


def replay_within(
    graph: TileGraph,
    schedule: Schedule,
    spill_model: SpillModel,
    makespan: int,
    base: ReplayBase | None = None,
) -> Replay | None:
    """`replay`, or None as soon as a node finishes after `makespan` or a pipe's remaining
    work would (the order is timed in CHUNKS pieces, each after its memory events)."""
    return _replay(graph, schedule, spill_model, makespan, base)


def _replay(
    graph: TileGraph,
    schedule: Schedule,
    spill_model: SpillModel,
    makespan: int | None,
    base: ReplayBase | None,
) -> Replay | None:
    if base is None:
        base = replay_base(graph)
    n = len(graph.nodes)
    spills = schedule.spills
    clean = base.clean
    added = spill_nodes(graph, spills, spill_model, clean)
    nodes = graph.nodes + added
    total = len(nodes)
    order = schedule.order
    if len(order) != total:
        raise ScheduleError(f"order has {len(order)} nodes, expected {total} ({graph.name})")
    position = _positions(order, total, graph.name).tolist()

    # rule 1: spill edges
    spills_of: dict[int, list[int]] = {}
    for k, (b, _) in enumerate(spills):
        spills_of.setdefault(b, []).append(k)
    users = base.users(set(spills_of))
    spill_edges: list[tuple[int, int]] = []
    for k, (b, _) in enumerate(spills):
        out, inn = n + 2 * k, n + 2 * k + 1
        spill_edges += [(graph.alloc_of[b], out), (out, inn), (inn, graph.free_of[b])]
        cut = position[out]
        for u in users[b]:
            spill_edges.append((u, out) if position[u] < cut else (inn, u))
        users[b] += [out, inn]

    # rules 3, 4, 6: residencies, address-reuse edges, peak
    offsets = schedule.offsets
    homes: dict[int, list[tuple[int, int]]] = {b: [] for b in spills_of}
    release_after: dict[int, int] = {}  # SPILL_IN/ALLOC node of a spilled buffer -> its release
    for b, ks in spills_of.items():
        starts = [graph.alloc_of[b]] + [n + 2 * k + 1 for k in ks]
        ends = [n + 2 * k for k in ks] + [graph.free_of[b]]
        release_after.update(zip(starts, ends, strict=True))
    maps: dict[str, LabelMap] = {}
    reuse_edges: list[tuple[int, int]] = []
    res = Residency()
    add, drop = res.alloc, res.free
    tiers, sizes, last = base.tiers, base.sizes, base.frees
    # rule 5 (the one list timer) times the order piece by piece, each piece after its memory
    # events (every edge into a node comes from an earlier one); without a bound, in one piece
    # NOTE: a node's extra predecessors join its tuple in any order (the timer takes their max)
    preds: list[Sequence[int]] = [*graph.preds, *([()] * (total - n))]
    extra: dict[int, list[int]] = {}
    for src, dst in spill_edges:
        extra.setdefault(dst, []).append(src)
    for dst, srcs in extra.items():
        preds[dst] = (*preds[dst], *srcs)
    cycles = base.cycles + [v.cycles for v in added]
    pipes = base.pipes + [v.pipe for v in added]
    events = base.events
    timed: tuple[list[int], list[int], dict[Hashable, int]] = ([0] * total, [0] * total, {})
    step = max(total, 1) if makespan is None else max(MIN_CHUNK, -(-total // CHUNKS))
    left: dict[Hashable, int] = {}  # with a bound: per pipe, the cycles of its nodes not timed
    if makespan is not None:
        left.update(base.pipe_work())
        for node in added:
            left[node.pipe] = left.get(node.pipe, 0) + node.cycles
        # per augmented node: its pipe's index in `names` and its cycles (a piece's work per
        # pipe by numpy)
        names, kinds = base.pipe_kinds()
        names = list(dict.fromkeys([*names, *left]))
        code = {p: i for i, p in enumerate(names)}
        kind = np.concatenate((kinds, np.array([code[v.pipe] for v in added], np.int64)))
        work = np.array(cycles, np.int64)
    for lo in range(0, total, step):
        piece = order[lo : lo + step]
        for i, v in enumerate(piece, lo):
            if v < n:
                event = events[v]
                if event is None:
                    continue
                if event < 0:  # a FREE
                    drop(tiers[-1 - event], sizes[-1 - event])
                    continue
                b = event
                size = sizes[b]
                off = offsets[b]
                add(tiers[b], size)
                spill_in = False
            elif (v - n) & 1:
                b, off = spills[(v - n) >> 1]
                size = sizes[b]
                spill_in = True
            else:  # a SPILL_OUT
                continue
            if b in homes:
                homes[b].append((i, off))
            if size:
                release = release_after.get(v, last[b]) if release_after else last[b]
                reuse = maps.get(tiers[b])
                if reuse is None:
                    reuse = maps[tiers[b]] = LabelMap()
                found = reuse.assign(off, off + size, release)
                if spill_in and v - 1 in found:  # own SPILL_OUT -> SPILL_IN: rule 1
                    found = [x for x in found if x != v - 1]
                if found:
                    for x in found:
                        reuse_edges.append((x, v))
                    preds[v] = (*preds[v], *found)
        in_order(piece, cycles, pipes, preds, timed=timed)
        if makespan is not None:
            # NOTE: a pipe runs its remaining nodes one after another from its last finish on,
            # so a pipe whose remaining work ends past the bound dooms the replay as well
            ids = np.array(piece, np.int64)
            ran = np.bincount(kind[ids], work[ids], len(names)).tolist()  # NOTE: exact sums
            for j in range(1, len(names)):
                left[names[j]] -= int(ran[j])
            pipe_free = timed[2]
            if any(t + left[pipe] > makespan for pipe, t in pipe_free.items()):
                return None
    start, finish, _ = timed

    extra_ddr = sum(spill_model.traffic(sizes[b], clean[b]) for b, _ in spills)
    return Replay(
        graph=graph,
        nodes=nodes,
        order=order,
        spill_edges=spill_edges,
        reuse_edges=reuse_edges,
        start=start,
        finish=finish,
        makespan=max(finish, default=0),
        peak=res.peak,
        residency=res.peaks,
        extra_ddr=extra_ddr,
        spills=len(spills),
        homes=homes,
        offsets=offsets,
        position=position,
        preds=preds,
        spill_plan=spills,
        cycles=cycles,
        pipes=pipes,
    )


def keeps_edges(
    graph: TileGraph, schedule: Schedule, like: Replay, checked: np.ndarray | None = None
) -> np.ndarray | None:
    """The positions of `schedule`'s order if `like` is a replay of the same graph, offsets
    and spills whose every edge that order keeps, else None (`checked`: what `validate`
    returned for the schedule, which checked the graph's edges); see `reordered`."""
    total = len(like.nodes)
    order = schedule.order
    if (
        like.graph is not graph
        or len(order) != total
        or schedule.spills != like.spill_plan
        or schedule.offsets != like.offsets
    ):
        return None
    if checked is None:
        try:
            at = _positions(order, total, graph.name)
        except ScheduleError:
            return None
        # NOTE: like's order keeps the graph's edges (a replay is of a legal schedule), and so
        # does an order running the graph's nodes in the same sequence
        n = len(graph.nodes)
        if list(filter(n.__gt__, order)) != list(filter(n.__gt__, like.order)):
            preds = like.preds
            counts = np.fromiter(map(len, preds), np.int64, total)
            srcs = np.fromiter(chain.from_iterable(preds), np.int64, int(counts.sum()))
            # an edge that the order turns round?
            return None if (at[srcs] >= np.repeat(at, counts)).any() else at
    else:  # the graph's own edges were checked
        at = checked
    # the spill and reuse edges are left
    extra = chain(like.spill_edges, like.reuse_edges)
    count = len(like.spill_edges) + len(like.reuse_edges)
    ends = np.fromiter(chain.from_iterable(extra), np.int64, 2 * count).reshape(-1, 2)
    return None if (at[ends[:, 0]] >= at[ends[:, 1]]).any() else at


def reordered(
    graph: TileGraph, schedule: Schedule, like: Replay, at: np.ndarray, within: int | None = None
) -> Replay | None:
    """The replay of `schedule` derived from `like` (`at`: keeps_edges(graph, schedule, like));
    with `within`, None if its makespan is above that (as `replay_within`).

    NOTE: an order that keeps every edge of `like` gives the same edges under rules 1 and 4:
    each user of a spilled buffer stays on its side of the SPILL_OUT/SPILL_IN pair, and at
    every address the occupancies (ALLOC or SPILL_IN to FREE or SPILL_OUT), chained by the
    reuse edges, keep their sequence, so each takes over from the same release. Positions,
    timing and residency are re-derived.
    """
    nodes = like.nodes
    order = schedule.order
    preds = like.preds
    start, finish = in_order(order, like.cycles, like.pipes, preds)
    makespan = max(finish, default=0)
    if within is not None and makespan > within:
        return None
    position: list[int] = at.tolist()
    n = len(graph.nodes)
    res = Residency()
    buffers = graph.buffers
    for v in order:
        if v < n:
            op = nodes[v].op
            if op == "ALLOC" or op == "FREE":
                buf = buffers[nodes[v].bufs[0]]
                (res.alloc if op == "ALLOC" else res.free)(buf.tier, buf.size)
    homes: dict[int, list[tuple[int, int]]] = {}
    for b in like.homes:
        homes[b] = [(position[graph.alloc_of[b]], like.offsets[b])]
    for k, (b, off) in enumerate(like.spill_plan):
        homes[b].append((position[n + 2 * k + 1], off))
    return Replay(
        graph=graph,
        nodes=nodes,
        order=order,
        spill_edges=like.spill_edges,
        reuse_edges=sorted(like.reuse_edges, key=lambda e: position[e[1]]),
        start=start,
        finish=finish,
        makespan=makespan,
        peak=res.peak,
        residency=res.peaks,
        extra_ddr=like.extra_ddr,
        spills=like.spills,
        homes=homes,
        offsets=like.offsets,
        position=position,
        preds=preds,
        spill_plan=like.spill_plan,
        cycles=like.cycles,
        pipes=like.pipes,
    )


def validate(
    graph: TileGraph,
    schedule: Schedule,
    capacity: dict[str, int] | None,
    alignment: int = 1,
    single_l0: bool = False,
) -> np.ndarray:
    """Raise ScheduleError unless the schedule is legal under the replay rules; each node's
    position in the order (for `replay(..., checked=)`).

    Checks: the order is a permutation and topological (original edges; spill structure of
    rule 1, i.e. ALLOC < OUT_1 < IN_1 < OUT_2 < ... < FREE and no use of a buffer while it is
    out or outside its lifetime); every buffer has one ALLOC, one FREE and an aligned offset;
    occupied ranges of a tier never overlap and stay below capacity (capacity None: unchecked);
    with `single_l0` (rule 7) each L0 tier holds at most one live buffer.
    """
    name = graph.name
    n = len(graph.nodes)
    spills = schedule.spills
    total = n + 2 * len(spills)
    order = schedule.order
    if len(order) != total:
        raise ScheduleError(f"order has {len(order)} nodes, expected {total} ({name})")
    at = _positions(order, total, name)
    # every edge forwards (graph.edges() as arrays: sources in id order, each one's outs)
    succs = graph.succs
    outs = np.fromiter(map(len, succs), np.int64, len(succs))
    dsts = np.fromiter(chain.from_iterable(succs), np.int64, int(outs.sum()))
    srcs = np.repeat(np.arange(len(succs)), outs)
    late = np.flatnonzero(at[srcs] > at[dsts])
    pos: list[int] = at.tolist()
    if late.size:
        src, dst = int(srcs[late[0]]), int(dsts[late[0]])
        raise ScheduleError(
            f"edge {src}->{dst} violated: node {dst} at position {pos[dst]} runs before "
            f"node {src} at position {pos[src]} ({name})"
        )

    nbuf = len(graph.buffers)
    allocs = [0] * nbuf
    frees = [0] * nbuf
    for node in graph.nodes:
        if node.op in ("ALLOC", "FREE"):
            if len(node.bufs) != 1 or not 0 <= node.bufs[0] < nbuf:
                raise ScheduleError(f"{node.op} node {node.id} must name one buffer ({name})")
            (allocs if node.op == "ALLOC" else frees)[node.bufs[0]] += 1
    for b in range(nbuf):
        if allocs[b] != 1 or frees[b] != 1:
            raise ScheduleError(
                f"buffer {b} has {allocs[b]} ALLOC and {frees[b]} FREE nodes, expected 1 and 1 "
                f"({name})"
            )
        off = schedule.offsets.get(b)
        if not isinstance(off, int) or off < 0 or off % alignment:
            raise ScheduleError(f"buffer {b}: offset {off!r} is not a multiple of {alignment}")
    if len(schedule.offsets) != nbuf:
        raise ScheduleError(f"offsets name {len(schedule.offsets)} buffers, expected {nbuf}")

    # residency spans per buffer in positions: ALLOC..OUT_1, IN_1..OUT_2, ..., IN_k..FREE
    spans: list[list[int]] = [[pos[graph.alloc_of[b]]] for b in range(nbuf)]
    for k, (b, off) in enumerate(spills):
        if not 0 <= b < nbuf:
            raise ScheduleError(f"spill {k} names unknown buffer {b} ({name})")
        if not isinstance(off, int) or off < 0 or off % alignment:
            raise ScheduleError(f"spill {k} of buffer {b}: offset {off!r} not aligned ({name})")
        spans[b] += [pos[n + 2 * k], pos[n + 2 * k + 1]]
    for b in range(nbuf):
        s = spans[b]
        s.append(pos[graph.free_of[b]])
        if s[0] >= s[1] if len(s) == 2 else any(s[j] >= s[j + 1] for j in range(len(s) - 1)):
            raise ScheduleError(
                f"buffer {b}: ALLOC, SPILL_OUT/SPILL_IN pairs and FREE are out of order "
                f"(positions {s}) ({name})"
            )
    for node in graph.nodes:
        op = node.op
        if op == "ALLOC" or op == "FREE":
            continue
        p = pos[node.id]
        for b in node.bufs:
            s = spans[b]
            if s[0] < p < s[1] and len(s) == 2:  # never spilled, used inside its lifetime
                continue
            j = bisect_left(s, p)
            if j % 2 == 0 or j >= len(s):
                raise ScheduleError(
                    f"node {node.id} ({node.op}) at position {p} uses buffer {b} while it is "
                    f"not resident (ALLOC/SPILL/FREE positions {spans[b]}) ({name})"
                )

    # memory: per tier, live ranges never overlap and stay within capacity
    live: dict[str, tuple[list[int], list[int], list[int]]] = {}
    where: dict[int, int] = {}
    nodes, buffers, offsets = graph.nodes, graph.buffers, schedule.offsets
    for i, v in enumerate(order):
        if v < n:
            node = nodes[v]
            op = node.op
            if op != "ALLOC" and op != "FREE":
                continue
            b = node.bufs[0]
            off = offsets[b]
        else:
            b, off = spills[(v - n) // 2]
            op = "SPILL_OUT" if (v - n) % 2 == 0 else "SPILL_IN"
        buf = buffers[b]
        tier = buf.tier
        got = live.get(tier)
        if got is None:
            got = live[tier] = ([], [], [])
        starts, ends, owners = got
        if not buf.size:
            continue
        if op == "FREE" or op == "SPILL_OUT":
            j = bisect_left(starts, where[b])
            while owners[j] != b:
                j += 1
            del starts[j], ends[j], owners[j]
            continue
        lo, hi = off, off + buf.size
        cap = None if capacity is None else capacity.get(tier)
        if capacity is not None and (cap is None or hi > cap):
            raise ScheduleError(
                f"buffer {b} at [{lo}, {hi}) exceeds {buf.tier} capacity {cap} "
                f"({op} node {v}, position {i}) ({name})"
            )
        if single_l0 and buf.tier in L0_TIERS and owners:
            raise ScheduleError(
                f"buffer {b} becomes live in {buf.tier} while buffer {owners[0]} is live "
                f"(rule 7, node {v}, position {i}) ({name})"
            )
        j = bisect_left(starts, lo)
        k = j - 1 if j and lo < ends[j - 1] else j  # the live range below lo, else above
        if k < len(starts) and starts[k] < hi and lo < ends[k]:
            raise ScheduleError(
                f"buffer {b} at {buf.tier}[{lo}, {hi}) overlaps live buffer {owners[k]} at "
                f"[{starts[k]}, {ends[k]}) ({op} node {v}, position {i}) ({name})"
            )
        starts.insert(j, lo)
        ends.insert(j, hi)
        owners.insert(j, b)
        where[b] = lo
    return at


def _positions(order: list[int], total: int, name: str) -> np.ndarray:
    """Each node's position in `order`, which must be a permutation of range(total)."""
    ids = np.asarray(order)
    if ids.ndim == 1 and ids.dtype.kind == "i" and total and ids.min() >= 0 and ids.max() < total:
        at = np.full(total, -1, np.int64)
        at[ids] = np.arange(total)
        if (at >= 0).all():  # NOTE: total ids, none missing: none twice
            return at
    seen = [-1] * total  # node by node, to name the first fault
    for i, v in enumerate(order):
        if not isinstance(v, int) or not 0 <= v < total:
            raise ScheduleError(f"order position {i}: unknown node {v!r} ({name})")
        if seen[v] >= 0:
            raise ScheduleError(f"node {v} appears twice in the order ({name})")
        seen[v] = i
    return np.array(seen, dtype=np.int64)
