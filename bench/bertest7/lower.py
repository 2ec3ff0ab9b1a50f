"""Lower a pickled (graph, plan) through codegen: predicted makespan, energy, EDP (and
interpret it: `interp`)."""

import pickle
import sys
import time
from dataclasses import replace

sys.path.insert(0, "bench")
import hypercut_sweep as hs
import onnx

from npucc.compiler import Program, batch_input_shapes, pipeline
from npucc.ir.plan import PlannedGraph
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

pkl, model_name, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
interp = len(sys.argv) > 4 and sys.argv[4] == "interp"
graph, plan = pickle.load(open(pkl, "rb"))
target = load_target("mesh8x8")
model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
passes = pipeline(
    replace(CompileOptions(target="mesh8x8"), input_shapes=batch_input_shapes(model, None, batch))
)
split = [p.name for p in passes].index("hypercut")
ctx = CompileContext(target)
t0 = time.process_time()
gen = PassManager(passes[split + 1 :]).run(PlannedGraph(graph, plan), ctx)
pred, e = ctx.stats["predicted_makespan"], ctx.stats["energy_pj"]
est = plan.cost.latency_cycles
print(
    f"{pkl} steps {len(plan.steps)} nsub {sorted({s.nsub for s in plan.steps})} est {est:.0f}"
    f" pred {pred} err {est / pred - 1:+.2%} energy {e:.5g} edp {pred * e:.4g}"
    f" est_edp {plan.cost.edp:.4g} lower {time.process_time() - t0:.1f} CPU s",
    flush=True,
)
if interp:
    program = Program(gen.stream, gen.image, target, gen.inputs, gen.outputs, ctx.stats)
    t1 = time.process_time()
    res = program.execute({}, check=False, timing_only=True)
    print(
        f"interp {res.makespan} energy {res.energy:.5g} edp {res.makespan * res.energy:.4g}"
        f" cpu {time.process_time() - t1:.1f}",
        flush=True,
    )
