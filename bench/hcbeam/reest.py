import pickle
import sys
import time

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.target import load_target

for pkl in sys.argv[1:]:
    graph, plan = pickle.load(open(pkl, "rb"))[:2]
    t = time.process_time()
    cost = ExecCostModel(graph, load_target("mesh8x8")).evaluate(plan.steps, plan.offchip)
    print(
        pkl,
        len(plan.steps),
        sorted({s.nsub for s in plan.steps}),
        "saved",
        plan.cost.latency_cycles,
        "now",
        cost.latency_cycles,
        f"edp {cost.edp:.4e}",
        "cpu",
        round(time.process_time() - t, 1),
        flush=True,
    )
