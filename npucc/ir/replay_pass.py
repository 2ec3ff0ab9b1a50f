"""The passes of a replay (`npucc.ir.replay`) along an order: rule 1's spill edges, rules 3, 4
and 6 piece by piece (`MemoryPass`), the remaining work of a bounded replay (`Remaining`), and
the marks (`ReplayMark`) from which a replay of another schedule goes on (`parting`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from npucc.ir.labelmap import LabelMap
from npucc.ir.residency import Residency
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph, TileNode

if TYPE_CHECKING:
    from npucc.ir.replay import Replay, ReplayBase


def parting(
    graph: TileGraph, schedule: Schedule, at: np.ndarray, like: Replay, allocs: np.ndarray
) -> int:
    """The first position before which `schedule` (its positions `at`) and `like` may replay
    differently: where their orders part, the ALLOC of a buffer they place apart, or the
    SPILL_OUT of the first spill of other buffers (the SPILL_IN of a reload elsewhere);
    `allocs`: each buffer's ALLOC node."""
    order, other = schedule.order, like.order
    part = min(len(order), len(other))
    lo = 0
    for mark in like.marks[1:]:  # NOTE: slices compared piecewise, to stop at the first miss
        if order[lo : mark.pos] != other[lo : mark.pos]:
            break
        lo = mark.pos
    part = next((i for i in range(lo, part) if order[i] != other[i]), part)
    placed, before = schedule.offsets, like.offsets
    if placed != before:  # NOTE: by numpy where both name the same buffers in the same order
        count = len(placed)
        keys = np.fromiter(placed, np.int64, count)
        if len(before) == count and np.array_equal(keys, np.fromiter(before, np.int64, count)):
            values = np.fromiter(placed.values(), np.int64, count)
            moved = keys[values != np.fromiter(before.values(), np.int64, count)]
        else:
            moved = np.array([b for b, off in placed.items() if before.get(b) != off], np.int64)
        part = min(part, int(at[allocs[moved]].min()))
    # NOTE: SPILL_OUTs come in spill order, SPILL_INs need not
    n = len(graph.nodes)
    spills, shared = schedule.spills, like.spill_plan
    for k in range(max(len(spills), len(shared))):
        mine = spills[k] if k < len(spills) else None
        theirs = shared[k] if k < len(shared) else None
        if mine == theirs:
            continue
        apart = mine is None or theirs is None or mine[0] != theirs[0]
        node = n + 2 * k + (not apart)
        if mine is not None:
            part = min(part, int(at[node]))
        if theirs is not None:
            part = min(part, like.position[node])
        if apart:
            break
    return part


@dataclass(slots=True)
class ReplayMark:
    """A replay's state before one position of its order (`Replay.marks`): each tier's
    release labels, the residency, each pipe's free time and the reuse edges so far."""

    pos: int
    maps: dict[str, tuple[list[int], list[int], list[int]]]  # tier -> LabelMap lists
    res: Residency
    pipe_free: dict[Hashable, int]
    reuse: int  # len(reuse_edges)


def rule1_edges(
    graph: TileGraph, spills: list[tuple[int, int]], position: list[int], base: ReplayBase
) -> tuple[list[tuple[int, int]], dict[int, list[int]]]:
    """Rule 1's edges of `spills` in an order (each node's `position`) and each spilled
    buffer's spill indices."""
    n = len(graph.nodes)
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
    return spill_edges, spills_of


def augment(
    preds: list[Sequence[int]], spill_edges: list[tuple[int, int]], position: list[int], lo: int
) -> None:
    """Add the sources over `spill_edges` to the predecessors of the nodes at positions lo on."""
    # NOTE: a node's extra predecessors join its tuple in any order (the timer takes their max)
    extra: dict[int, list[int]] = {}
    for src, dst in spill_edges:
        if position[dst] >= lo:
            extra.setdefault(dst, []).append(src)
    for dst, srcs in extra.items():
        preds[dst] = (*preds[dst], *srcs)


def residencies(
    graph: TileGraph, spills: list[tuple[int, int]], offsets: dict[int, int], position: list[int]
) -> dict[int, list[tuple[int, int]]]:
    """Per spilled buffer, its residencies: (position, offset) of its ALLOC and SPILL_INs."""
    n = len(graph.nodes)
    homes: dict[int, list[tuple[int, int]]] = {}
    for k, (b, off) in enumerate(spills):
        if b not in homes:
            homes[b] = [(position[graph.alloc_of[b]], offsets[b])]
        homes[b].append((position[n + 2 * k + 1], off))
    return homes


