"""Other descents from the tuned all-temporal plan: does the Refiner's local optimum depend on
its scan (first improvement forward: today's)?

python bench/hcbeam/variants.py GRAPH.pkl PLATFORM MODE; MODE: best (the best move at each
step, not the first) | reverse (steps scanned last to first)
"""

import pickle
import sys
import time

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.hypercut.beam import batch_splits, tune_loops
from npucc.backend.hypercut.refine import Refiner
from npucc.backend.hypercut.set_model import MeshParams
from npucc.backend.hypercut.workload import workload_from_graph
from npucc.gcpause import gc_paused
from npucc.ir.plan import Group, Step
from npucc.target import load_target

graph = pickle.load(open(sys.argv[1], "rb"))[0]
target = load_target(sys.argv[2])
mode = sys.argv[3]
ex = ExecCostModel(graph, target, {})
wl = workload_from_graph(graph, None)
mesh = MeshParams.from_target(target)
splits = batch_splits(wl.batch)
memo: dict = {}


def edp(p):
    """best_edp, memoised."""
    if p not in memo:
        memo[p] = ex.best_edp(p)
    return memo[p]


def descend(refiner, plan, budget):
    """Today's loop with the scan `mode` asks for."""
    current, priced, quiet = edp(plan), 0, 0
    s = len(plan) - 1 if mode == "reverse" else 0
    while priced < budget and quiet <= len(plan):
        s %= len(plan)
        moves = list(refiner.moves(plan, s))
        priced += len(moves)
        best = min(moves, key=edp, default=None) if mode == "best" else None
        if mode != "best":
            best = next((m for m in moves if edp(m) < current), None)
        if best is not None and edp(best) < current:
            plan, current, quiet = best, edp(best), 0
        else:
            s, quiet = s + (-1 if mode == "reverse" else 1), quiet + 1
    print(f"  {priced} moves", flush=True)
    return plan


with gc_paused():
    t = time.process_time()
    seq = tuple(Step((Group((i,), mesh.whole),)) for i in range(len(wl.layers)))
    tuned = tune_loops(seq, edp, splits)
    print(f"tuned {edp(tuned):.4e} cpu {time.process_time() - t:.1f}", flush=True)
    plan = descend(Refiner(wl, mesh.whole, splits, edp), tuned, 3000)
    c = ex.evaluate(plan, ex.refine_offchip(plan))
    print(
        f"{mode} {len(plan)} steps {edp(plan):.4e} report {c.edp:.4e} lat {c.latency_cycles:.0f} "
        f"cpu {time.process_time() - t:.1f}",
        flush=True,
    )
    pickle.dump(plan, open(f"/tmp/hcb/variant_{mode}.pkl", "wb"))
