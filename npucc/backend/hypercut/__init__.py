"""HyperCut inter-layer scheduling on a mesh (paper 002): plans, search and baselines."""

from npucc.backend.hypercut.plan import MeshPlan
from npucc.backend.hypercut.planner import (
    METHODS,
    HypercutPass,
    PlannedGraph,
    PlanOptions,
    plan_graph,
)

__all__ = ["METHODS", "HypercutPass", "MeshPlan", "PlanOptions", "PlannedGraph", "plan_graph"]
