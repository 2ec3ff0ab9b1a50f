"""sqz64: HyperCut's search (width 8) on SqueezeNet b64 mesh8x8 with the EDPs of its last
stages printed: the beam's best, each `tune_loops` result, the refinement's, the final cost;
the plan pickled to ARGV[1]."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plans import graph_and_target  # noqa: E402

from npucc.backend.hypercut import beam  # noqa: E402
from npucc.backend.hypercut.beam import BeamOptions  # noqa: E402
from npucc.backend.hypercut.refine import Refiner  # noqa: E402
from npucc.backend.planner import PlanOptions, plan_graph  # noqa: E402

tune, refine = beam.tune_loops, Refiner.run


def shape(plan) -> str:
    """Steps, their nsubs and loop flags in short."""
    return f"{len(plan)} steps " + " ".join(
        f"{len(s.groups)}{'L' if s.loop else ''}{s.nsub}" for s in plan
    )


def traced_tune(plan, edp, splits, loop_costs=None):
    """`tune_loops`, printing its start and result EDPs."""
    out = tune(plan, edp, splits, loop_costs)
    print(f"tune_loops {edp(plan):.5g} -> {edp(out):.5g}: {shape(out)}", flush=True)
    return out


def traced_refine(self, plan, budget):
    """`Refiner.run`, printing its start and result EDPs."""
    out = refine(self, plan, budget)
    print(f"refine {self.edp(plan):.5g} -> {self.edp(out):.5g}: {shape(out)}", flush=True)
    return out


beam.tune_loops, Refiner.run = traced_tune, traced_refine
graph, target, _ = graph_and_target()
plan = plan_graph(graph, target, PlanOptions(method="hypercut", beam=BeamOptions(width=8)))
print("final", plan.cost, shape(plan.steps), flush=True)
Path(sys.argv[1]).write_bytes(pickle.dumps({"hypercut": plan}))
