"""The estimate's on-chip placement against the lowering's on a pickled (graph, plan): the keys
kept by one only or placed apart, and whether the lowering's placement without `positions`
(each tensor's life whole) is the estimate's (`python bench/bertest7/onchip.py PLAN.pkl`)."""

import pickle
import sys

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.hypercut.onchip_plan import plan_onchip
from npucc.backend.lower import plan_placement, plan_tensors
from npucc.backend.lower.subbatch import part_loops, part_spans, slice_plan
from npucc.ir.graph_schema import VIEW_OPS
from npucc.target import load_target

graph, plan = pickle.load(open(sys.argv[1], "rb"))[:2]
target = load_target("mesh8x8")
model = ExecCostModel(graph, target)
estimate = model.onchip(plan.steps, plan.offchip)
parts = slice_plan(graph, plan).parts
lowered = plan_tensors(plan, graph, target, parts)
for key in sorted(set(estimate) | set(lowered)):
    a, b = estimate.get(key), lowered.get(key)
    if a is None or b is None or (a.at, a.chunk, a.homes) != (b.at, b.chunk, b.homes):
        print(key, "estimate", a and (a.at, a.chunk, len(a.homes), a.live),
              "lowering", b and (b.at, b.chunk, len(b.homes), b.live))  # fmt: skip
placement = plan_placement(plan, target)
cores = [None if layer.op in VIEW_OPS else placement[layer.name] for layer in graph.layers]
n = len(graph.layers)
whole = plan_onchip(graph, cores, target, plan.offchip, part_loops(parts, n), part_spans(parts, n))
same = {k: (w.at, w.homes) for k, w in whole.items()} == {
    k: (w.at, w.homes) for k, w in estimate.items()
}
print("lowering without positions is the estimate:", same)
