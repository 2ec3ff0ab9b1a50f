"""Unsplit plans priced from the longest prefix they share with a plan priced before.

With no step split into sub-batches a plan lowers its layers in graph order, whatever its
steps, and `ExecCostModel.best_edp`'s pricing of it keeping on chip all it can is a fold over
the layers in that order: `plan_onchip` places each layer's outputs among those placed before,
the layer's run is priced (`noc_layer`) and linked to its producers' runs, and the list
schedule takes the runs in turn. What the fold holds after layer i then depends only on the
rectangles of layers 0..i (a view has none). The beam prices thousands of plans that differ
from one priced before only from some layer on (the children of a plan share every step
before the group they split), so `Prefixes` keeps a trie of the rectangle sequences priced,
each node naming the plan that first passed through it (its `Trace`), and the pricing goes
on from where the longest known prefix ends: the placements and the runs before it are that
plan's, and the list schedule continues from that plan's schedule there: its runs' ends (and
their loads' and the channel's times) are that plan's, and its cores' times those of the last
of its runs on each (`Timeline.upto`), so that no run is scheduled anew.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from npucc.backend.estimate.list_schedule import READY_AT, LayerRun, Timeline
from npucc.backend.hypercut.onchip_plan import Placed
from npucc.ir.onchip import OnChip
from npucc.target import Target


@dataclass(slots=True)
class Trace:
    """One priced unsplit plan, as the fold held it layer by layer."""

    placed: list[Placed]  # `plan_onchip`'s placements, in order
    kept: dict[str, OnChip]  # the tensors kept on chip, in the same order
    runs: list[LayerRun]  # `ExecCostModel._priced`'s items linked, one per non-view layer, in order
    energy: list[float]  # the running energy sum before each item, and after the last
    timeline: Timeline  # the list schedule after its runs
    edp: float = math.inf
    # all through DDR (`ExecCostModel.best_edp`'s bound of it): the running energy sum and
    # channel bound of its runs before each item, and after the last
    ddr: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])
    ids: list[int] = field(default_factory=list)  # `UnsplitPlaces.where_id` of each of `kept`
    # per layer, the `UnsplitPlaces` state its placements start from, and the last's after
    states: list[int] = field(default_factory=lambda: [0])
    # READY_AT (`list_schedule`), then each run's footprint id (`LayerRun.at`)
    ats: list[int] = field(default_factory=lambda: [READY_AT])


class Prefixes:
    """A trie of the rectangle sequences (one key per layer) of the unsplit plans priced,
    path-compressed (`_Trie`), in two generations: when the newer holds `GENERATION` nodes
    (the root and a node per key) it becomes the older and the older is dropped, so that what
    the plans it names hold does not grow with the search.

    NOTE: on light ResNet-50 mesh8x8 (11,418 plans, 217,165 nodes in all) the plans share
    67 % of their layers with the longest known prefix keeping every node, 64 % keeping two
    generations of 10,000 (62 % of 5,000)."""

    GENERATION = 10_000

    def __init__(self) -> None:
        self._tries = [_Trie()]  # per generation, newer first

    def find(self, keys: Sequence[object]) -> tuple[Trace | None, int, tuple[int, int]]:
        """The plan that made the longest prefix of `keys` known, its length, and where the
        newer generation's longest prefix ends (its edge and length, for `add`)."""
        best: tuple[Trace | None, int] = (None, 0)
        newer = (0, 0)
        for trie in self._tries:
            edge, depth = trie.walk(keys)
            if depth > best[1]:
                best = (trie.trace[edge], depth)
            if trie is self._tries[0]:
                newer = (edge, depth)
        return best[0], best[1], newer

    def add(self, keys: Sequence[object], newer: tuple[int, int], trace: Trace) -> None:
        """`keys`, made by `trace`, past where the newer generation's longest prefix of them
        ends (`newer`: `find`'s)."""
        trie = self._tries[0]
        if trie.nodes >= self.GENERATION:
            trie = _Trie()
            self._tries = [trie, self._tries[0]]
            newer = (0, 0)
        trie.add(keys, *newer, trace)


class _Trie:
    """A trie of key sequences whose edges each hold the keys from `start` to `end` of the
    sequence of the plan that made them (the first to pass through them), by their first key
    below the node they leave from (numbered as the edge ending there; the root: 0)."""

    __slots__ = ("child", "trace", "keys", "start", "end", "parent", "nodes")

    def __init__(self) -> None:
        self.child: dict[tuple[int, object], int] = {}  # (node, key) -> the edge
        # per edge: the plan, its keys, where the edge's start and end in them and the node
        # it leaves from (the root's: none, 0, 0, 0)
        self.trace: list[Trace | None] = [None]
        self.keys: list[Sequence[object]] = [()]
        self.start, self.end, self.parent = [0], [0], [0]
        self.nodes = 1  # the root and a node per key held

    def walk(self, keys: Sequence[object]) -> tuple[int, int]:
        """The longest prefix of `keys` held: the edge it ends on and its length."""
        child, held, end = self.child, self.keys, self.end
        edge, depth, n = 0, 0, len(keys)
        while depth < n:
            found = child.get((edge, keys[depth]))
            if found is None:
                break
            edge, mine, stop = found, held[found], end[found]
            depth += 1
            while depth < stop and mine[depth] == keys[depth]:
                depth += 1
            if depth < stop:
                break
        return edge, depth

    def add(self, keys: Sequence[object], edge: int, depth: int, trace: Trace) -> None:
        """An edge of `keys` from `depth` on, made by `trace`, where `walk` ended (`edge`,
        `depth`: split there first when inside it)."""
        if depth < self.end[edge]:  # the edge's keys before `depth` move to a new one above
            above, mine, start = len(self.trace), self.keys[edge], self.start[edge]
            self._edge(self.trace[edge], mine, start, depth, self.parent[edge])
            self.child[(self.parent[edge], mine[start])] = above
            self.child[(above, mine[depth])] = edge
            self.start[edge], self.parent[edge], edge = depth, above, above
        self.child[(edge, keys[depth])] = len(self.trace)
        self._edge(trace, keys, depth, len(keys), edge)
        self.nodes += len(keys) - depth

    def _edge(
        self, trace: Trace | None, keys: Sequence[object], start: int, end: int, parent: int
    ) -> None:
        """A new edge (numbered next)."""
        self.trace.append(trace)
        self.keys.append(keys)
        self.start.append(start)
        self.end.append(end)
        self.parent.append(parent)


def resumed(target: Target, trace: Trace | None, runs: int, total: int) -> Timeline:
    """The list schedule after the first `runs` runs of `trace` (none: the start), for a plan
    of `total` runs going on from there."""
    if trace is None:
        return Timeline.start(target.cores, total)
    return trace.timeline.upto(trace.runs, runs)
