"""Planning API and the registered `hypercut` pass: Graph -> (Graph, MeshPlan)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from npucc.backend.hypercut.baselines import (
    AnnealOptions,
    anneal,
    layer_pipelined,
    layer_sequential,
)
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch
from npucc.backend.hypercut.exec_cost import ExecCostModel
from npucc.backend.hypercut.set_model import MeshParams, evaluate
from npucc.backend.hypercut.workload import workload_from_graph
from npucc.errors import NpuccError
from npucc.ir.graph import Graph
from npucc.ir.plan import MeshPlan, PlannedGraph
from npucc.passes import CompileContext, Pass, register
from npucc.target import Target

METHODS = ("hypercut", "sa", "layer-sequential", "layer-pipelined")
ESTIMATES = ("analytic", "exec")  # SET-aligned mesh model | what the lowering will execute


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """What the planner may be told: method, batch, seed, the search budgets and the estimate.

    `estimate="exec"` prices plans as the lowering will execute them (exec_cost; HyperCut
    searches with it, the other methods are priced by it); "analytic" is the SET-aligned model.
    """

    method: str = "hypercut"
    batch: int = 1
    seed: int = 0
    beam: BeamOptions = field(default_factory=BeamOptions)
    sa_iterations: int = 20_000
    estimate: str = "analytic"


def plan_graph(graph: Graph, target: Target, options: PlanOptions, **params: Any) -> MeshPlan:
    """Plan a graph on a mesh target; `params` override MeshParams fields (e.g. elem_bytes)."""
    if options.method not in METHODS:
        raise NpuccError(f"unknown search '{options.method}' (one of {', '.join(METHODS)})")
    if options.estimate not in ESTIMATES:
        raise NpuccError(f"unknown estimate '{options.estimate}' (one of {', '.join(ESTIMATES)})")
    if target.cores < 2:
        raise NpuccError(f"target '{target.name}' is not a mesh")
    for name, value in (
        ("batch", options.batch),
        ("beam width", options.beam.width),
        ("beam iterations", options.beam.max_iterations),
        ("SA iterations", options.sa_iterations),
    ):
        if value < 1:
            raise NpuccError(f"{name} must be positive, got {value}")
    mesh = MeshParams.from_target(target, **params)
    wl = workload_from_graph(graph, options.batch)
    start = time.perf_counter()
    execution = ExecCostModel(graph, target) if options.estimate == "exec" else None
    if options.method == "hypercut":
        beam = BeamOptions(**{**_fields(options.beam), "seed": options.seed})
        price = None if execution is None else execution.best_edp
        steps = BeamSearch(wl, mesh, beam, price).run()
    elif options.method == "sa":
        steps = anneal(wl, mesh, AnnealOptions(iterations=options.sa_iterations, seed=options.seed))
    elif options.method == "layer-sequential":
        steps = layer_sequential(wl, mesh)
    else:
        steps = layer_pipelined(wl, mesh)
    offchip = execution.refine_offchip(steps) if execution is not None else frozenset()
    search_s = time.perf_counter() - start
    analytic = evaluate(mesh, wl, steps)
    cost = analytic if execution is None else execution.evaluate(steps, offchip)
    return MeshPlan(
        wl, mesh.rows, mesh.cols, steps, options.method, cost, analytic,
        options.estimate, search_s, offchip,
    )  # fmt: skip


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


@register
@dataclass
class HypercutPass(Pass):
    """Inter-layer scheduling on a mesh: choose steps, sub-grids and batch splits."""

    name: ClassVar[str] = "hypercut"
    search: str = "hypercut"  # hypercut | sa | layer-sequential | layer-pipelined
    batch: int = 1
    seed: int = 0
    beam_width: int = 256
    max_iterations: int = 2048
    k_max: int = 6
    epsilon: float = 0.1
    sa_iterations: int = 20_000

    def run(self, ir: Graph, ctx: CompileContext) -> Graph | PlannedGraph:
        """Plan `ir` on the target's mesh; a single-core target needs no plan."""
        if ctx.target.cores == 1:
            return ir
        # NOTE: compile options (npucc.compile / the CLI) override the pass's own fields.
        opt = ctx.options
        beam = BeamOptions(
            width=opt.get("beam_width", self.beam_width),
            max_iterations=self.max_iterations,
            k_max=self.k_max,
            epsilon=self.epsilon,
        )
        options = PlanOptions(
            opt.get("search", self.search),
            opt.get("batch", self.batch),
            opt.get("seed", self.seed),
            beam,
            self.sa_iterations,
            estimate="exec",  # this plan is lowered and run: price what will execute
        )
        plan = plan_graph(ir, ctx.target, options)
        cost, analytic = plan.cost, plan.analytic
        ctx.stats["hypercut"] = {
            "method": options.method,
            "search_s": plan.search_s,
            "energy_pj": cost.energy_pj,
            "latency_cycles": cost.latency_cycles,
            "analytic_energy_pj": analytic.energy_pj,
            "analytic_latency_cycles": analytic.latency_cycles,
        }
        return PlannedGraph(ir, plan)
