import pickle
import sys

import onnx

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.compiler import pipeline
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

target = load_target("mesh8x8")
passes = pipeline(CompileOptions(target="mesh8x8"))
split = [p.name for p in passes].index("hypercut")
graph = PassManager(passes[:split]).run(onnx.load("/tmp/r50rand.onnx"), CompileContext(target))
for pkl in sys.argv[1:]:
    plan = pickle.load(open(pkl, "rb"))
    cost = ExecCostModel(graph, target).evaluate(plan.steps, plan.offchip)
    print(
        pkl,
        len(plan.steps),
        "saved",
        plan.cost.latency_cycles,
        "now",
        cost.latency_cycles,
        f"energy {cost.energy_pj:.5g}",
        f"edp {cost.edp:.5g}",
        flush=True,
    )
