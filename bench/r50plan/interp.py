"""Lower a pickled (graph, plan) of the batch-symbolic model and interpret it timing-only.

python bench/r50plan/interp.py PLAN.pkl [model] [batch] [platform]
"""

import pickle
import sys
import time
from dataclasses import replace

import onnx

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import hypercut_sweep as hs

from npucc.compiler import Program, batch_input_shapes, pipeline
from npucc.ir.plan import PlannedGraph
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

args = sys.argv[2:] + ["resnet50", "8", "mesh8x8"][len(sys.argv) - 2 :]
model_name, batch, platform = args[0], int(args[1]), args[2]
graph, plan = pickle.load(open(sys.argv[1], "rb"))
model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
target = load_target(platform)
options = replace(
    CompileOptions(target=platform), input_shapes=batch_input_shapes(model, None, batch)
)
passes = pipeline(options)
later = passes[[p.name for p in passes].index("hypercut") + 1 :]
t0 = time.process_time()
ctx = CompileContext(target)
gen = PassManager(later).run(PlannedGraph(graph, plan), ctx)
program = Program(gen.stream, gen.image, target, gen.inputs, gen.outputs, ctx.stats)
t1 = time.process_time()
res = program.execute({}, check=False, timing_only=True)
rf = ctx.stats["roofline"]
print(
    f"est {plan.cost.latency_cycles:.0f} interpreted {res.makespan} predicted "
    f"{ctx.stats['predicted_makespan']} energy {res.energy:.4g} "
    f"edp {res.makespan * res.energy:.4g} ddr {rf['ddr_bytes']} "
    f"x{rf['ddr_bytes'] / rf['min_ddr_bytes']:.3f} eff {rf['efficiency']:.4f} "
    f"lower {t1 - t0:.1f} interpret {time.process_time() - t1:.1f} CPU s",
    flush=True,
)
