"""Search-time sweep: HyperCut beam widths vs SA iteration budgets on one model and mesh."""

from __future__ import annotations

import argparse
import statistics
import time

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.hypercut.bench import MODELS
from npucc.backend.hypercut.planner import PlanOptions, plan_graph
from npucc.frontend import import_model
from npucc.target import load_target


def main() -> None:
    """Print EDP and the median search seconds (wall and CPU) per budget (one line each)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--platform", default="mesh8x8")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--widths", default="1,2,4,8", help="HyperCut beam widths ('' for none)")
    ap.add_argument("--sa", default="1000,3000,10000,30000", help="SA iterations ('' for none)")
    ap.add_argument("--seeds", default="0,1", help="SA seeds")
    ap.add_argument("--repeat", type=int, default=1, help="runs per budget (medians)")
    args = ap.parse_args()
    graph, target = import_model(MODELS[args.model]), load_target(args.platform)
    runs = [("hypercut", int(w), 0) for w in args.widths.split(",") if w]
    runs += [("sa", int(i), int(s)) for i in args.sa.split(",") if i for s in args.seeds.split(",")]
    for method, budget, seed in runs:
        options = PlanOptions(
            method=method,
            batch=args.batch,
            seed=seed,
            beam=BeamOptions(width=budget if method == "hypercut" else BeamOptions.width),
            sa_iterations=budget,
        )
        wall, cpu = [], []
        for _ in range(args.repeat):
            start = time.process_time()
            plan = plan_graph(graph, target, options)
            cpu.append(time.process_time() - start)
            wall.append(plan.search_s)
        print(
            f"{args.model} {args.platform} b={args.batch} {method:8s} budget={budget:<6d}"
            f" seed={seed} edp={plan.cost().edp:.4g} search_s={statistics.median(wall):.3f}"
            f" cpu_s={statistics.median(cpu):.3f} runs={args.repeat}",
            flush=True,
        )


if __name__ == "__main__":
    main()
