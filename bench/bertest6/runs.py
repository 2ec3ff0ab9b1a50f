"""Per run of a pickled plan: the estimate's end against the program's end of that layer run
(meshb13's .diag pickle of the same plan, layer runs by name)."""

import builtins
import collections
import pickle
import sys

from npucc.backend.estimate import list_schedule as ls
from npucc.backend.estimate.exec_cost import ExecCostModel, LayerRun
from npucc.backend.lower.subbatch import loop_parts
from npucc.target import load_target

pkl, diag = sys.argv[1], sys.argv[2]
graph, plan = pickle.load(open(pkl, "rb"))
target = load_target("mesh8x8")
m = ExecCostModel(graph, target)
parts = loop_parts(graph, plan.steps, m.splits)
onchip = m.onchip(plan.steps, plan.offchip, parts)
priced = m._priced(plan.steps, parts, onchip)
runs = m._linked(priced)
last = {}
real_max = builtins.max


def spy(*a, **k):
    r = real_max(*a, **k)
    if len(a) == 1 and isinstance(a[0], list) and len(a[0]) == len(runs) + 1:
        last["v"] = a[0]
    return r


ls.max = spy
lat = ls.schedule(target, runs)
del ls.max
ends = last["v"][1:]
print("estimate", lat)
d = pickle.load(open(diag, "rb"))
ex_end = collections.defaultdict(int)
ex_start = {}
for v, x in enumerate(d["nodeinfo"]):
    nm = x[3]
    ex_end[nm] = max(ex_end[nm], d["finish"][v])
    if x[2] is not None:
        ex_start[nm] = min(ex_start.get(nm, 1 << 60), d["start"][v])
print("exec makespan", max(d["finish"]))
rows = []
for item, e, r in zip(priced, ends, runs, strict=True):
    if isinstance(item, LayerRun):
        nm = "stage"
    else:
        p = item[0]
        nm = graph.layers[p.layer].name
        cand = [k for k in ex_end if k == nm or k.startswith(f"{nm}@{p.part}/")]
        nm = cand[0] if cand else nm + "?"
    x = ex_end.get(nm, 0)
    rows.append(
        (
            nm,
            e,
            x,
            ex_start.get(nm, 0),
            r.cost.lead_held,
            r.cost.rest_held,
            len([c for a, b in r.spans for c in range(a, b)]),
        )
    )
prev = 0
for nm, e, x, s, lh, rh, nc in rows:
    print(
        f"{nm:14s} est {e:9d} exec {x:9d} xstart {s:9d} diff {e - x:+9d}"
        f" step {e - x - prev:+8d} lead {lh:7d} rest {rh:7d} cores {nc}"
    )
    prev = e - x
