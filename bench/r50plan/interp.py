"""Lower a pickled (graph, plan) of the batch-symbolic model and interpret it timing-only.

python bench/r50plan/interp.py PLAN.pkl [model] [batch] [platform]
"""

import sys
import time

from lowered import planned

from npucc.compiler import Program
from npucc.passes import CompileContext, PassManager

start_at, target, later = planned(sys.argv)
plan = start_at.plan
t0 = time.process_time()
ctx = CompileContext(target)
gen = PassManager(later).run(start_at, ctx)
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
