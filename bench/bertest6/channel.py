"""Channel cycles per layer run: the estimate's (lead + rest held) against the program's
(meshb13's .diag pickle of the same plan: per DDR transfer its hold of the channel)."""

import collections
import pickle
import sys

from npucc.backend.estimate.exec_cost import ExecCostModel, LayerRun
from npucc.backend.lower.subbatch import loop_parts
from npucc.target import load_target

graph, plan = pickle.load(open(sys.argv[1], "rb"))
m = ExecCostModel(graph, load_target("mesh8x8"))
parts = loop_parts(graph, plan.steps, m.splits)
priced = m._priced(plan.steps, parts, m.onchip(plan.steps, plan.offchip, parts))
runs = m._linked(priced)
d = pickle.load(open(sys.argv[2], "rb"))
held = collections.Counter()
for _begin, h, _free, u in d["events"]:
    held[d["nodeinfo"][u][3]] += h
est = collections.Counter()
for item, r in zip(priced, runs, strict=True):
    if isinstance(item, LayerRun):
        name = "stage"
    else:
        p = item[0]
        name = graph.layers[p.layer].name + (f"@{p.part}/{p.parts}" if p.parts > 1 else "")
    est[name] += r.cost.lead_held + r.cost.rest_held
print("channel cycles: estimate", sum(est.values()), "program", sum(held.values()))
by = collections.Counter()
for name in est:
    loop = name.split("/")[1] if "@" in name else name if name == "stage" else "unsplit"
    by[loop] += est[name] - held.get(name, 0)
print("estimate - program by loop parts:", dict(by))
