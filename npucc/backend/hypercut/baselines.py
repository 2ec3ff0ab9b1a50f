"""Baselines under the same cost model: layer-sequential, layer-pipelined, simulated annealing."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from npucc.backend.hypercut.beam import Plan, batch_splits
from npucc.backend.hypercut.gridcut import cut_many
from npucc.target.mesh_cost import Group, MeshParams, Step, Workload, evaluate


def layer_sequential(wl: Workload, params: MeshParams) -> Plan:
    """Every layer on the whole mesh, one after another."""
    return tuple(Step((Group((i,), params.whole),), 1) for i in range(len(wl.layers)))


def segments_plan(
    wl: Workload, params: MeshParams, bounds: list[int], nsubs: list[int], equal: bool
) -> Plan | None:
    """Consecutive layer runs [bounds[j], bounds[j+1]) as steps; each layer gets a sub-grid
    (equal shares, or shares in proportion to compute); None if a run outgrows the mesh."""
    steps = []
    for j, nsub in enumerate(nsubs):
        layers = range(bounds[j], bounds[j + 1])
        weights = [
            1.0 if equal else float(wl.layers[i].macs + wl.layers[i].vops) + 1.0 for i in layers
        ]
        rects = cut_many(params.whole, weights)
        if rects is None:
            return None
        steps.append(Step(tuple(Group((i,), r) for i, r in zip(layers, rects, strict=True)), nsub))
    return tuple(steps)


def layer_pipelined(wl: Workload, params: MeshParams) -> Plan:
    """All layers side by side on equal sub-grids (in as few runs as the mesh allows),
    the batch split into the best number of sub-batches."""
    n, cores = len(wl.layers), params.rows * params.cols
    runs = math.ceil(n / cores)
    bounds = [round(j * n / runs) for j in range(runs + 1)]
    best: tuple[float, Plan] | None = None
    for nsub in batch_splits(wl.batch):
        plan = segments_plan(wl, params, bounds, [nsub] * runs, equal=True)
        if plan is not None:
            edp = evaluate(params, wl, plan).edp
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
    runs, double or halve a run's sub-batches; compute-proportional sub-grids; start from LS."""
    rng = random.Random(options.seed)
    n = len(wl.layers)
    splits = batch_splits(wl.batch)
    cache: dict = {}
    bounds, nsubs = list(range(n + 1)), [1] * n

    def cost(b: list[int], s: list[int]) -> float:
        plan = segments_plan(wl, params, b, s, equal=False)
        return math.inf if plan is None else math.log(evaluate(params, wl, plan, cache).edp)

    current = cost(bounds, nsubs)
    best = (current, list(bounds), list(nsubs))
    for it in range(options.iterations):
        temp = options.t_start * (options.t_end / options.t_start) ** (it / options.iterations)
        b, s = list(bounds), list(nsubs)
        move = rng.randrange(4)
        runs = len(s)
        if move == 0 and runs > 1:  # shift a boundary
            j = rng.randrange(1, runs)
            b[j] += rng.choice((-1, 1))
            if not b[j - 1] < b[j] < b[j + 1]:
                continue
        elif move == 1:  # split a run
            j = rng.randrange(runs)
            if b[j + 1] - b[j] < 2:
                continue
            b.insert(j + 1, rng.randrange(b[j] + 1, b[j + 1]))
            s.insert(j + 1, s[j])
        elif move == 2 and runs > 1:  # merge two runs
            j = rng.randrange(1, runs)
            del b[j]
            del s[j]
        else:  # change the batch split of a run
            j = rng.randrange(runs)
            k = splits.index(s[j]) + rng.choice((-1, 1))
            if not 0 <= k < len(splits):
                continue
            s[j] = splits[k]
        c = cost(b, s)
        if c <= current or rng.random() < math.exp((current - c) / temp):
            bounds, nsubs, current = b, s, c
            if c < best[0]:
                best = (c, list(b), list(s))
    plan = segments_plan(wl, params, best[1], best[2], equal=False)
    assert plan is not None
    return plan
