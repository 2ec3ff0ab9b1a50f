"""The replay rules 1-6 of shared/dan-traces.md (one implementation) and an independent validator.

`replay` turns a graph and a `Schedule` into the augmented graph (SPILL_OUT/SPILL_IN nodes, spill
edges, address-reuse edges), start/finish times and the four metrics. It trusts the schedule to
be legal; `validate` checks legality without using anything `replay` computes.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.replay_pass import (
    MemoryPass,
    Remaining,
    ReplayMark,
    augment,
    parting,
    residencies,
    rule1_edges,
)
from npucc.ir.residency import Residency
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph, TileNode
from npucc.target.cost import SpillModel
from npucc.target.timing import in_order

L0_TIERS = ("L0A", "L0B", "L0C")
CLEAN_OP = "COPY_IN"  # a buffer used by this op still has its data in DDR (rule 2)
CHUNKS = 256  # replay_within times the order in this many pieces
MIN_CHUNK = 4096  # ... of at least this many nodes
MARK_EVERY = 4096  # a marked replay keeps its state every this many positions


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
    marks: list[ReplayMark] = field(default_factory=list)  # `replay(..., marked=True)`

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
    kinds: tuple[list[Hashable | None], np.ndarray, np.ndarray] | None = None  # `pipe_kinds`
    allocs: np.ndarray | None = None  # `alloc_nodes`
    use_node: np.ndarray | None = None  # every (node, buffer) use outside ALLOC/FREE, by node id
    use_buf: np.ndarray | None = None
    scans: int = 0  # users() answered by a scan of the nodes
    known: dict[int, list[int]] = field(default_factory=dict)  # users() found so far

    def pipe_work(self) -> dict[Hashable, int]:
        """Per pipe: the cycles of the graph nodes on it."""
        if self.busy is None:
            self._tally()
        assert self.busy is not None
        return self.busy

    def pipe_kinds(self) -> tuple[list[Hashable | None], np.ndarray, np.ndarray]:
        """The graph's pipes (None first), per graph node its pipe's index among them, and
        per graph node its cycles."""
        if self.kinds is None:
            self._tally()
        assert self.kinds is not None
        return self.kinds

    def _tally(self) -> None:
        """`busy` and `kinds`, by numpy."""
        names: list[Hashable | None] = [None]
        names += [p for p in dict.fromkeys(self.pipes) if p is not None]
        code = {p: i for i, p in enumerate(names)}
        kind = np.array([code[p] for p in self.pipes], np.int64)
        work = np.array(self.cycles, np.int64)
        sums = np.bincount(kind, work, len(names)).tolist()  # NOTE: exact sums
        self.busy = {p: int(sums[i]) for i, p in enumerate(names) if p is not None}
        self.kinds = (names, kind, work)

    def alloc_nodes(self) -> np.ndarray:
        """Per buffer: its ALLOC node."""
        if self.allocs is None:
            alloc_of = self.graph.alloc_of
            self.allocs = np.array([alloc_of[b] for b in range(len(self.sizes))], np.int64)
        return self.allocs

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
    marked: bool = False,
) -> Replay:
    """Apply replay rules 1-6 to a (legal) schedule; see `validate` for the legality check
    (`base`: replay_base(graph), if the caller replays the graph more than once; `like`: a
    replay of the graph with the schedule's offsets and spills, whose edges are taken over
    when the schedule's order keeps them all, `keeps_edges`; `checked`: what `validate`
    returned for the schedule; `marked`: keep `Replay.marks`, for `replay_within`)."""
    del capacity, alignment  # legality is validate's job; kept for a uniform signature
    at = None if like is None else keeps_edges(graph, schedule, like, checked)
    if like is not None and at is not None:
        return reordered(graph, schedule, like, at)
    r = _replay(graph, schedule, spill_model, None, base, None, marked)
    assert r is not None  # NOTE: only a makespan bound stops a replay
    return r


def replay_within(
    graph: TileGraph,
    schedule: Schedule,
    spill_model: SpillModel,
    makespan: int,
    base: ReplayBase | None = None,
    like: Replay | None = None,
) -> Replay | None:
    """`replay`, or None as soon as a node finishes after `makespan` or a pipe's remaining
    work would (the order is timed in CHUNKS pieces, each after its memory events). With
    `like`, a replay of the graph with marks (`replay(..., marked=True)`), the replay goes on
    from like's last mark before the first position where the two schedules may part
    (`parting`): up to there both ran the same nodes with the same offsets and spills, so
    the states are alike but for the release labels of the ranges still occupied, which the
    schedule's own spills decide (`MemoryPass.resume`); such a replay keeps no marks."""
    return _replay(graph, schedule, spill_model, makespan, base, like, False)


