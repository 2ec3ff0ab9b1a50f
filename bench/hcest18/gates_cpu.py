"""hcest18: what the unsplit write gates cost the estimate, in one process.

`python bench/hcest18/gates_cpu.py PLANS.pkl`: the plans a search priced (a pickled list of
steps, in order: `record`), priced again in order by fresh `ExecCostModel`s of light
ResNet-50 b1 mesh8x8, with the gates (`Tenants.waits`) and without (none found), alternating
(the lowerings' memo warm); the CPU s of each pricing, their medians and the pair ratios.
`python bench/hcest18/gates_cpu.py PLANS.pkl --record`: run the hypercut pass and keep the
plans it prices in PLANS.pkl."""

from __future__ import annotations

import pickle
import statistics
import sys
import time

import onnx

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.estimate.gates import Tenants
from npucc.compiler import pipeline
from npucc.gcpause import gc_paused
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

MODEL = "/tmp/r50rand.onnx"
ROUNDS = 4


def main() -> None:
    """Record the plans, or price them with and without the gates."""
    path = sys.argv[1]
    target = load_target("mesh8x8")
    passes = pipeline(CompileOptions(target="mesh8x8"))
    split = [p.name for p in passes].index("hypercut")
    ctx = CompileContext(target)
    graph = PassManager(passes[:split]).run(onnx.load(MODEL), ctx)
    if "--record" in sys.argv:
        plans = []
        priced = ExecCostModel.best_edp

        def best_edp(self: ExecCostModel, steps: tuple) -> float:
            plans.append(steps)
            return priced(self, steps)

        ExecCostModel.best_edp = best_edp  # type: ignore[method-assign]
        passes[split].run(graph, ctx)
        with open(path, "wb") as f:
            pickle.dump(plans, f)
        print(len(plans), "plans")
        return
    with open(path, "rb") as f:
        plans = pickle.load(f)
    gated = Tenants.waits
    model = ExecCostModel(graph, target, ctx.memo)
    for steps in plans:  # NOTE: the lowerings' memo warm, out of the timing
        model.best_edp(steps)
    cpu: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(ROUNDS):
        for name in cpu:
            Tenants.waits = gated if name == "with" else lambda *_: {}  # type: ignore[method-assign]
            model = ExecCostModel(graph, target, ctx.memo)
            with gc_paused():
                start = time.process_time()
                for steps in plans:
                    model.best_edp(steps)
                cpu[name].append(time.process_time() - start)
            print(name, f"{cpu[name][-1]:.2f}", flush=True)
    ratios = [b / a for a, b in zip(cpu["without"], cpu["with"], strict=True)]
    print(
        {name: round(statistics.median(v), 2) for name, v in cpu.items()},
        "pair ratios", [round(r, 3) for r in ratios], "median", round(statistics.median(ratios), 3),
    )  # fmt: skip


if __name__ == "__main__":
    main()
