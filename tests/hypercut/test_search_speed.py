"""The search's shortcuts give exactly what the plain computation gives (or never worse)."""

import math
import random

import numpy as np
import pytest

from npucc.backend.hypercut import baselines, beam, partition
from npucc.backend.hypercut.baselines import AnnealOptions, anneal
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch
from npucc.backend.hypercut.hypergraph import DEST, SOURCE, Hypergraph
from npucc.backend.hypercut.loops import tune_loops
from npucc.backend.hypercut.partition import k_range
from npucc.backend.hypercut.set_model import MeshParams, evaluate, step_costs
from npucc.ir.plan import Step

from .conftest import chain


def searched_plans(
    mesh: MeshParams, monkeypatch, batch: int
) -> tuple[BeamSearch, list[tuple[Step, ...]]]:
    """A small search and every complete plan it priced."""
    seen: list[tuple[Step, ...]] = []
    plan_edp = beam.plan_edp

    def spy(p, wl, steps, cache):
        seen.append(steps)
        return plan_edp(p, wl, steps, cache)

    monkeypatch.setattr(beam, "plan_edp", spy)
    search = BeamSearch(chain(12, batch=batch), mesh, BeamOptions(width=4))
    search.run()
    return search, seen


def test_memoised_costs_equal_fresh_ones(mesh: MeshParams, monkeypatch):
    # batch 1: a step reads on-chip tensors from producers placed differently across plans
    search, seen = searched_plans(mesh, monkeypatch, 1)
    assert any(len(step.groups) > 1 for plan in seen for step in plan)  # on-chip transfers
    cache: dict = {}
    for plan in seen:
        fresh = [(c.energy_pj, c.latency_cycles) for c in step_costs(mesh, search.wl, plan)]
        memo = [(c.energy_pj, c.latency_cycles) for c in step_costs(mesh, search.wl, plan, cache)]
        assert memo == fresh


