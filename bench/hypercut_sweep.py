"""Search-time sweep: HyperCut beam widths vs SA iteration budgets on one model and mesh."""

from __future__ import annotations

import argparse

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.hypercut.bench import MODELS
from npucc.backend.hypercut.planner import PlanOptions, plan_graph
from npucc.frontend import import_model
from npucc.target import load_target


def main() -> None:
    """Print EDP and search seconds per budget (one line each)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--platform", default="mesh8x8")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--widths", default="2,4,8")
    ap.add_argument("--sa", default="1000,3000,10000")
    ap.add_argument("--seeds", default="0,1")
    args = ap.parse_args()
    graph, target = import_model(MODELS[args.model]), load_target(args.platform)
    runs = [("hypercut", int(w), 0) for w in args.widths.split(",")]
    runs += [("sa", int(i), int(s)) for i in args.sa.split(",") for s in args.seeds.split(",")]
    for method, budget, seed in runs:
        options = PlanOptions(
            method=method,
            batch=args.batch,
            seed=seed,
            beam=BeamOptions(width=budget if method == "hypercut" else BeamOptions.width),
            sa_iterations=budget,
        )
        plan = plan_graph(graph, target, options)
        print(
            f"{args.model} {args.platform} b={args.batch} {method:8s} budget={budget:<6d}"
            f" seed={seed} edp={plan.cost().edp:.4g} search_s={plan.search_s:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
