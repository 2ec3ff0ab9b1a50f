"""SET's baselines: layer-sequential, layer-pipelined, simulated annealing.

Each prices the plans it compares by `price` (the EDP of a complete plan: what compiling
searches with is the execution-faithful estimate); without one, by the SET-aligned model.
LP's segment options are SET-priced alone (as SET cuts them); `price` picks among the
segmentations they yield.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from npucc.backend.hypercut.gridcut import allocate, compute_weight, cut_many
from npucc.backend.hypercut.loops import Plan, batch_splits, tune_loops
from npucc.backend.hypercut.set_model import MeshParams, evaluate, plan_edp
from npucc.ir.plan import Group, LayerLoad, Step, Workload

Price = Callable[[Plan], float]  # EDP of a complete plan


def set_price(wl: Workload, params: MeshParams) -> Price:
    """The SET-aligned model's EDP of complete plans of `wl` (step costs memoised)."""
    cache: dict = {}
    return lambda plan: plan_edp(params, wl, plan, cache)


def all_temporal(wl: Workload, params: MeshParams) -> Plan:
    """Every layer on the whole mesh, one step each, the whole batch at once."""
    return tuple(Step((Group((i,), params.whole),), 1) for i in range(len(wl.layers)))


def layer_sequential(wl: Workload, params: MeshParams, price: Price | None = None) -> Plan:
    """The all-temporal plan inside tuned sub-batch loops (as SET's LS: the batch is cut so
    that runs of layers keep their feature maps on chip)."""
    plan = all_temporal(wl, params)
    cache: dict = {}

    def set_edp(p: Plan) -> float:
        return evaluate(params, wl, p, cache).edp

    return tune_loops(plan, set_edp if price is None else price, batch_splits(wl.batch))


def segments_plan(
    wl: Workload,
    params: MeshParams,
    bounds: list[int],
    nsubs: list[int],
    equal: bool,
    joins: list[bool] | None = None,
    memo: dict | None = None,
) -> Plan | None:
    """Consecutive layer runs [bounds[j], bounds[j+1]) as steps; each layer gets a sub-grid
    (equal shares, or shares in proportion to compute); run j joins the previous run's
    sub-batch loop when joins[j]; None if a run outgrows the mesh.

    `memo` (owned by the caller, one per workload, params and `equal`) keeps each run's
    groups and steps, so a search re-cuts only runs it has not seen.
    """
    memo = {} if memo is None else memo
    steps = []
    for j, nsub in enumerate(nsubs):
        key = (bounds[j], bounds[j + 1], nsub, bool(joins and joins[j]))
        step = memo.get(key, ())
        if step == ():
            step = memo[key] = _run_step(wl, params, *key, equal, memo)
        if step is None:
            return None
        steps.append(step)
    return tuple(steps)


def _run_step(
    wl: Workload,
    params: MeshParams,
    lo: int,
    hi: int,
    nsub: int,
    join: bool,
    equal: bool,
    memo: dict,
) -> Step | None:
    """The step of run [lo, hi) (its groups cut once per run and kept in `memo`)."""
    groups = memo.get((lo, hi), ())
    if groups == ():
        weights = [1.0 if equal else compute_weight(wl.layers[i]) for i in range(lo, hi)]
        rects = cut_many(params.whole, weights)
        groups = memo[(lo, hi)] = (
            None
            if rects is None
            else tuple(Group((i,), r) for i, r in zip(range(lo, hi), rects, strict=True))
        )
    return None if groups is None else Step(groups, nsub, join)


MIN_UTIL = 0.75  # SET's floor on a segment's core utilisation (its Cluster::min_util)
PREFETCH = 2  # sub-batch inputs a pipelined layer holds: this one and the next (SET's rule)
LAMBDA_ROUNDS = 8  # rounds of the E + lambda*D segmentation (lambda <- E/D of the last plan)

SegmentOption = tuple[float, float, Step]  # energy, latency and the step of one segment


