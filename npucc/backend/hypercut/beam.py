"""HyperCut's beam search over time plans (paper 002): partition a multi-layer pair into k
parts, either cut its grid (parts run side by side) or run the parts one step after another."""

from __future__ import annotations

import random
from dataclasses import dataclass

from npucc.backend.hypercut.hypergraph import Hypergraph
from npucc.backend.hypercut.partition import k_range, partition
from npucc.backend.hypercut.placement import place
from npucc.backend.hypercut.plan import is_safe
from npucc.target.mesh_cost import Group, MeshParams, Rect, Step, Workload, evaluate

Plan = tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class BeamOptions:
    """Search parameters (the paper's defaults)."""

    width: int = 256
    max_iterations: int = 2048
    k_max: int = 6
    epsilon: float = 0.1
    best_share: float = 0.6
    diverse_share: float = 0.3  # the remaining share is exploratory
    completed_quota: int = 16  # Gamma_completed: completed plans kept per round
    seed: int = 0


def batch_splits(batch: int, limit: int = 64) -> list[int]:
    """Sub-batch counts tried when a step starts pipelining: powers of two dividing the batch."""
    out, n = [], 1
    while n <= min(batch, limit):
        if batch % n == 0:
            out.append(n)
        n *= 2
    return out


class BeamSearch:
    """One search over one workload on one mesh; deterministic for a given seed."""

    def __init__(self, wl: Workload, params: MeshParams, options: BeamOptions) -> None:
        self.wl, self.params, self.opt = wl, params, options
        self.rng = random.Random(options.seed)
        self._parts: dict[tuple[tuple[int, ...], int], list[list[tuple[int, ...]]]] = {}
        self._score: dict[Plan, float] = {}
        self._steps: dict = {}  # step-cost memo of the cost model
        self.evaluations = 0

    def score(self, plan: Plan) -> float:
        """EDP of a (partial) plan; the cost inside a multi-layer pair is not modelled."""
        if plan not in self._score:
            self._score[plan] = evaluate(self.params, self.wl, plan, self._steps).edp
            self.evaluations += 1
        return self._score[plan]

    def parts(self, layers: tuple[int, ...], k: int) -> list[list[tuple[int, ...]]]:
        """Candidate k-way splits of a pair in dependency order: KaHyPar's (when its parts do
        not depend on each other in a cycle) and compute-balanced chunks of the layer order."""
        key = (layers, k)
        if key not in self._parts:
            hg = Hypergraph.from_workload(self.wl, layers)
            assign = partition(hg, k, self.opt.epsilon, self.opt.seed)
            groups: dict[int, list[int]] = {}
            for v, b in enumerate(assign):
                groups.setdefault(b, []).extend(hg.members[v])
            cut = _topological(self.wl, [tuple(sorted(g)) for g in groups.values()])
            chunks = self._chunks(layers, k)
            self._parts[key] = [cut] if cut == chunks else [c for c in (cut, chunks) if c]
        return self._parts[key]

    def _chunks(self, layers: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
        """The layer order cut into (at most) k consecutive runs of about equal compute."""
        total = self._work(layers) or 1.0
        out: list[list[int]] = [[] for _ in range(k)]
        acc = 0.0
        for pos, layer in enumerate(layers):
            part = min(k - 1, int(acc / total * k), pos)
            part = max(part, k - (len(layers) - pos))
            out[part].append(layer)
            acc += self._work((layer,))
        return [tuple(c) for c in out if c]

    def expand(self, plan: Plan) -> list[Plan]:
        """Children of a plan: its largest multi-layer pair split k ways, in time or space."""
        s, g = max(
            (
                (s, g)
                for s, step in enumerate(plan)
                for g, grp in enumerate(step.groups)
                if len(grp.layers) > 1
            ),
            key=lambda sg: (self._work(plan[sg[0]].groups[sg[1]].layers), -sg[0], -sg[1]),
        )
        group = plan[s].groups[g]
        children: list[Plan] = []
        for k in k_range(len(group.layers), self.opt.k_max):
            for parts in self.parts(group.layers, k):
                children.extend(self._children(plan, s, g, parts))
        return [c for c in children if is_safe(self.wl, c)]

    def _children(self, plan: Plan, s: int, g: int, parts: list[tuple[int, ...]]) -> list[Plan]:
        """The temporal and the spatial child of one split of pair g of step s."""
        step, group = plan[s], plan[s].groups[g]
        children: list[Plan] = []
        if len(step.groups) == 1:  # a pair alone in its step may run its parts in turn
            steps = tuple(Step((Group(p, group.rect),), step.nsub) for p in parts)
            children.append(plan[:s] + steps + plan[s + 1 :])
        rects = self._cut(plan, s, group.rect, parts)
        if rects is None:
            return children
        groups = step.groups[:g] + tuple(map(Group, parts, rects)) + step.groups[g + 1 :]
        nsubs = batch_splits(self.wl.batch) if len(step.groups) == 1 else [step.nsub]
        for nsub in nsubs:
            children.append(plan[:s] + (Step(groups, nsub),) + plan[s + 1 :])
        return children

    def _work(self, layers: tuple[int, ...]) -> float:
        return float(sum(self.wl.layers[i].macs + self.wl.layers[i].vops for i in layers))

    def _cut(
        self, plan: Plan, s: int, rect: Rect, parts: list[tuple[int, ...]]
    ) -> list[Rect] | None:
        """Grid cut in proportion to compute, parts placed near their producers."""
        part_of = {layer: i for i, p in enumerate(parts) for layer in p}
        rect_of = {
            layer: grp.rect for st in plan[: s + 1] for grp in st.groups for layer in grp.layers
        }
        traffic: dict[tuple[int, int], float] = {}
        anchors: list[list[tuple[Rect, float]]] = [[] for _ in parts]
        for i, p in enumerate(parts):
            for layer in p:
                for src, elems in self.wl.layers[layer].inputs:
                    if src in part_of:
                        if part_of[src] != i:
                            key = (part_of[src], i)
                            traffic[key] = traffic.get(key, 0.0) + elems
                    elif src in rect_of:
                        anchors[i].append((rect_of[src], float(elems)))
        weights = [self._work(p) + 1.0 for p in parts]
        axis = 0 if rect.w >= rect.h else 1  # alternate: cut across the longer side
        for a in (axis, 1 - axis):
            if (rect.w if a == 0 else rect.h) >= len(parts):
                return place(rect, weights, a, traffic, anchors)
        return None

    def run(self) -> Plan:
        """Grow plans from the whole graph on the whole mesh until every pair is one layer;
        the best complete plan (or the all-temporal one, if better) gets its batch splits tuned."""
        n = len(self.wl.layers)
        start: Plan = (Step((Group(tuple(range(n)), self.params.whole),), 1),)
        beam: list[Plan] = [start]
        done: list[Plan] = []
        for _ in range(self.opt.max_iterations):
            children: dict[Plan, None] = {}
            for plan in beam:
                for child in self.expand(plan):
                    children.setdefault(child)
            complete = [c for c in children if _complete(c)]
            open_ = [c for c in children if not _complete(c)]
            complete.sort(key=self.score)
            done = sorted(done + complete[: self.opt.completed_quota], key=self.score)
            done = done[: self.opt.completed_quota]
            if not open_:
                break
            beam = self._select(open_)
        sequential = tuple(Step((Group((i,), self.params.whole),)) for i in range(n))
        return self.polish(min([*done, sequential], key=self.score))

    def polish(self, plan: Plan) -> Plan:
        """Greedy last pass: each step takes its best sub-batch count, until nothing improves."""
        improved = True
        while improved:
            improved = False
            for s, step in enumerate(plan):
                for nsub in batch_splits(self.wl.batch):
                    child = plan[:s] + (Step(step.groups, nsub),) + plan[s + 1 :]
                    if self.score(child) < self.score(plan):
                        plan, improved = child, True
        return plan

    def _select(self, plans: list[Plan]) -> list[Plan]:
        """60 % best, 30 % structurally diverse, 10 % exploratory (random, seeded)."""
        plans = sorted(plans, key=self.score)
        width = self.opt.width
        if len(plans) <= width:
            return plans
        n_best = int(width * self.opt.best_share)
        n_div = int(width * self.opt.diverse_share)
        chosen = plans[:n_best]
        rest = plans[n_best:]
        shapes = {_shape(p) for p in chosen}
        diverse, leftover = [], []
        for p in rest:
            shape = _shape(p)
            if len(diverse) < n_div and shape not in shapes:
                shapes.add(shape)
                diverse.append(p)
            else:
                leftover.append(p)
        n_explore = width - len(chosen) - len(diverse)
        explore = self.rng.sample(leftover, min(n_explore, len(leftover)))
        return chosen + diverse + sorted(explore, key=self.score)


def _complete(plan: Plan) -> bool:
    """Every pair is a single layer."""
    return all(len(g.layers) == 1 for step in plan for g in step.groups)


def _shape(plan: Plan) -> tuple[tuple[int, int], ...]:
    """Structure signature: groups and sub-batches per step."""
    return tuple((len(step.groups), step.nsub) for step in plan)


def _topological(wl: Workload, parts: list[tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """Parts ordered so every dependency points forward; None when they form a cycle."""
    part_of = {layer: i for i, p in enumerate(parts) for layer in p}
    deps = {i: set() for i in range(len(parts))}
    for i, p in enumerate(parts):
        for layer in p:
            for src, _ in wl.layers[layer].inputs:
                j = part_of.get(src)
                if j is not None and j != i:
                    deps[i].add(j)
    order: list[int] = []
    ready = sorted(i for i in deps if not deps[i])
    remaining = {i: set(d) for i, d in deps.items()}
    while ready:
        i = ready.pop(0)
        order.append(i)
        for j in sorted(remaining):
            if i in remaining[j]:
                remaining[j].discard(i)
                if not remaining[j] and j not in order and j not in ready:
                    ready.append(j)
        ready.sort(key=lambda j: min(parts[j]))
    if len(order) != len(parts):
        return None
    return [parts[i] for i in order]
