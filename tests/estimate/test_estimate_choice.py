"""Which estimate prices the plans: exec when compiling (every search), set for the SET bench."""

import json
from pathlib import Path

import pytest

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.hypercut.set_model import MeshParams, evaluate
from npucc.backend.hypercut.workload import workload_from_graph
from npucc.backend.planner import METHODS, PlanOptions, plan_graph
from npucc.errors import NpuccError
from npucc.target import load_target
from npucc.tools.cli import main
from npucc.transforms.graph_pipeline import import_model

MODELS = Path(__file__).parents[2] / "models"
MESH = load_target("mesh8x8")


def test_the_default_estimate_is_what_compiling_uses() -> None:
    assert PlanOptions().estimate == "exec"


@pytest.mark.parametrize("method", [m for m in METHODS if m != "hypercut"])
def test_every_baseline_is_priced_as_executed(method: str) -> None:
    graph = import_model(MODELS / "residual_block.onnx")
    options = PlanOptions(method=method, sa_iterations=200)
    plan = plan_graph(graph, MESH, options)
    model = ExecCostModel(graph, MESH)
    assert plan.priced_by == "exec"
    assert plan.cost == model.evaluate(plan.steps, plan.offchip)
    wl = workload_from_graph(graph, 1)
    set_plan = plan_graph(
        graph, MESH, PlanOptions(method=method, sa_iterations=200, estimate="set")
    )
    assert set_plan.cost == evaluate(MeshParams.from_target(MESH), wl, set_plan.steps)
    # the search compared plans by exec: its choice is no worse there than SET's choice
    assert model.best_edp(plan.steps) <= model.best_edp(set_plan.steps) * (1 + 1e-12)


@pytest.mark.parametrize("model", ["set", "exec"])
def test_bench_hypercut_model_flag(tmp_path: Path, model: str) -> None:
    out = tmp_path / "hc.json"
    args = ["bench", "hypercut", "--json", str(out), "--models", "transformer"]
    args += ["--platforms", "mesh8x8", "--batches", "1", "--methods", "layer-sequential"]
    assert main([*args, "--model", model]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    graph = import_model(MODELS / "transformer_encoder.onnx")
    options = PlanOptions(method="layer-sequential", estimate=model)
    assert run["estimate"] == model
    assert run["edp"] == plan_graph(graph, MESH, options).cost.edp


def test_bench_hypercut_defaults_to_the_set_model(tmp_path: Path) -> None:
    out = tmp_path / "hc.json"
    args = ["bench", "hypercut", "--json", str(out), "--models", "transformer"]
    args += ["--platforms", "mesh8x8", "--batches", "1", "--methods", "layer-sequential"]
    assert main(args) == 0
    assert json.loads(out.read_text())["runs"][0]["estimate"] == "set"


def test_hypercut_ends_at_or_below_the_baselines_it_starts_from() -> None:
    graph = import_model(MODELS / "residual_block.onnx")
    plan = plan_graph(graph, MESH, PlanOptions(beam=BeamOptions(width=2)))
    model = ExecCostModel(graph, MESH)
    assert plan.cost == model.evaluate(plan.steps, model.refine_offchip(plan.steps))
    for method in ("layer-sequential", "layer-pipelined"):  # its starts, by one estimate
        assert plan.cost.edp <= plan_graph(graph, MESH, PlanOptions(method=method)).cost.edp
    starts = BeamOptions(starts=("beam", "x"))  # type: ignore[arg-type]
    with pytest.raises(NpuccError, match="unknown start 'x'"):
        plan_graph(graph, MESH, PlanOptions(beam=starts))