class Remaining:
    """Per pipe, the cycles of a bounded replay's nodes not timed yet."""

    __slots__ = ("left", "names", "kind", "work")

    def __init__(self, base: ReplayBase, added: list[TileNode]) -> None:
        self.left = dict(base.pipe_work())
        for node in added:
            self.left[node.pipe] = self.left.get(node.pipe, 0) + node.cycles
        # per augmented node: its pipe's index in `names` and its cycles (a piece's work per
        # pipe by numpy)
        names, kinds, work = base.pipe_kinds()
        self.names = list(dict.fromkeys([*names, *self.left]))
        code = {p: i for i, p in enumerate(self.names)}
        self.kind = np.concatenate((kinds, np.array([code[v.pipe] for v in added], np.int64)))
        self.work = np.concatenate((work, np.array([v.cycles for v in added], np.int64)))

    def ran(self, ids: np.ndarray) -> None:
        """The nodes `ids` were timed."""
        done = np.bincount(self.kind[ids], self.work[ids], len(self.names)).tolist()
        for j in range(1, len(self.names)):
            self.left[self.names[j]] -= int(done[j])  # NOTE: exact sums

    def over(self, pipe_free: dict[Hashable, int], makespan: int) -> bool:
        """Would a pipe, from its last finish (`pipe_free`), end its remaining work after
        `makespan`? (A pipe runs its remaining nodes one after another.)"""
        left = self.left
        return any(t + left[pipe] > makespan for pipe, t in pipe_free.items())


class MemoryPass:
    """Rules 3, 4 and 6 along an order, piece by piece: the residency, each tier's release
    labels and the address-reuse edges, which join the nodes' predecessors (`preds`)."""

    __slots__ = (
        "graph",
        "base",
        "offsets",
        "spills",
        "spills_of",
        "release_after",
        "maps",
        "res",
        "reuse_edges",
        "preds",
    )

    def __init__(
        self,
        graph: TileGraph,
        schedule: Schedule,
        base: ReplayBase,
        spills_of: dict[int, list[int]],
        preds: list[Sequence[int]],
    ) -> None:
        self.graph, self.base, self.preds = graph, base, preds
        self.offsets, self.spills, self.spills_of = schedule.offsets, schedule.spills, spills_of
        n = len(graph.nodes)
        # SPILL_IN/ALLOC node of a spilled buffer -> its release
        self.release_after: dict[int, int] = {}
        for b, ks in spills_of.items():
            starts = [graph.alloc_of[b]] + [n + 2 * k + 1 for k in ks]
            ends = [n + 2 * k for k in ks] + [graph.free_of[b]]
            self.release_after.update(zip(starts, ends, strict=True))
        self.maps: dict[str, LabelMap] = {}
        self.res = Residency()
        self.reuse_edges: list[tuple[int, int]] = []

    def mark(self, pos: int, pipe_free: dict[Hashable, int]) -> ReplayMark:
        """The state before position `pos` (each pipe's free time `pipe_free`)."""
        res = self.res
        return ReplayMark(
            pos,
            {t: (m.starts[:], m.ends[:], m.label[:]) for t, m in self.maps.items()},
            Residency(dict(res.live), dict(res.peaks), res.combined, res.peak),
            dict(pipe_free),
            len(self.reuse_edges),
        )

    def resume(self, mark: ReplayMark, like: Replay, position: list[int]) -> None:
        """Take over `like`'s state at `mark`, where this order (each node's `position`) ran
        the same nodes with the same offsets and spills: a range still occupied there is
        labelled with its occupant's release in this order."""
        n = len(self.graph.nodes)
        events, free_of, pos = self.base.events, self.base.frees, mark.pos
        spilled, before = like.spill_plan, like.position
        for tier, (starts, ends, labels) in mark.maps.items():
            m = self.maps[tier] = LabelMap()
            m.starts, m.ends, m.label = starts[:], ends[:], labels[:]
            for i, x in enumerate(labels):
                if before[x] >= pos:  # a release still to come: whose?
                    event = events[x] if x < n else None
                    b = spilled[(x - n) >> 1][0] if event is None else -1 - event
                    ks = self.spills_of.get(b, ())
                    m.label[i] = next(
                        (n + 2 * k for k in ks if position[n + 2 * k] >= pos), free_of[b]
                    )
        r = mark.res
        self.res = Residency(dict(r.live), dict(r.peaks), r.combined, r.peak)
        self.reuse_edges = like.reuse_edges[: mark.reuse]

    def run(self, piece: list[int]) -> None:
        """The memory events of `piece`, the order's next nodes."""
        n = len(self.graph.nodes)
        base = self.base
        events, tiers, sizes, last = base.events, base.tiers, base.sizes, base.frees
        offsets, spills, maps = self.offsets, self.spills, self.maps
        release_after, reuse_edges, preds = self.release_after, self.reuse_edges, self.preds
        add, drop = self.res.alloc, self.res.free
        for v in piece:
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
