"""sqz64: the pickled plans (plans.py) re-priced by the current estimate: latency, energy, EDP."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plans import graph_and_target  # noqa: E402

from npucc.backend.estimate.exec_cost import ExecCostModel  # noqa: E402

if __name__ == "__main__":
    plans = pickle.loads(Path(sys.argv[1]).read_bytes())
    graph, target, _ = graph_and_target()
    model = ExecCostModel(graph, target)
    for method, plan in plans.items():
        cost = model.evaluate(plan.steps, plan.offchip)
        best = model.best_edp(plan.steps)
        print(
            f"{method}: latency {cost.latency_cycles:.0f} (was {plan.cost.latency_cycles:.0f})"
            f" energy {cost.energy_pj:.6g} EDP {cost.edp:.5g} (was {plan.cost.edp:.5g})"
            f" best_edp {best:.5g}",
            flush=True,
        )
