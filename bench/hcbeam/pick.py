"""HyperCut's pick (width 8) on a pickled graph with K finalists, against the saved plan.

python bench/hcbeam/pick.py GRAPH.pkl PLATFORM K
"""

import pickle
import sys
import time

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.target import load_target

graph, saved = pickle.load(open(sys.argv[1], "rb"))[:2]
k = int(sys.argv[3])
t = time.process_time()
plan = plan_graph(
    graph, load_target(sys.argv[2]), PlanOptions(beam=BeamOptions(width=8, finalists=k))
)
same = plan.steps == saved.steps
print(
    f"K={k}: {len(plan.steps)} steps nsub {sorted({s.nsub for s in plan.steps})} "
    f"est. {plan.cost.latency_cycles:.0f} EDP {plan.cost.edp:.4e}; saved plan "
    f"{saved.cost.latency_cycles:.0f} EDP {saved.cost.edp:.4e}; same plan {same}; "
    f"search {time.process_time() - t:.1f} CPU s",
    flush=True,
)
