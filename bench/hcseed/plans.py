"""hcseed diagnosis: plan one executed row with HyperCut, LS, LP (and SA), pickle the plans
and their estimated EDPs (python bench/hcseed/plans.py MODEL PLATFORM BATCH OUT [METHODS])."""

import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from batched import symbolic_batch  # noqa: E402
from hypercut_sweep import SWEPT  # noqa: E402

from npucc.backend.hypercut.beam import BeamOptions  # noqa: E402
from npucc.backend.planner import PlanOptions, plan_graph  # noqa: E402
from npucc.compiler import batch_input_shapes, pipeline  # noqa: E402
from npucc.options import CompileOptions  # noqa: E402
from npucc.passes import CompileContext, PassManager  # noqa: E402
from npucc.target import load_target  # noqa: E402


def setup(model_name, platform, batch):
    model = symbolic_batch(onnx.load(SWEPT[model_name]))
    target = load_target(platform)
    options = CompileOptions(target=platform)
    passes = pipeline(replace(options, input_shapes=batch_input_shapes(model, None, batch)))
    split = [p.name for p in passes].index("hypercut")
    graph = PassManager(passes[:split]).run(model, CompileContext(target))
    return graph, target


if __name__ == "__main__":
    name, plat, b, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    methods = sys.argv[5].split(",") if len(sys.argv) > 5 else ["hypercut", "layer-pipelined"]
    graph, target = setup(name, plat, b)
    res = {}
    for m in methods:
        t = time.process_time()
        if m.startswith("sa"):
            seed = int(m[2:])
            p = plan_graph(graph, target, PlanOptions(method="sa", seed=seed, sa_iterations=300))
        elif m == "hypercut":
            p = plan_graph(graph, target, PlanOptions(method=m, beam=BeamOptions(width=8)))
        else:
            p = plan_graph(graph, target, PlanOptions(method=m))
        cpu = time.process_time() - t
        res[m] = (p.steps, p.cost.edp, cpu)
        print(
            m,
            len(p.steps),
            sorted({s.nsub for s in p.steps}),
            f"{p.cost.edp:.4g}",
            f"{cpu:.1f}",
            flush=True,
        )
        pickle.dump(res, open(out, "wb"))
