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
plan's, and the list schedule continues from that plan's timeline there (kept where the plan
went on from and every `STRIDE` runs past it, else replayed from the nearest kept point before).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from npucc.backend.estimate.list_schedule import LayerRun, Timeline, schedule
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
    timelines: dict[int, Timeline]  # the list schedule after some numbers of runs
    edp: float = math.inf
    # all through DDR (`ExecCostModel.best_edp`'s bound of it): the running energy sum and
    # channel bound of its runs before each item, and after the last
    ddr: list[tuple[float, int]] = field(default_factory=lambda: [(0.0, 0)])
    ids: list[int] = field(default_factory=list)  # `ExecCostModel._where_id` of each of `kept`


class Prefixes:
    """A trie of the rectangle sequences (one key per layer) of the unsplit plans priced,
    in two generations: when the newer holds `GENERATION` nodes it becomes the older and the
    older is dropped, so that what the plans it names hold does not grow with the search.

    NOTE: on light ResNet-50 mesh8x8 (11,418 plans, 217,165 nodes in all) the plans share
    67 % of their layers with the longest known prefix keeping every node, 64 % keeping two
    generations of 10,000 (62 % of 5,000)."""

    GENERATION = 10_000

    def __init__(self) -> None:
        # per generation (newer first): (node, next key) -> node, and per node the plan
        # that made it (the root, node 0: none)
        self._tries: list[tuple[dict[tuple[int, object], int], list[Trace | None]]] = [({}, [None])]

    def find(self, keys: Sequence[object]) -> tuple[Trace | None, int, tuple[int, int]]:
        """The plan that made the longest prefix of `keys` known, its length, and where the
        newer generation's longest prefix ends (its node and length, for `add`)."""
        best: tuple[Trace | None, int] = (None, 0)
        newer = (0, 0)
        for child, owner in self._tries:
            node, depth = 0, 0
            for key in keys:
                found = child.get((node, key))
                if found is None:
                    break
                node, depth = found, depth + 1
            if depth > best[1]:
                best = (owner[node], depth)
            if child is self._tries[0][0]:
                newer = (node, depth)
        return best[0], best[1], newer

    def add(self, keys: Sequence[object], newer: tuple[int, int], trace: Trace) -> None:
        """`keys`, made by `trace`, below the newer generation's node `newer` (`find`'s)."""
        child, owner = self._tries[0]
        if len(owner) >= self.GENERATION:
            child, owner = {}, [None]
            self._tries = [(child, owner), self._tries[0]]
            newer = (0, 0)
        node, depth = newer
        for key in keys[depth:]:
            child[(node, key)] = node = len(owner)
            owner.append(trace)


def timeline(target: Target, trace: Trace | None, runs: int) -> Timeline:
    """The list schedule after the first `runs` runs of `trace` (none: the start), kept for
    the next plan going on from there; not to be extended."""
    if trace is None:
        return Timeline.start(target.cores)
    value = trace.timelines.get(runs)
    if value is None:
        # NOTE: none before `runs` when the plan made the newer generation's nodes of a
        # prefix it went on from in the older
        before = max((k for k in trace.timelines if k <= runs), default=0)
        value = trace.timelines[before].copy() if before else Timeline.start(target.cores)
        schedule(target, trace.runs[before:runs], value)
        trace.timelines[runs] = value
    return value


# NOTE: a plan going on from a point of a trace where no timeline was kept replays its runs
# from the nearest kept point before it: one kept every `STRIDE` runs bounds that replay
STRIDE = 8


def extend(
    target: Target, runs: list[LayerRun], start: int, before: Timeline
) -> tuple[int, dict[int, Timeline]]:
    """The list schedule of `runs` from run `start` on, continued from `before` (the schedule
    after the first `start`, kept as it is): its latency, and the timelines a `Trace` keeps:
    `before` and a copy after every multiple of `STRIDE` runs past `start`."""
    timelines = {start: before}
    after = before.copy()
    done = start
    for stop in range(start - start % STRIDE + STRIDE, len(runs), STRIDE):
        schedule(target, runs[done:stop], after)
        timelines[stop] = after.copy()
        done = stop
    return schedule(target, runs[done:], after), timelines
