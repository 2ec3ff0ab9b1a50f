"""Search MODEL at batch B on mesh8x8 (HyperCut width 8); pickle (graph, plan)."""

import pickle
import sys
import time
from dataclasses import replace

sys.path.insert(0, "bench")
import hypercut_sweep as hs
import onnx

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.compiler import batch_input_shapes, pipeline
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

model_name, batch, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
target = load_target("mesh8x8")
options = CompileOptions(target="mesh8x8")
passes = pipeline(replace(options, input_shapes=batch_input_shapes(model, None, batch)))
split = [p.name for p in passes].index("hypercut")
graph = PassManager(passes[:split]).run(model, CompileContext(target))
t = time.process_time()
plan = plan_graph(graph, target, PlanOptions(method="hypercut", beam=BeamOptions(width=8)))
print(
    "search",
    time.process_time() - t,
    len(plan.steps),
    sorted({s.nsub for s in plan.steps}),
    plan.cost.latency_cycles,
    plan.cost.edp,
    flush=True,
)
pickle.dump((graph, plan), open(out, "wb"))
