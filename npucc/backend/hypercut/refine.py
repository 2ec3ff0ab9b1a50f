"""Local refinement of a complete time plan with SA's moves, first improvement, bounded.

The beam fixes a step's layers and its sub-batch count when it splits a pair; a few single
moves on the plan it returns (move a layer across a step boundary, merge or split steps,
double or halve a loop's sub-batches, join a step to the previous loop or split it off) often
find a better plan that the beam's completions never priced. Each move re-cuts the steps it
changes in proportion to compute (as SA's runs), keeps layer order and dependencies, and is
priced by the search's own EDP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from npucc.backend.hypercut.gridcut import compute_weight, cut_many
from npucc.backend.hypercut.loops import Plan, loop_start
from npucc.ir.plan import Group, Rect, Step, Workload


class Refiner:
    """Refines complete plans of one workload on one mesh (`whole`) by `edp`."""

    def __init__(
        self, wl: Workload, whole: Rect, splits: list[int], edp: Callable[[Plan], float]
    ) -> None:
        self.wl, self.whole, self.splits, self.edp = wl, whole, splits, edp
        self.work = [compute_weight(layer) for layer in wl.layers]
        self._cuts: dict[tuple[tuple[int, ...], ...], tuple[Group, ...] | None] = {}

    def run(self, plan: Plan, budget: int) -> Plan:
        """First-improvement descent from `plan`, scanning steps cyclically from the last
        improvement, until a full scan finds none or `budget` moves were priced."""
        current, priced, s, quiet = self.edp(plan), 0, 0, 0
        while priced < budget and quiet <= len(plan):
            s %= len(plan)
            for child in self.moves(plan, s):
                priced += 1
                value = self.edp(child)
                if value < current:
                    plan, current, quiet = child, value, 0
                    break
                if priced >= budget:
                    break
            else:
                s, quiet = s + 1, quiet + 1
        return plan

    def moves(self, plan: Plan, s: int) -> Iterator[Plan]:
        """Plans one move away at step s, the cheapest-looking first: its loop's sub-batch
        count halved or doubled, the step joined to or split off the previous loop, its last
        group moved to the next step or the next step's first group moved into it, the two
        merged, the step split in two at its compute midpoint."""
        step = plan[s]
        if s == loop_start(plan, s):
            k = self.splits.index(step.nsub)
            for j in (k + 1, k - 1):
                if 0 <= j < len(self.splits):
                    yield _aligned(plan[:s] + (_flags(step, self.splits[j]),) + plan[s + 1 :])
        if s:
            yield _aligned(plan[:s] + (_flags(step, step.nsub, not step.loop),) + plan[s + 1 :])
        nxt = plan[s + 1] if s + 1 < len(plan) else None
        if nxt is not None:
            last, first = step.groups[-1:], nxt.groups[:1]
            if len(step.groups) > 1 and not self._reads(step.groups[:-1], last):
                moved = self._pair(plan, s, step.groups[:-1], last + nxt.groups)
                if moved is not None:
                    yield moved
            if len(nxt.groups) > 1 and not self._reads(first, nxt.groups[1:]):
                moved = self._pair(plan, s, step.groups + first, nxt.groups[1:])
                if moved is not None:
                    yield moved
            merged = self._recut(step.groups + nxt.groups)
            if merged is not None:
                yield _aligned(plan[:s] + (Step(merged, step.nsub, step.loop),) + plan[s + 2 :])
        cut = self._midpoint(step.groups)
        if len(step.groups) > 1 and not self._reads(step.groups[:cut], step.groups[cut:]):
            head, tail = self._recut(step.groups[:cut]), self._recut(step.groups[cut:])
            if head is not None and tail is not None:
                halves = (Step(head, step.nsub, step.loop), Step(tail, step.nsub, True))
                yield plan[:s] + halves + plan[s + 1 :]

    def _pair(
        self, plan: Plan, s: int, first: tuple[Group, ...], second: tuple[Group, ...]
    ) -> Plan | None:
        """Steps s and s+1 holding `first` and `second` instead (None if a cut fails)."""
        a, b = self._recut(first), self._recut(second)
        if a is None or b is None:
            return None
        one, two = plan[s], plan[s + 1]
        return plan[:s] + (Step(a, one.nsub, one.loop), Step(b, two.nsub, two.loop)) + plan[s + 2 :]

    def _reads(self, readers: tuple[Group, ...], writers: tuple[Group, ...]) -> bool:
        """Whether a layer of `readers` takes an input from a layer of `writers`."""
        written = {layer for g in writers for layer in g.layers}
        layers = self.wl.layers
        return any(
            src in written for g in readers for layer in g.layers for src, _ in layers[layer].inputs
        )

    def _recut(self, groups: tuple[Group, ...]) -> tuple[Group, ...] | None:
        """The groups' layers side by side on the whole mesh, cut in proportion to compute."""
        key = tuple(g.layers for g in groups)
        if key not in self._cuts:
            weights = [sum(self.work[i] for i in g.layers) for g in groups]
            rects = cut_many(self.whole, weights)
            self._cuts[key] = None if rects is None else tuple(map(Group, key, rects))
        return self._cuts[key]

    def _midpoint(self, groups: tuple[Group, ...]) -> int:
        """Where a step's groups split into halves of about equal compute (1..len-1)."""
        weights = [sum(self.work[i] for i in g.layers) for g in groups]
        total, acc = sum(weights), 0.0
        for j, w in enumerate(weights[:-1], 1):
            acc += w
            if acc >= total / 2:
                return j
        return len(groups) - 1


def _flags(step: Step, nsub: int, loop: bool | None = None) -> Step:
    """The step with another sub-batch count (and loop flag)."""
    return Step(step.groups, nsub, step.loop if loop is None else loop)


def _aligned(plan: Plan) -> Plan:
    """Every step of a loop takes its first step's sub-batch count; the first step starts one."""
    out: list[Step] = []
    for j, step in enumerate(plan):
        loop = step.loop and j > 0
        nsub = out[-1].nsub if loop else step.nsub
        out.append(
            step if (nsub, loop) == (step.nsub, step.loop) else Step(step.groups, nsub, loop)
        )
    return tuple(out)