def layer_pipelined(wl: Workload, params: MeshParams, price: Price | None = None) -> Plan:
    """SET's LP: consecutive-layer segments meeting through DRAM, each pipelining the batch."""
    # A segment is one layer on the whole mesh or several side by side on sub-grids sized by
    # compute, admitted by SET's rules (_shares, _fits), with its own sub-batch count.
    # Boundaries and counts: dynamic programming on E + lambda*D, lambda iterated to E/D.
    n = len(wl.layers)
    options = _segment_options(wl, params)
    cache: dict = {}
    lam, best = 0.0, None
    seen: set[Plan] = set()
    for _ in range(LAMBDA_ROUNDS):
        plan = _segmentation(n, options, lam)
        if plan in seen:
            break
        seen.add(plan)
        cost = evaluate(params, wl, plan, cache)  # SET's: lambda weighs SET-priced segments
        edp = cost.edp if price is None else price(plan)
        if best is None or edp < best[0]:
            best = (edp, plan)
        lam = cost.energy_pj / max(cost.latency_cycles, 1.0)
    assert best is not None
    return best[1]


def _segment_options(
    wl: Workload, params: MeshParams
) -> dict[tuple[int, int], list[SegmentOption]]:
    """Admissible segments [lo, hi) with each admissible sub-batch count, priced alone."""
    n, cores = len(wl.layers), params.rows * params.cols
    work = [
        layer.macs / params.macs_per_core + layer.vops / params.vector_per_core
        for layer in wl.layers
    ]
    splits = batch_splits(wl.batch)
    out: dict[tuple[int, int], list[SegmentOption]] = {}
    for lo in range(n):
        segments = _Segments(wl, lo)
        for hi in range(lo + 1, min(n, lo + cores) + 1):
            shares = _shares(work[lo:hi], cores)
            if shares is None:
                continue
            rects = [params.whole] if hi == lo + 1 else cut_many(params.whole, work[lo:hi])
            if rects is None:
                continue
            sub = segments.workload(hi)
            steps = [
                Step(tuple(Group((lo + k,), r) for k, r in enumerate(rects)), nsub)
                for nsub in splits
                if _fits(params, sub, shares, nsub)
            ]
            if not steps and hi == lo + 1:  # a layer too big for any split still runs alone
                steps = [Step((Group((lo,), params.whole),), nsub) for nsub in splits]
            options = []
            local = tuple(Group((k,), r) for k, r in enumerate(rects)) if steps else ()
            for step in steps:  # inputs read from DRAM, outputs written to DRAM (SET's cut)
                cost = evaluate(params, sub, (Step(local, step.nsub),))
                options.append((cost.energy_pj, cost.latency_cycles, step))
            if options:
                out[(lo, hi)] = options
    return out


def _shares(work: list[float], cores: int) -> list[int] | None:
    """SET's tile allocation by compute; None if it leaves over 1 - MIN_UTIL of cores idle."""
    if len(work) == 1:
        return [cores]
    shares = allocate(cores, work)
    if shares is None:
        return None
    slowest = max(w / s for w, s in zip(work, shares, strict=True))
    if slowest > 0 and sum(work) < MIN_UTIL * slowest * cores:
        return None
    return shares


def _fits(params: MeshParams, sub: Workload, shares: list[int], nsub: int) -> bool:
    """SET's buffer rule: weights and PREFETCH sub-batches of input fit each layer's share."""
    eb, per = params.elem_bytes, sub.batch / nsub
    held = PREFETCH if nsub > 1 else 1
    for layer, share in zip(sub.layers, shares, strict=True):
        inputs = (layer.ext_in + sum(e for _, e in layer.inputs)) * eb * per
        if layer.weights * eb + held * inputs > params.sram_per_core * share:
            return False
    return True


class _Segments:
    """Segments starting at layer `lo` as workloads of their own (renumbered from 0)."""

    def __init__(self, wl: Workload, lo: int) -> None:
        self.wl, self.lo = wl, lo
        self.last_use = [max(users, default=-1) for users in wl.consumers]
        self.memo: dict[tuple[int, bool], LayerLoad] = {}

    def workload(self, hi: int) -> Workload:
        """Layers lo..hi-1: earlier producers become DRAM reads, later consumers DRAM writes."""
        return Workload(
            self.wl.name, tuple(self._layer(i, hi) for i in range(self.lo, hi)), self.wl.batch
        )

    def _layer(self, i: int, hi: int) -> LayerLoad:
        """Layer i as a member of segment lo..hi-1."""
        layer = self.wl.layers[i]
        spill = layer.is_output or self.last_use[i] >= hi
        key = (i, spill)
        if key not in self.memo:
            lo = self.lo
            inner = tuple((p - lo, e) for p, e in layer.inputs if p >= lo)
            outer = sum(dict((p, e) for p, e in layer.inputs if p < lo).values())
            self.memo[key] = LayerLoad(
                layer.name, layer.macs, layer.vops, layer.weights, layer.out, inner,
                layer.ext_in + outer, spill,
            )  # fmt: skip
        return self.memo[key]


