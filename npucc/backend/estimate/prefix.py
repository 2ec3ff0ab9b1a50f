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

from npucc.backend.estimate.list_schedule import LayerRun, Timeline
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


def resumed(target: Target, trace: Trace | None, runs: int, total: int) -> Timeline:
    """The list schedule after the first `runs` runs of `trace` (none: the start), for a plan
    of `total` runs going on from there."""
    if trace is None:
        return Timeline.start(target.cores, total)
    return trace.timeline.upto(trace.runs, runs)
