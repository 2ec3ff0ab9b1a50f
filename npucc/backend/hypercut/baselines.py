"""Baselines under the same cost model: layer-sequential, layer-pipelined, simulated annealing."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from npucc.backend.hypercut.beam import Plan, batch_splits, tune_loops
from npucc.backend.hypercut.gridcut import cut_many
from npucc.target.mesh_cost import Group, MeshParams, Step, Workload, evaluate


def layer_sequential(wl: Workload, params: MeshParams) -> Plan:
    """Every layer on the whole mesh, one after another, inside tuned sub-batch loops (as
    SET's LS: the batch is cut so that runs of layers keep their feature maps on chip)."""
    plan = tuple(Step((Group((i,), params.whole),), 1) for i in range(len(wl.layers)))
    cache: dict = {}
    return tune_loops(plan, lambda p: evaluate(params, wl, p, cache).edp, batch_splits(wl.batch))


def segments_plan(
    wl: Workload,
    params: MeshParams,
    bounds: list[int],
    nsubs: list[int],
    equal: bool,
    joins: list[bool] | None = None,
) -> Plan | None:
    """Consecutive layer runs [bounds[j], bounds[j+1]) as steps; each layer gets a sub-grid
    (equal shares, or shares in proportion to compute); run j joins the previous run's
    sub-batch loop when joins[j]; None if a run outgrows the mesh."""
    steps = []
    for j, nsub in enumerate(nsubs):
        layers = range(bounds[j], bounds[j + 1])
        weights = [
            1.0 if equal else float(wl.layers[i].macs + wl.layers[i].vops) + 1.0 for i in layers
        ]
        rects = cut_many(params.whole, weights)
        if rects is None:
            return None
        groups = tuple(Group((i,), r) for i, r in zip(layers, rects, strict=True))
        steps.append(Step(groups, nsub, bool(joins and joins[j])))
    return tuple(steps)


def layer_pipelined(wl: Workload, params: MeshParams) -> Plan:
    """Runs of consecutive layers side by side on equal sub-grids, each run pipelining the
    batch in sub-batches; the run length (from the whole graph down to SET-like pairs, as
    the mesh allows) and the sub-batch count are the best of a sweep."""
    n, cores = len(wl.layers), params.rows * params.cols
    cache: dict = {}
    best: tuple[float, Plan] | None = None
    for length in range(min(n, cores), 1, -1):
        runs = math.ceil(n / length)
        bounds = [round(j * n / runs) for j in range(runs + 1)]
        for nsub in batch_splits(wl.batch):
            plan = segments_plan(wl, params, bounds, [nsub] * runs, equal=True)
            if plan is not None:
                edp = evaluate(params, wl, plan, cache).edp
                if best is None or edp < best[0]:
                    best = (edp, plan)
    assert best is not None
    return best[1]


@dataclass(frozen=True, slots=True)
class AnnealOptions:
    """Simulated-annealing budget and schedule."""

    iterations: int = 20_000
    t_start: float = 0.3  # temperature on log(EDP)
    t_end: float = 0.001
    seed: int = 0


def anneal(wl: Workload, params: MeshParams, options: AnnealOptions) -> Plan:
    """SET-style moves on a segmentation of the layer order: move a boundary, split or merge
    runs, double or halve a loop's sub-batches, join a run to the previous sub-batch loop or
    split it off; compute-proportional sub-grids; start from one layer per run."""
    rng = random.Random(options.seed)
    n = len(wl.layers)
    splits = batch_splits(wl.batch)
    cache: dict = {}
    state = (list(range(n + 1)), [1] * n, [False] * n)

    def cost(b: list[int], s: list[int], j: list[bool]) -> float:
        plan = segments_plan(wl, params, b, s, False, j)
        return math.inf if plan is None else math.log(evaluate(params, wl, plan, cache).edp)

    current = cost(*state)
    best = (current, state)
    for it in range(options.iterations):
        temp = options.t_start * (options.t_end / options.t_start) ** (it / options.iterations)
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
        if c <= current or rng.random() < math.exp((current - c) / temp):
            state, current = (b, s, j), c
            if c < best[0]:
                best = (c, state)
    plan = segments_plan(wl, params, best[1][0], best[1][1], False, best[1][2])
    assert plan is not None
    return plan


def _align_loops(nsubs: list[int], joins: list[bool]) -> None:
    """Runs of one loop share its first run's sub-batch count."""
    for r in range(1, len(nsubs)):
        if joins[r]:
            nsubs[r] = nsubs[r - 1]