def _segmentation(n: int, options: dict[tuple[int, int], list[SegmentOption]], lam: float) -> Plan:
    """The segments and sub-batch counts minimising the sum of E + lam*D (ties: fewer steps)."""
    best: list[tuple[float, int, Plan]] = [(0.0, 0, ())]
    for hi in range(1, n + 1):
        pick: tuple[float, int, Plan] | None = None
        for lo in range(hi):
            for energy, latency, step in options.get((lo, hi), ()):
                value = best[lo][0] + energy + lam * latency
                cand = (value, best[lo][1] + 1, best[lo][2] + (step,))
                if pick is None or cand[:2] < pick[:2]:
                    pick = cand
        assert pick is not None  # one layer alone is always admissible
        best.append(pick)
    return best[n][2]


@dataclass(frozen=True, slots=True)
class AnnealOptions:
    """Simulated-annealing budget and schedule (SET's: its temperature curve on the relative
    cost increase, and a return to the best state for the final rounds)."""

    iterations: int = 20_000
    t_start: float = 0.07  # temperature at the start; T(x) = t_start (1 - x) / (1 + 8x)
    best_from: float = 0.9  # fraction of the rounds after which the walk restarts from the best
    seed: int = 0
    goal: float = 0.0  # stop at the first state priced at or below this (time to quality)


def anneal(
    wl: Workload, params: MeshParams, options: AnnealOptions, price: Price | None = None
) -> Plan:
    """SET-style moves on a segmentation of the layer order: move a boundary, split or merge
    runs, double or halve a loop's sub-batches, join a run to the previous sub-batch loop or
    split it off; compute-proportional sub-grids; start from one layer per run."""
    rng = random.Random(options.seed)
    n = len(wl.layers)
    splits = batch_splits(wl.batch)
    edp = set_price(wl, params) if price is None else price
    runs_memo: dict = {}  # grid cuts and steps of the runs seen (as the beam's memos)
    state = (list(range(n + 1)), [1] * n, [False] * n)

    def cost(b: list[int], s: list[int], j: list[bool]) -> float:
        plan = segments_plan(wl, params, b, s, False, j, runs_memo)
        return math.inf if plan is None else edp(plan)

    current = cost(*state)
    best = (current, state)
    restart = int(options.best_from * options.iterations)
    for it in range(options.iterations):
        if best[0] <= options.goal:
            break
        if it == restart:
            current, state = best
        x = it / options.iterations
        temp = options.t_start * (1.0 - x) / (1.0 + 8.0 * x)
        b, s, j = list(state[0]), list(state[1]), list(state[2])
        runs = len(s)
        r = rng.randrange(runs)
        move = rng.randrange(5)
        if move == 0 and runs > 1:  # shift a boundary
            r = max(r, 1)
            b[r] += rng.choice((-1, 1))
            if not b[r - 1] < b[r] < b[r + 1]:
                continue
        elif move == 1:  # split a run (both halves in one loop)
            if b[r + 1] - b[r] < 2:
                continue
            b.insert(r + 1, rng.randrange(b[r] + 1, b[r + 1]))
            s.insert(r + 1, s[r])
            j.insert(r + 1, True)
        elif move == 2 and runs > 1:  # merge two runs
            r = max(r, 1)
            del b[r], s[r], j[r]
            j[0] = False
        elif move == 3 and runs > 1:  # join the previous loop or split it off
            r = max(r, 1)
            j[r] = not j[r]
        else:  # change a loop's sub-batch count
            while r and j[r]:
                r -= 1
            k = splits.index(s[r]) + rng.choice((-1, 1))
            if not 0 <= k < len(splits):
                continue
            s[r] = splits[k]
        _align_loops(s, j)
        c = cost(b, s, j)
        if c <= current or rng.random() < math.exp((current - c) / current / temp):
            state, current = (b, s, j), c
            if c < best[0]:
                best = (c, state)
    plan = segments_plan(wl, params, best[1][0], best[1][1], False, best[1][2], runs_memo)
    assert plan is not None
    return plan


def _align_loops(nsubs: list[int], joins: list[bool]) -> None:
    """Runs of one loop share its first run's sub-batch count."""
    for r in range(1, len(nsubs)):
        if joins[r]:
            nsubs[r] = nsubs[r - 1]
