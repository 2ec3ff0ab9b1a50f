"""Where HyperCut's pick comes from on a pickled graph: the all-temporal plan tuned, then refined
move by move (each improvement printed), against a saved plan's price.

python bench/hcbeam/focus.py GRAPH.pkl PLATFORM BUDGET [PLAN.pkl]
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
budget = int(sys.argv[3])
ex = ExecCostModel(graph, target, {})
wl = workload_from_graph(graph, None)
mesh = MeshParams.from_target(target)
splits = batch_splits(wl.batch)
memo: dict = {}


def edp(plan):
    """best_edp, memoised."""
    if plan not in memo:
        memo[plan] = ex.best_edp(plan)
    return memo[plan]


def shape(plan) -> str:
    """Steps, sub-batch counts and loops."""
    return (
        f"{len(plan)} steps nsub {sorted({s.nsub for s in plan})} loops {sum(s.loop for s in plan)}"
    )


class Traced(Refiner):
    """A Refiner that prints each improvement."""

    def run(self, plan, budget):
        current, priced, s, quiet = self.edp(plan), 0, 0, 0
        while priced < budget and quiet <= len(plan):
            s %= len(plan)
            for child in self.moves(plan, s):
                priced += 1
                value = self.edp(child)
                if value < current:
                    plan, current, quiet = child, value, 0
                    print(f"  move {priced} at step {s}: {value:.4e} {shape(plan)}", flush=True)
                    break
                if priced >= budget:
                    break
            else:
                s, quiet = s + 1, quiet + 1
        print(f"  stopped after {priced} moves (quiet {quiet})", flush=True)
        return plan


with gc_paused():
    t = time.process_time()
    seq = tuple(Step((Group((i,), mesh.whole),)) for i in range(len(wl.layers)))
    tuned = tune_loops(seq, edp, splits)
    print(
        f"sequential {edp(seq):.4e} tuned {edp(tuned):.4e} {shape(tuned)} "
        f"cpu {time.process_time() - t:.1f}",
        flush=True,
    )
    refined = Traced(wl, mesh.whole, splits, edp).run(tuned, budget)
    c = ex.evaluate(refined, ex.refine_offchip(refined))
    print(
        f"refined {edp(refined):.4e} report {c.edp:.4e} lat {c.latency_cycles:.0f} "
        f"cpu {time.process_time() - t:.1f}",
        flush=True,
    )
    pickle.dump(refined, open("/tmp/hcb/focus_refined.pkl", "wb"))
    if len(sys.argv) > 4:
        main = pickle.load(open(sys.argv[4], "rb"))[1].steps
        print(f"saved plan {shape(main)} {edp(main):.4e}", flush=True)
        for s, (a, b) in enumerate(zip(main, refined, strict=False)):
            print(
                s,
                [g.layers for g in a.groups],
                a.nsub,
                a.loop,
                "|",
                [g.layers for g in b.groups],
                b.nsub,
                b.loop,
            )
