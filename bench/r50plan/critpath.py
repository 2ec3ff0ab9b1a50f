"""The critical path of a lowered plan's mesh timing, tallied by what its nodes do and by layer.

Lowers and schedules a pickled (graph, plan) (as bench/meshfloor/nocreads.py does), times the
mesh DAG, and walks back from the last finish: at each node, the predecessor whose finish (plus
its edge's latency) set the start (a data or cross-core edge before one in the same pipe), or
none (start 0). Each node on the path counts its cycles by kind (a DDR copy, a NoC copy, CUBE,
MTE1, VECTOR, other), its wait for the DDR channel, and the latency of the cross-core flag it
waited for; per layer the same. The tallies sum to the makespan.

    python bench/r50plan/critpath.py PLAN.pkl [model] [batch] [platform]
"""

import collections
import sys

from lowered import planned

from npucc.ir.isa import Copy, DdrRef, NocCopy
from npucc.ir.scheduled_program import mesh_timing_dag
from npucc.passes import CompileContext, PassManager

start_at, target, later = planned(sys.argv)
upto = [p.name for p in later].index("schedule") + 1
ctx = CompileContext(target)
sched = PassManager(later[:upto]).run(start_at, ctx)
prog = sched.program
replays = [r for _, r in sched.schedules]
dag, _ = mesh_timing_dag(prog, replays)
info = [(c, node) for c, r in enumerate(replays) for node in r.nodes]  # per dag node
start, finish = dag.times(target)
makespan = max(finish)
print("makespan", makespan, "predicted", ctx.stats["predicted_makespan"], flush=True)
preds = [[] for _ in dag.cycles]
for u, succ in enumerate(dag.succs):
    for w, lat in succ:
        preds[w].append((u, lat))
lname = {i: layer.name.split("@")[0] for i, layer in enumerate(prog.layers)}


def kind(node) -> str:
    """What a node does, for the tally."""
    ins = node.instr
    if isinstance(ins, NocCopy):
        return f"NoC copy ({node.pipe})"
    if isinstance(ins, Copy) and (isinstance(ins.src, DdrRef) or isinstance(ins.dst, DdrRef)):
        return f"DDR copy ({node.pipe})"
    return node.pipe or "none"


by_kind = collections.Counter()
by_layer = collections.defaultdict(collections.Counter)
cores_on = collections.Counter()
v = max(range(len(finish)), key=finish.__getitem__)
t = makespan
while v is not None:
    c, node = info[v]
    name = lname.get(node.layer, "-")
    wait = finish[v] - start[v] - dag.cycles[v]  # the DDR channel's
    own = dag.cycles[v]
    k = kind(node)
    by_kind[k] += own
    by_kind["channel wait"] += wait
    by_layer[name][k] += own
    by_layer[name]["channel wait"] += wait
    cores_on[c] += own + wait
    best, cause, lat_best = None, None, 0
    for u, lat in preds[v]:
        if finish[u] + lat == start[v]:
            same = dag.pipes[u] is not None and dag.pipes[u] == dag.pipes[v]
            k2 = "pipe" if same else ("flag" if info[u][0] != c else "dep")
            if best is None or (k2 != "pipe" and cause == "pipe"):
                best, cause, lat_best = u, k2, lat
    if best is None:
        by_kind["start gap"] += start[v]
        by_layer[name]["start gap"] += start[v]
        break
    if lat_best:
        by_kind[f"{cause} latency"] += lat_best
        by_layer[name][f"{cause} latency"] += lat_best
    v = best
total = sum(by_kind.values())
print(f"critical path tallied {total:,} of {makespan:,}")
for k, n in by_kind.most_common():
    print(f"  {k:24s} {n:>10,} {n / makespan:6.1%}")
print("busiest cores on the path:", ", ".join(f"{c}: {n:,}" for c, n in cores_on.most_common(6)))
kinds = [k for k, _ in by_kind.most_common()]
print("| layer | on the path | " + " | ".join(kinds) + " |")
print("|" + "---|" * (len(kinds) + 2))
for name, cnt in sorted(by_layer.items(), key=lambda x: -sum(x[1].values())):
    print(f"| {name} | {sum(cnt.values()):,} | " + " | ".join(f"{cnt[k]:,}" for k in kinds) + " |")
