"""Planning API and the `hypercut` pass: Graph -> PlannedGraph (the graph and its MeshPlan).

On top of the backend's planning stages: the searches (`backend.hypercut`) take a price
function, the execution-faithful estimator (`backend.estimate`, which lowers layers to profile
them) supplies it, and this module joins the two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from npucc.backend.hypercut.workload import graph_batch, workload_from_graph
from npucc.backend.lower.blocking import drop_candidates
from npucc.errors import NpuccError
from npucc.gcpause import gc_paused
from npucc.ir.graph import Graph
from npucc.ir.plan import Cost, Group, MeshPlan, PlannedGraph, Rect, Step
from npucc.options import SEARCHES, STARTS, Start
from npucc.passes import CompileContext, IRType, Pass
from npucc.target import Target

if TYPE_CHECKING:
    from npucc.backend.hypercut.beam import BeamOptions

# NOTE: the searches and their estimate (hypercut's beam, baselines and SET model, kahypar,
# backend.estimate) are imported by the functions that plan a mesh: a one-core compile, which
# gets `single_core_plan`, does not load them (MobileNet v2: ~20 ms of start-up)

METHODS = SEARCHES
ESTIMATES = ("exec", "set")  # what the lowering will execute | the SET-aligned comparison


def _beam_options(**fields: Any) -> BeamOptions:
    from npucc.backend.hypercut.beam import BeamOptions

    return BeamOptions(**fields)


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """What the planner may be told: method, batch, seed, the search budgets and the estimate.

    The plan's workload is `batch` samples, a sample being 1/`graph_batch` of the graph's
    work (a model imported at batch 1 and planned for 64 is the SET comparison's analytic case).

    `estimate="exec"` (what compiling uses) prices plans as the lowering will execute them
    (exec_cost): every search compares plans by it. "set" is the SET-aligned analytic model,
    the comparison with SET's results (`npucc bench hypercut --model set`).
    """

    method: str = "hypercut"
    batch: int | None = None  # None: the batch the graph carries (graph_batch)
    seed: int = 0
    beam: BeamOptions = field(default_factory=_beam_options)
    sa_iterations: int = 20_000
    estimate: str = "exec"
    sa_goal: float = 0.0  # SA stops at the first plan priced at or below this EDP


def plan_graph(
    graph: Graph,
    target: Target,
    options: PlanOptions,
    memo: dict[Any, Any] | None = None,
    **params: Any,
) -> MeshPlan:
    """Plan a graph on a mesh target; `memo`: the compile's (CompileContext.memo), which the
    estimate's profiles share with the lowering; `params` override MeshParams fields (e.g.
    elem_bytes)."""
    from npucc.backend.estimate.exec_cost import ExecCostModel
    from npucc.backend.hypercut.baselines import (
        AnnealOptions,
        anneal,
        layer_pipelined,
        layer_sequential,
    )
    from npucc.backend.hypercut.beam import BeamOptions, BeamSearch
    from npucc.backend.hypercut.set_model import MeshParams, evaluate

    if options.method not in METHODS:
        raise NpuccError(f"unknown search '{options.method}' (one of {', '.join(METHODS)})")
    if options.estimate not in ESTIMATES:
        raise NpuccError(f"unknown estimate '{options.estimate}' (one of {', '.join(ESTIMATES)})")
    if target.cores < 2:
        raise NpuccError(f"target '{target.name}' is not a mesh")
    for name, value in (
        ("batch", 1 if options.batch is None else options.batch),
        ("beam width", options.beam.width),
        ("beam iterations", options.beam.max_iterations),
        ("SA iterations", options.sa_iterations),
    ):
        if value < 1:
            raise NpuccError(f"{name} must be positive, got {value}")
    for name in options.beam.starts:
        if name not in STARTS:
            raise NpuccError(f"unknown start '{name}' (one of {', '.join(STARTS)})")
    mesh = MeshParams.from_target(target, **params)
    wl = workload_from_graph(graph, options.batch)
    start = time.perf_counter()
    execution = None
    if options.estimate == "exec":
        execution = ExecCostModel(graph, target, {} if memo is None else memo)
    # NOTE: price None is the SET-aligned model (with its incremental step-cost memos); the
    # beam memoises its prices itself, the baselines revisit plans through `cache`
    exact = None if execution is None else execution.best_edp
    price = None if exact is None else cache(exact)
    reported: dict[tuple[Step, ...], tuple[frozenset[str], Cost]] = {}

    def report(steps: tuple[Step, ...]) -> tuple[frozenset[str], Cost]:
        """What goes through DDR and the cost a plan is reported at (memoised)."""
        value = reported.get(steps)
        if value is None:
            assert execution is not None
            offchip = execution.refine_offchip(steps)
            value = reported[steps] = (offchip, execution.evaluate(steps, offchip))
        return value

    # NOTE: the cyclic collector paused (also when called outside the pass manager, which
    # pauses it): its passes over what the estimate keeps (memos, the priced plans' prefixes)
    # cost more than the rest of the search (light ResNet-50 mesh8x8, `plan_graph` CPU s on
    # the loaded machine: 25.8 with it, 16.5 without)
    with gc_paused():
        if options.method == "hypercut":
            beam = BeamOptions(**{**_fields(options.beam), "seed": options.seed})
            judge = None if execution is None else (lambda steps: report(steps)[1].edp)
            steps = BeamSearch(wl, mesh, beam, exact, judge).run()
        elif options.method == "sa":
            anneal_options = AnnealOptions(
                iterations=options.sa_iterations, seed=options.seed, goal=options.sa_goal
            )
            steps = anneal(wl, mesh, anneal_options, price)
        elif options.method == "layer-sequential":
            steps = layer_sequential(wl, mesh, price)
        else:
            steps = layer_pipelined(wl, mesh, price)
        offchip, cost = (frozenset(), None) if execution is None else report(steps)
    if memo is not None:
        drop_candidates(memo)  # NOTE: the profiles' blocking searches are done
    search_s = time.perf_counter() - start
    analytic = evaluate(mesh, wl, steps)
    cost = analytic if cost is None else cost
    return MeshPlan(
        wl, mesh.rows, mesh.cols, steps, options.method, cost, analytic,
        options.estimate, search_s, offchip,
    )  # fmt: skip


def _fields(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


def single_core_plan(graph: Graph) -> MeshPlan:
    """The plan of a one-core target: one step, every layer in one group on the only core.

    NOTE: there is nothing to choose, so nothing is priced (zero costs) and no time is spent.
    """
    wl = workload_from_graph(graph)
    group = Group(tuple(range(len(wl.layers))), Rect(0, 0, 1, 1))
    return MeshPlan(wl, 1, 1, (Step((group,)),), "single-core", Cost(), Cost())


@dataclass(frozen=True, slots=True)
class HypercutPass(Pass):
    """Inter-layer scheduling on a mesh: choose steps, sub-grids and batch splits."""

    name: ClassVar[str] = "hypercut"
    input_ir: ClassVar[IRType] = Graph
    output_ir: ClassVar[IRType] = PlannedGraph
    search: str = "hypercut"  # hypercut | sa | layer-sequential | layer-pipelined
    seed: int = 0
    beam_width: int = 256
    max_iterations: int = 2048
    k_max: int = 6
    epsilon: float = 0.1
    sa_iterations: int = 20_000
    starts: tuple[Start, ...] = STARTS  # where HyperCut's final descent starts (BeamOptions)

    def run(self, ir: Graph, ctx: CompileContext) -> PlannedGraph:
        """Plan `ir` on the target's mesh; a single-core target gets the trivial plan."""
        if ctx.target.cores == 1:
            return PlannedGraph(ir, single_core_plan(ir))
        beam = _beam_options(
            width=self.beam_width,
            max_iterations=self.max_iterations,
            k_max=self.k_max,
            epsilon=self.epsilon,
            starts=self.starts,
        )
        # NOTE: the graph carries its batch (CompileOptions.batch fixes the inputs' leading
        # dimension on import): the plan's workload is that batch, so its sub-batch splits are
        # splits of what the lowering executes.
        options = PlanOptions(
            self.search,
            graph_batch(ir),
            self.seed,
            beam,
            self.sa_iterations,
        )
        plan = plan_graph(ir, ctx.target, options, ctx.memo)
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
