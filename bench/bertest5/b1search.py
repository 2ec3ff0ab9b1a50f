"""plan_graph alone on light ResNet-50 b1 mesh8x8 (default beam): CPU s."""

import time

import onnx

import npucc
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.compiler import pipeline
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

target = load_target("mesh8x8")
passes = pipeline(CompileOptions(target="mesh8x8"))
split = [p.name for p in passes].index("hypercut")
graph = PassManager(passes[:split]).run(onnx.load("/tmp/r50rand.onnx"), CompileContext(target))
t = time.process_time()
plan = plan_graph(graph, target, PlanOptions(method="hypercut"))
print(
    npucc.__file__,
    "search cpu",
    round(time.process_time() - t, 2),
    len(plan.steps),
    plan.cost.latency_cycles,
    plan.cost.energy_pj,
    flush=True,
)
