"""Plan the batch-symbolic model compiled at a batch by one search method; pickle (graph, plan).

python bench/r50plan/plan.py OUT.pkl [method] [model] [batch] [platform]
"""

import pickle
import sys
import time

from lowered import compile_passes

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.passes import CompileContext, PassManager

out = sys.argv[1]
method, model_name, batch, platform = (
    sys.argv[2:] + ["layer-sequential", "resnet50", "8", "mesh8x8"][len(sys.argv) - 2 :]
)[:4]
model, target, passes = compile_passes(model_name, int(batch), platform)
split = [p.name for p in passes].index("hypercut")
graph = PassManager(passes[:split]).run(model, CompileContext(target))
t0 = time.process_time()
beam = {"beam": BeamOptions(width=8)} if method == "hypercut" else {}
plan = plan_graph(graph, target, PlanOptions(method=method, **beam))
print(
    f"{method}: {len(plan.steps)} steps, est {plan.cost.latency_cycles:.0f} "
    f"edp {plan.cost.edp:.4g} "
    f"search {time.process_time() - t0:.1f} CPU s",
    flush=True,
)
print(plan.to_text())
pickle.dump((graph, plan), open(out, "wb"))
