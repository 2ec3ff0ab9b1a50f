"""Plan the batch-symbolic model compiled at a batch by one search method; pickle (graph, plan).

python bench/r50plan/plan.py OUT.pkl [method] [model] [batch] [platform]
"""

import pickle
import sys
import time
from dataclasses import replace

import onnx

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import hypercut_sweep as hs

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.compiler import batch_input_shapes, pipeline
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

out = sys.argv[1]
method, model_name, batch, platform = (
    sys.argv[2:] + ["layer-sequential", "resnet50", "8", "mesh8x8"][len(sys.argv) - 2 :]
)[:4]
model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
target = load_target(platform)
passes = pipeline(
    replace(
        CompileOptions(target=platform), input_shapes=batch_input_shapes(model, None, int(batch))
    )
)
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