def test_tuning_by_loops_matches_tuning_by_edp(mesh: MeshParams, monkeypatch):
    search, seen = searched_plans(mesh, monkeypatch, 8)
    for plan in seen[:: max(1, len(seen) // 8)]:
        by_edp = tune_loops(plan, search.edp, search.splits)
        assert tune_loops(plan, search.edp, search.splits, search.loop_costs) == by_edp
        assert evaluate(mesh, search.wl, by_edp).edp <= evaluate(mesh, search.wl, plan).edp


def test_annealing_memos_change_nothing(mesh: MeshParams, monkeypatch):
    """SA with its run and step memos prices every state bitwise as fresh cuts and costs do."""
    wl, options = chain(16, batch=8), AnnealOptions(iterations=600, seed=2)
    segments, plan_edp = baselines.segments_plan, baselines.plan_edp

    def run(fresh: bool) -> tuple[tuple[Step, ...], list[float]]:
        seen: list[float] = []

        def edp(p, w, plan, cache):
            value = evaluate(p, w, plan).edp if fresh else plan_edp(p, w, plan, cache)
            seen.append(value)
            return value

        def cut(w, p, bounds, nsubs, equal, joins=None, memo=None):
            return segments(w, p, bounds, nsubs, equal, joins, None if fresh else memo)

        monkeypatch.setattr(baselines, "plan_edp", edp)
        monkeypatch.setattr(baselines, "segments_plan", cut)
        return anneal(wl, mesh, options), seen

    memoised, fresh = run(False), run(True)
    assert len(set(fresh[1])) > 20  # the walk visits many plans
    assert memoised == fresh


def _reference_hypergraph(wl, layers):
    """Incidence and hyperedge bytes by a scan of every producer (the former construction)."""
    row = {layer: r for r, layer in enumerate(layers)}
    columns, weights = [], []
    for producer, users in enumerate(wl.consumers):
        col = np.zeros(len(layers), dtype=np.uint8)
        if producer in row:
            col[row[producer]] |= SOURCE
        for c in users:
            if c in row:
                col[row[c]] |= DEST
        if np.count_nonzero(col) >= 2:
            columns.append(col)
            weights.append(wl.layers[producer].out * wl.batch)
    incidence = np.stack(columns, axis=1) if columns else np.zeros((len(layers), 0), np.uint8)
    return incidence, np.array(weights, dtype=float)


def _subsets(n: int, count: int, largest: int) -> list[tuple[int, ...]]:
    """Random layer subsets (fixed seed), runs and scattered sets."""
    rng = random.Random(5)
    out = []
    for t in range(count):
        size = rng.randrange(1, largest + 1)
        if t % 2:
            lo = rng.randrange(n - size + 1)
            out.append(tuple(range(lo, lo + size)))
        else:
            out.append(tuple(sorted(rng.sample(range(n), size))))
    return out


def test_hypergraph_of_a_subset_equals_the_full_scan():
    wl = chain(16)
    for layers in _subsets(16, 60, 16):
        hg = Hypergraph.from_workload(wl, layers)
        incidence, weights = _reference_hypergraph(wl, layers)
        assert np.array_equal(hg.incidence, incidence) and hg.incidence.dtype == np.uint8
        assert np.array_equal(hg.edge_bytes, weights)
        offsets, pins = hg.pins()
        assert pins == [v for e in range(hg.num_edges) for v in np.flatnonzero(incidence[:, e])]
        assert offsets[-1] == len(pins) and len(offsets) == hg.num_edges + 1


def test_exact_partition_is_never_worse_than_kahypar():
    """On tiny hypergraphs: no more over the block limit, then no more km1, than KaHyPar."""
    wl = chain(12, batch=2)

    def objective(assign, k, offsets, pins, edge_w, node_w):
        limit = (1 + 0.1) * math.ceil(sum(node_w) / k)
        loads = [sum(w for v, w in enumerate(node_w) if assign[v] == b) for b in range(k)]
        km1 = sum(
            (len({assign[v] for v in pins[offsets[e] : offsets[e + 1]]}) - 1) * w
            for e, w in enumerate(edge_w)
        )
        return max(0.0, max(loads) - limit), km1

    checked = 0
    for layers in _subsets(12, 40, partition.EXACT_VERTICES):
        hg = Hypergraph.from_workload(wl, layers)
        for k in k_range(hg.num_vertices):
            if hg.num_edges == 0 or k == hg.num_vertices:
                continue
            args = partition.solver_input(hg, k)
            exact = partition._exact(hg.num_vertices, k, 0.1, 0, args)
            kahypar = partition._kahypar(hg.num_vertices, k, 0.1, 0, args)
            assert 2 <= len(set(exact)) <= k and exact == partition.partition(hg, k)
            assert objective(exact, k, *args) <= objective(kahypar, k, *args)
            checked += 1
    assert checked > 20


def test_annealing_returns_the_best_state_it_priced(mesh: MeshParams, monkeypatch):
    """SET's schedule: uphill moves are taken early, yet the walk ends on its best state."""
    wl = chain(16, batch=8)
    seen: list[float] = []
    plan_edp = baselines.plan_edp

    def edp(p, w, plan, cache):
        seen.append(plan_edp(p, w, plan, cache))
        return seen[-1]

    monkeypatch.setattr(baselines, "plan_edp", edp)
    plan = anneal(wl, mesh, AnnealOptions(iterations=800, seed=4))
    assert evaluate(mesh, wl, plan).edp == pytest.approx(min(seen), rel=1e-12)
    assert min(seen) < seen[0]  # it improved on the start (one layer per run)


def test_annealing_stops_at_its_goal(mesh: MeshParams, monkeypatch):
    """With a goal EDP the walk stops at the first state priced at or below it (time to
    quality) and returns that state; without one it runs its whole budget."""
    wl, seen = chain(16, batch=8), []
    plan_edp = baselines.plan_edp

    def edp(p, w, plan, cache):
        seen.append(plan_edp(p, w, plan, cache))
        return seen[-1]

    monkeypatch.setattr(baselines, "plan_edp", edp)
    anneal(wl, mesh, AnnealOptions(iterations=800, seed=4))
    full = list(seen)
    goal = sorted(set(full))[len(set(full)) // 2]  # reached partway through the walk
    first = next(i for i, value in enumerate(full) if value <= goal)
    seen.clear()
    plan = anneal(wl, mesh, AnnealOptions(iterations=800, seed=4, goal=goal))
    assert seen == full[: first + 1]
    assert evaluate(mesh, wl, plan).edp == pytest.approx(full[first], rel=1e-12)
