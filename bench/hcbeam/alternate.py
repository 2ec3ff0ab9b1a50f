"""Does alternating tune_loops and the Refiner leave the refined pick's local optimum?

python bench/hcbeam/alternate.py GRAPH.pkl PLATFORM PLAN.pkl (a pickled tuple of steps)
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
from npucc.target import load_target

graph = pickle.load(open(sys.argv[1], "rb"))[0]
target = load_target(sys.argv[2])
plan = pickle.load(open(sys.argv[3], "rb"))
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


with gc_paused():
    t = time.process_time()
    print(f"start {edp(plan):.4e}", flush=True)
    refiner = Refiner(wl, mesh.whole, splits, edp)
    for rnd in range(4):
        tuned = tune_loops(plan, edp, splits)
        print(f"round {rnd} tuned {edp(tuned):.4e} cpu {time.process_time() - t:.1f}", flush=True)
        refined = refiner.run(tuned, 1000)
        print(
            f"round {rnd} refined {edp(refined):.4e} cpu {time.process_time() - t:.1f}", flush=True
        )
        if refined == plan:
            break
        plan = refined
    c = ex.evaluate(plan, ex.refine_offchip(plan))
    print(f"report {c.edp:.4e} lat {c.latency_cycles:.0f}", flush=True)
    pickle.dump(plan, open("/tmp/hcb/alternate.pkl", "wb"))
