"""A beam search of a bundled model on mesh8x8 priced by one ExecCostModel (for the tests)."""

from __future__ import annotations

from pathlib import Path

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch
from npucc.backend.hypercut.set_model import MeshParams
from npucc.backend.hypercut.workload import workload_from_graph
from npucc.ir.plan import Step
from npucc.target import load_target
from npucc.transforms.graph_pipeline import import_model

MODELS = Path(__file__).parents[2] / "models"


def searched(name: str) -> tuple[ExecCostModel, list[tuple[Step, ...]], tuple[Step, ...]]:
    """A width-8 beam search of models/`name` on mesh8x8 priced by one ExecCostModel: the
    model, every plan it priced and the plan found."""
    graph = import_model(MODELS / f"{name}.onnx")
    target = load_target("mesh8x8")
    model = ExecCostModel(graph, target)
    plans: list[tuple[Step, ...]] = []

    def price(plan: tuple[Step, ...]) -> float:
        plans.append(plan)
        return model.best_edp(plan)

    wl = workload_from_graph(graph, None)
    found = BeamSearch(wl, MeshParams.from_target(target), BeamOptions(width=8), price).run()
    return model, plans, found
