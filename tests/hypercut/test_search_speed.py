"""The search's shortcuts price plans exactly as a fresh evaluation does."""

from npucc.backend.hypercut import beam
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch, tune_loops
from npucc.target.mesh_cost import MeshParams, Step, evaluate, step_costs

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