def _replay(
    graph: TileGraph,
    schedule: Schedule,
    spill_model: SpillModel,
    makespan: int | None,
    base: ReplayBase | None,
    like: Replay | None,
    marked: bool,
) -> Replay | None:
    if base is None:
        base = replay_base(graph)
    n = len(graph.nodes)
    spills = schedule.spills
    added = spill_nodes(graph, spills, spill_model, base.clean)
    nodes = graph.nodes + added
    total = len(nodes)
    order = schedule.order
    if len(order) != total:
        raise ScheduleError(f"order has {len(order)} nodes, expected {total} ({graph.name})")
    at = _positions(order, total, graph.name, ints=True)
    position: list[int] = at.tolist()
    spill_edges, spills_of = rule1_edges(graph, spills, position, base)
    cycles = base.cycles + [v.cycles for v in added]
    pipes = base.pipes + [v.pipe for v in added]
    timed: tuple[list[int], list[int], dict[Hashable, int]] = ([0] * total, [0] * total, {})
    mark = None
    if like is not None and like.marks and like.graph is graph:
        part = parting(graph, schedule, at, like, base.alloc_nodes())
        mark = like.marks[bisect_right([m.pos for m in like.marks], part) - 1]
    lo = 0 if mark is None else mark.pos
    if mark is not None and lo:
        assert like is not None  # NOTE: it has the mark
        # the nodes before lo have like's predecessors and times; every later one is timed
        # again before a successor reads its finish
        preds = like.preds[:total] + [()] * (total - len(like.preds))
        gpreds = graph.preds
        for v in order[lo:]:
            preds[v] = gpreds[v] if v < n else ()
        m = min(total, len(like.start))
        timed[0][:m], timed[1][:m] = like.start[:m], like.finish[:m]
        timed[2].update(mark.pipe_free)
    else:
        preds = [*graph.preds, *([()] * (total - n))]
    augment(preds, spill_edges, position, lo)
    memory = MemoryPass(graph, schedule, base, spills_of, preds)
    if mark is not None and lo:
        assert like is not None
        memory.resume(mark, like, position)
    # rule 5 (the one list timer) times the order piece by piece, each piece after its memory
    # events (every edge into a node comes from an earlier one); without a bound, in one
    # piece (marked: a mark before each MARK_EVERY positions)
    step = max(MIN_CHUNK, -(-total // CHUNKS))
    if makespan is None:
        step = MARK_EVERY if marked else max(total, 1)
    left = None if makespan is None else Remaining(base, added)
    if left is not None and lo:
        left.ran(np.flatnonzero(at < lo))
    marks: list[ReplayMark] = []
    for i in range(lo, total, step):
        piece = order[i : i + step]
        if marked:
            marks.append(memory.mark(i, timed[2]))
        memory.run(piece)
        in_order(piece, cycles, pipes, memory.preds, timed=timed)
        if left is not None and makespan is not None:
            left.ran(np.array(piece, np.int64))
            if left.over(timed[2], makespan):
                return None
    start, finish, _ = timed
    res = memory.res
    return Replay(
        graph=graph,
        nodes=nodes,
        order=order,
        spill_edges=spill_edges,
        reuse_edges=memory.reuse_edges,
        start=start,
        finish=finish,
        makespan=max(finish, default=0),
        peak=res.peak,
        residency=res.peaks,
        extra_ddr=sum(spill_model.traffic(base.sizes[b], base.clean[b]) for b, _ in spills),
        spills=len(spills),
        homes=residencies(graph, spills, schedule.offsets, position),
        offsets=schedule.offsets,
        position=position,
        preds=memory.preds,
        spill_plan=spills,
        cycles=cycles,
        pipes=pipes,
        marks=marks,
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


def reordered(graph: TileGraph, schedule: Schedule, like: Replay, at: np.ndarray) -> Replay:
    """The replay of `schedule` derived from `like` (`at`: keeps_edges(graph, schedule, like)).

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
    position: list[int] = at.tolist()
    res = Residency()
    buffers = graph.buffers
    # NOTE: the ALLOC and FREE nodes (graph.alloc_of, free_of) alone change the residency:
    # they are walked in the order's sequence, +1 + b an ALLOC of buffer b, -1 - b a FREE
    events = [(position[a], 1 + b) for b, a in graph.alloc_of.items()]
    events += [(position[f], -1 - b) for b, f in graph.free_of.items()]
    events.sort()
    for _, e in events:
        buf = buffers[e - 1 if e > 0 else -1 - e]
        (res.alloc if e > 0 else res.free)(buf.tier, buf.size)
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
        homes=residencies(graph, like.spill_plan, like.offsets, position),
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
    nodes = graph.nodes
    allocs = [0] * nbuf
    frees = [0] * nbuf
    # NOTE: one walk of the nodes: the ALLOC and FREE nodes checked and counted (the first
    # fault in node order), the others' buffers kept for the uses below; code[v]: b for an
    # ALLOC of buffer b, -1 - b for a FREE, nbuf for the rest
    used: list[tuple[int, ...]] = []
    code: list[int] = []
    add_used, add_code = used.append, code.append
    for node in nodes:
        op = node.op
        if op == "ALLOC" or op == "FREE":
            named = node.bufs
            if len(named) != 1 or not 0 <= named[0] < nbuf:
                raise ScheduleError(f"{op} node {node.id} must name one buffer ({name})")
            b = named[0]
            if op == "ALLOC":
                allocs[b] += 1
                add_code(b)
            else:
                frees[b] += 1
                add_code(-1 - b)
            add_used(())
        else:
            add_used(node.bufs)
            add_code(nbuf)
    offsets = schedule.offsets
    given = [offsets.get(b) for b in range(nbuf)]
    offs = np.array(given if set(map(type, given)) <= {int} else [-1])  # NOTE: ints alone
    if not (  # NOTE: the buffers one by one only to name the first fault
        allocs.count(1) == nbuf
        and frees.count(1) == nbuf
        and (
            not nbuf
            or (offs.dtype.kind == "i" and offs.min() >= 0 and not (offs % alignment).any())
        )
    ):
        for b in range(nbuf):
            if allocs[b] != 1 or frees[b] != 1:
                raise ScheduleError(
                    f"buffer {b} has {allocs[b]} ALLOC and {frees[b]} FREE nodes, expected 1 "
                    f"and 1 ({name})"
                )
            off = offsets.get(b)
            if not isinstance(off, int) or off < 0 or off % alignment:
                raise ScheduleError(f"buffer {b}: offset {off!r} is not a multiple of {alignment}")
    if len(offsets) != nbuf:
        raise ScheduleError(f"offsets name {len(offsets)} buffers, expected {nbuf}")

    # residency spans per buffer in positions: ALLOC..OUT_1, IN_1..OUT_2, ..., IN_k..FREE
    # (as arrays, [ALLOC, FREE], but for the spilled buffers')
    first = at[np.fromiter(map(graph.alloc_of.__getitem__, range(nbuf)), np.int64, nbuf)]
    last = at[np.fromiter(map(graph.free_of.__getitem__, range(nbuf)), np.int64, nbuf)]
    spilled: dict[int, list[int]] = {}
    for k, (b, off) in enumerate(spills):
        if not 0 <= b < nbuf:
            raise ScheduleError(f"spill {k} names unknown buffer {b} ({name})")
        if not isinstance(off, int) or off < 0 or off % alignment:
            raise ScheduleError(f"spill {k} of buffer {b}: offset {off!r} not aligned ({name})")
        spilled.setdefault(b, [int(first[b])]).extend((pos[n + 2 * k], pos[n + 2 * k + 1]))
    for b, s in spilled.items():
        s.append(int(last[b]))
    whole = np.ones(nbuf, np.bool_)
    whole[list(spilled)] = False

    def span(b: int) -> list[int]:
        """Buffer b's residency span."""
        got = spilled.get(b)
        return [int(first[b]), int(last[b])] if got is None else got

    wrong = np.flatnonzero(whole & (first >= last))[:1].tolist()
    wrong += [b for b, s in spilled.items() if any(s[j] >= s[j + 1] for j in range(len(s) - 1))]
    if wrong:
        b = min(wrong)
        raise ScheduleError(
            f"buffer {b}: ALLOC, SPILL_OUT/SPILL_IN pairs and FREE are out of order "
            f"(positions {span(b)}) ({name})"
        )
    # every use within a span: the uses of never spilled buffers inside their lifetime by
    # arrays, then the others (spilled buffers' uses, faults) one by one, in node order and
    # each node's buffers in its order, so the first fault is the one named
    count = np.fromiter(map(len, used), np.int64, n)
    bufs = np.fromiter(chain.from_iterable(used), np.int64, int(count.sum()))
    users = np.repeat(np.arange(n), count)
    at_use = at[users]
    inside = whole[bufs] & (first[bufs] < at_use) & (at_use < last[bufs])
    for k in np.flatnonzero(~inside).tolist():
        v, b = int(users[k]), int(bufs[k])
        p, s = pos[v], span(b)
        j = bisect_left(s, p)
        if j % 2 == 0 or j >= len(s):
            raise ScheduleError(
                f"node {v} ({nodes[v].op}) at position {p} uses buffer {b} while it is "
                f"not resident (ALLOC/SPILL/FREE positions {s}) ({name})"
            )

    # memory: per tier, live ranges never overlap and stay within capacity (the positions of
    # ALLOC, FREE and spill nodes alone)
    live: dict[str, tuple[list[int], list[int], list[int]]] = {}
    where: dict[int, int] = {}
    buffers = graph.buffers
    ids = np.empty(total, np.int64)
    ids[at] = np.arange(total)
    is_event = np.ones(total, np.bool_)
    is_event[:n] = np.array(code, np.int64) != nbuf
    steps = np.flatnonzero(is_event[ids])
    for i, v in zip(steps.tolist(), ids[steps].tolist(), strict=True):
        if v < n:
            b = code[v]
            if b >= 0:
                op = "ALLOC"
            else:
                op, b = "FREE", -1 - b
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


def _positions(order: list[int], total: int, name: str, ints: bool = False) -> np.ndarray:
    """Each node's position in `order`, which must be a permutation of range(total) (`ints`:
    its entries are taken for ints unchecked, as a replay, which trusts its schedule, may)."""
    try:  # NOTE: fromiter converts without checking each entry's type (and truncates floats);
        # array("q") refuses what is not an integer (TypeError) or beyond int64 (OverflowError)
        if ints:
            ids = np.fromiter(order, np.int64, len(order))
        else:
            ids = np.frombuffer(array("q", order), np.int64)
    except (TypeError, ValueError, OverflowError):
        ids = np.asarray(order, dtype=object)
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
