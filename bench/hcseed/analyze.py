"""hcseed diagnosis: price pickled plans with one estimate; optionally re-run the beam
(python bench/hcseed/analyze.py MODEL PLAT B PICKLE [beam])."""

import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plans import setup  # noqa: E402

from npucc.backend.estimate.exec_cost import ExecCostModel  # noqa: E402
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch  # noqa: E402
from npucc.backend.hypercut.set_model import MeshParams  # noqa: E402
from npucc.backend.hypercut.workload import workload_from_graph  # noqa: E402
from npucc.gcpause import gc_paused  # noqa: E402
from npucc.ir.plan import Step  # noqa: E402


def unloop(plan):
    return tuple(Step(s.groups, s.nsub, s.loop and s.nsub > 1) for s in plan)


def describe(plan):
    out = []
    for s in plan:
        out.append(
            f"[{'L' if s.loop else ''}n{s.nsub}:"
            + ",".join(f"{min(g.layers)}-{max(g.layers)}@{g.rect.w}x{g.rect.h}" for g in s.groups)
            + "]"
        )
    return " ".join(out)


if __name__ == "__main__":
    name, plat, b, pk = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    graph, target = setup(name, plat, b)
    ex = ExecCostModel(graph, target, {})
    res = pickle.load(open(pk, "rb"))
    with gc_paused():
        for m, (steps, edp, _cpu) in res.items():
            t = time.process_time()
            best = ex.best_edp(steps)
            u = ex.best_edp(unloop(steps))
            print(
                f"{m}: stored {edp:.4g} best_edp {best:.4g} unlooped {u:.4g} "
                f"({time.process_time() - t:.1f} s)\n   {describe(steps)}",
                flush=True,
            )
        if "beam" in sys.argv[5:]:
            wl = workload_from_graph(graph, None)
            mesh = MeshParams.from_target(target)
            t = time.process_time()
            bs = BeamSearch(wl, mesh, BeamOptions(width=8), ex.best_edp)
            plan = bs.run()
            cpu = time.process_time() - t
            off = ex.refine_offchip(plan)
            print(
                f"beam: best_edp {ex.best_edp(plan):.4g} eval {ex.evaluate(plan, off).edp:.4g}"
                f" {len(plan)} steps nsub {sorted({s.nsub for s in plan})} cpu {cpu:.1f}\n"
                f"   {describe(plan)}",
                flush=True,
            )
            res["newbeam"] = (plan, ex.evaluate(plan, off).edp, cpu)
            pickle.dump(res, open(pk + ".new", "wb"))
