"""Local refinement of complete plans (npucc.backend.hypercut.refine)."""

from __future__ import annotations

from npucc.backend.hypercut.loops import batch_splits
from npucc.backend.hypercut.refine import Refiner
from npucc.backend.hypercut.set_model import MeshParams, evaluate, priced_plan
from npucc.ir.plan import Group, Step, is_safe

from .conftest import chain


def _refiner(mesh: MeshParams, n: int = 8, batch: int = 8) -> tuple[Refiner, list]:
    """A refiner of chain(n) by the SET-aligned model, and the plans it priced."""
    wl = chain(n, batch=batch)
    priced: list = []

    def edp(plan):
        priced.append(plan)
        return evaluate(mesh, wl, plan).edp

    return Refiner(wl, mesh.whole, batch_splits(batch), edp), priced


def test_every_move_is_safe_and_keeps_loops_consistent(mesh: MeshParams):
    refiner, _ = _refiner(mesh)
    wl, whole = refiner.wl, mesh.whole
    sequential = tuple(Step((Group((i,), whole),)) for i in range(8))
    plans = [sequential]
    for _ in range(3):  # three generations of moves from the layer-sequential plan
        plans = list(
            dict.fromkeys(c for p in plans[:12] for s in range(len(p)) for c in refiner.moves(p, s))
        )
        assert plans
        for plan in plans:
            assert is_safe(wl, plan)
            assert sorted(i for step in plan for g in step.groups for i in g.layers) == list(
                range(8)
            )
            priced_plan(mesh, wl, plan, "refined").verify()  # loops share their sub-batch count
    shapes = {tuple(len(step.groups) for step in p) for p in plans}
    assert any(len(s) < 8 for s in shapes)  # steps merged
    assert any(max(s) > 1 for s in shapes)  # layers side by side


def test_a_group_never_crosses_a_boundary_away_from_its_step_s_readers(mesh: MeshParams):
    refiner, _ = _refiner(mesh, n=4)
    whole = mesh.whole
    reversed_ = refiner._recut((Group((1,), whole), Group((0,), whole)))  # safe: no cycle
    rest = refiner._recut((Group((3,), whole), Group((2,), whole)))
    assert reversed_ is not None and rest is not None
    plan = (Step(reversed_), Step(rest))
    assert is_safe(refiner.wl, plan)
    layers = [tuple(g.layers for g in step.groups) for step in plan]
    moved = [
        c
        for c in refiner.moves(plan, 0)
        if len(c) == 2 and [tuple(g.layers for g in step.groups) for step in c] != layers
    ]
    # layer 0 (read by layer 1 in its step) may not go forward; layer 3 (reading layer 2
    # in its step) may not come back: only the merge and the split remain, none of them moves
    assert moved == [] and all(is_safe(refiner.wl, c) for c in refiner.moves(plan, 0))


def test_refinement_improves_within_its_budget(mesh: MeshParams):
    refiner, priced = _refiner(mesh)
    whole = mesh.whole
    sequential = tuple(Step((Group((i,), whole),)) for i in range(8))
    start = evaluate(mesh, refiner.wl, sequential).edp
    assert refiner.run(sequential, 0) == sequential
    priced.clear()
    out = refiner.run(sequential, 25)
    assert len(priced) <= 26 and evaluate(mesh, refiner.wl, out).edp < start
    priced.clear()
    longer = refiner.run(sequential, 10_000)
    assert evaluate(mesh, refiner.wl, longer).edp <= evaluate(mesh, refiner.wl, out).edp
    assert refiner.run(longer, 10_000) == longer  # a local optimum: no move improves
