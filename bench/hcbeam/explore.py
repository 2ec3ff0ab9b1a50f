"""HyperCut (width 8) on a pickled graph with K finalists, each step of `finish` timed and priced.

python bench/hcbeam/explore.py GRAPH.pkl PLATFORM K [PLAN.pkl ...]: GRAPH.pkl holds (graph, plan)
before the hypercut pass; the PLAN pickles' plans are priced by the same estimate (best_edp and
the reported evaluate with refine_offchip).
"""

import pickle
import sys
import time

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch, tune_loops
from npucc.backend.hypercut.refine import Refiner
from npucc.backend.hypercut.set_model import MeshParams
from npucc.backend.hypercut.workload import workload_from_graph
from npucc.gcpause import gc_paused
from npucc.target import load_target


def cpu() -> float:
    """CPU seconds of this process."""
    return time.process_time()


def shape(plan) -> str:
    """Steps and sub-batch counts."""
    return f"{len(plan)} steps nsub {sorted({s.nsub for s in plan})}"


graph = pickle.load(open(sys.argv[1], "rb"))[0]
target = load_target(sys.argv[2])
k = int(sys.argv[3])
ex = ExecCostModel(graph, target, {})
wl = workload_from_graph(graph, None)


def report(plan):
    """The reported estimate of a plan (cost)."""
    return ex.evaluate(plan, ex.refine_offchip(plan))


with gc_paused():
    for f in sys.argv[4:]:
        plan = pickle.load(open(f, "rb"))[1]
        t = cpu()
        best = ex.best_edp(plan.steps)
        c = report(plan.steps)
        print(
            f,
            shape(plan.steps),
            f"best_edp {best:.4e} report {c.edp:.4e} lat {c.latency_cycles:.0f}",
            f"cpu {cpu() - t:.1f}",
            flush=True,
        )
    t0 = cpu()
    search = BeamSearch(
        wl,
        MeshParams.from_target(target),
        BeamOptions(width=8, finalists=k),
        ex.best_edp,
        lambda p: report(p).edp,
    )
    finish = search.finish
    fin = {}
    search.finish = lambda plans: fin.setdefault("plans", plans)
    search.run()
    print(f"beam cpu {cpu() - t0:.1f}", flush=True)
    edp = search.edp
    refiner = Refiner(wl, search.params.whole, search.splits, edp)
    rows = []
    for j, p in enumerate(fin["plans"]):
        t = cpu()
        tuned = tune_loops(p, edp, search.splits)
        t1 = cpu()
        refined = refiner.run(tuned, 1000)
        t2 = cpu()
        c = report(refined)
        t3 = cpu()
        ct = report(tuned)
        print(
            f"finalist {j}: {shape(p)} edp {edp(p):.4e} | tuned {shape(tuned)} {edp(tuned):.4e} "
            f"rep {ct.edp:.4e} ({t1 - t:.1f} s) | refined {shape(refined)} {edp(refined):.4e} "
            f"({t2 - t1:.1f} s) rep {c.edp:.4e} lat {c.latency_cycles:.0f} ({t3 - t2:.1f} s)",
            flush=True,
        )
        rows.append((c.edp, j, refined))
    print(f"total cpu {cpu() - t0:.1f}", flush=True)
    pickle.dump(rows, open(f"/tmp/hcb/explore_{sys.argv[2]}_{k}.pkl", "wb"))
