"""A pickled (graph, plan): the estimate's per-run ends, the program's per-layer ends.

NOTE: the program's layer numbers are the lowering graph's (sub-batch parts and stagings
renumber them): match runs by start, cores and DDR bytes (the .exec pickle), not by name.
"""

import builtins
import collections
import pickle
import sys
import time
from dataclasses import replace

sys.path.insert(0, "bench")
import hypercut_sweep as hs
import onnx

from npucc.backend.estimate import list_schedule as ls
from npucc.backend.estimate.exec_cost import ExecCostModel, LayerRun
from npucc.backend.lower.subbatch import loop_parts
from npucc.compiler import batch_input_shapes, pipeline
from npucc.ir import scheduled_program as sp
from npucc.ir.plan import PlannedGraph
from npucc.ir.scheduled_program import node_ddr_bytes
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target
from npucc.target.cost import sync_cycles
from npucc.target.timing import TimingDag

pkl, model_name, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
lower = len(sys.argv) > 4 and sys.argv[4] == "lower"
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
    if len(a) == 1 and isinstance(a[0], list):
        last["v"] = a[0]
    return r


ls.max = spy
t = time.process_time()
lat = ls.schedule(target, runs)
del ls.max
ends = last["v"][1:]
print("estimate", lat, "plan cost", plan.cost.latency_cycles, "cpu", time.process_time() - t)
names = []
for item in priced:
    if isinstance(item, LayerRun):
        names.append(("stage", -1, 0))
    else:
        p = item[0]
        names.append((graph.layers[p.layer].name, p.layer, p.part))
est_by_layer = {}
for (_nm, li, _part), e, _r in zip(names, ends, runs, strict=False):
    est_by_layer[li] = max(est_by_layer.get(li, 0), e)
pickle.dump(
    (names, ends, [(r.cost.lead_held, r.cost.rest_held, r.cost.after, r.spans) for r in runs]),
    open(pkl + ".est", "wb"),
)
if not lower:
    sys.exit()
model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
options = CompileOptions(target="mesh8x8")
passes = pipeline(replace(options, input_shapes=batch_input_shapes(model, None, batch)))
split = [p.name for p in passes].index("hypercut")
cap = {}
orig = sp.mesh_makespan


def grab(program, replays):
    cap["p"], cap["r"] = program, replays
    return orig(program, replays)


sp.mesh_makespan = grab
ctx = CompileContext(target)
t = time.process_time()
gen = PassManager(passes[split + 1 :]).run(PlannedGraph(graph, plan), ctx)
print(
    "lower cpu", time.process_time() - t, "predicted", ctx.stats["predicted_makespan"], flush=True
)
program, replays = cap["p"], cap["r"]
from npucc.ir.scheduled_program import PIPES as P  # noqa: E402


def timeit(nobytes):
    dag = TimingDag()
    base = []
    info = []
    for c, r in enumerate(replays):
        off = len(dag.cycles)
        base.append(off)
        for node in r.nodes:
            pipe = None if node.pipe is None else (c, P.index(node.pipe))
            dag.node(node.cycles, pipe, 0 if nobytes else node_ddr_bytes(target, r, node))
            info.append((c, node.layer, node.pipe, node.op, node_ddr_bytes(target, r, node)))
        dag.in_pipe_order(off + v for v in r.order)
        for u, v in r.edges():
            dag.edge(off + u, off + v)
    coords = [(core.row, core.col) for core in program.cores]
    for sc, s, dc, d in program.cross_edges:
        dag.edge(base[sc] + s, base[dc] + d, sync_cycles(target, coords[sc], coords[dc]))
    start, finish = dag.times(target)
    return start, finish, info, base


start, finish, info, base = timeit(False)
print("makespan", max(finish))
ex_end = collections.defaultdict(int)
ex_start = {}
for v, (_c, li, pipe, _op, _nb) in enumerate(info):
    if li < 0:
        continue
    ex_end[li] = max(ex_end[li], finish[v])
    if pipe is not None:
        ex_start[li] = min(ex_start.get(li, 1 << 60), start[v])
pickle.dump(
    (dict(ex_end), ex_start, info, start, finish, base, [r.order for r in replays]),
    open(pkl + ".exec", "wb"),
)
prev = 0
for li in sorted(est_by_layer, key=lambda l: ex_end.get(l, 0)):
    if li < 0:
        continue
    e, x = est_by_layer[li], ex_end.get(li, 0)
    print(
        f"{graph.layers[li].name:32s} {li:4d} est {e:9d} exec {x:9d}"
        f" start {ex_start.get(li, 0):9d} diff {e - x:+9d} step {e - x - prev:+8d}"
    )
    prev = e - x
