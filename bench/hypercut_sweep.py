"""Search-time sweep: HyperCut beam widths vs SA iteration budgets on one model and mesh.

Plateau protocol (docs/cost-model.md, "Search speed"): SA runs every budget with every seed
(one run each); its plateau budget is the smallest budget whose median EDP over the seeds is
at most PLATEAU_TOLERANCE above the lowest median of any budget run (the largest budget's
when more iterations never hurt; SA's medians are not monotonic). The speed ratio of a
HyperCut width is SA's median CPU seconds at the plateau budget over HyperCut's median CPU
seconds (`--repeat` runs). With `--json FILE` runs accumulate in FILE (keyed by model,
platform, batch, method, budget, seed), so SA and HyperCut may be measured in separate calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.target import load_target
from npucc.tools.bench_hypercut import MODELS
from npucc.transforms.graph_pipeline import import_model

PLATEAU_TOLERANCE = 0.02  # a budget is on SA's plateau within 2 % of the largest's median

Run = dict  # model, platform, batch, method, budget, seed, edp, cpu_s, wall_s


def main() -> None:
    """Run the requested budgets, then print the per-budget summary, plateau and ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    ap.add_argument("--platform", default="mesh8x8")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--widths", default="1,2", help="HyperCut beam widths ('' for none)")
    ap.add_argument(
        "--sa", default="1000,3000,10000,30000,100000", help="SA iterations ('' for none)"
    )
    ap.add_argument("--seeds", default="0,1,2,3,4", help="SA seeds (one run each)")
    ap.add_argument("--repeat", type=int, default=5, help="HyperCut runs per width (median)")
    ap.add_argument("--json", type=Path, help="file the runs accumulate in (read, then updated)")
    args = ap.parse_args()
    config = {"model": args.model, "platform": args.platform, "batch": args.batch}
    graph, target = import_model(MODELS[args.model]), load_target(args.platform)
    stored: list[Run] = (
        json.loads(args.json.read_text()) if args.json and args.json.exists() else []
    )
    todo = [
        ("hypercut", int(w), r) for w in args.widths.split(",") if w for r in range(args.repeat)
    ]
    todo += [("sa", int(i), int(s)) for i in args.sa.split(",") if i for s in args.seeds.split(",")]
    for method, budget, seed in todo:
        options = PlanOptions(
            method=method,
            batch=args.batch,
            seed=0 if method == "hypercut" else seed,  # HyperCut: `seed` numbers the repeat
            beam=BeamOptions(width=budget if method == "hypercut" else BeamOptions.width),
            sa_iterations=budget,
            estimate="set",  # the SET comparison's search speed
        )
        start = time.process_time()
        plan = plan_graph(graph, target, options)
        run = {
            **config,
            "method": method,
            "budget": budget,
            "seed": seed,
            "edp": plan.cost().edp,
            "cpu_s": time.process_time() - start,
            "wall_s": plan.search_s,
        }
        print(
            f"{args.model} {args.platform} b={args.batch} {method:8s} budget={budget:<6d}"
            f" seed={seed} edp={run['edp']:.4g} cpu_s={run['cpu_s']:.3f}"
            f" wall_s={run['wall_s']:.3f}",
            flush=True,
        )
        stored = [r for r in stored if _key(r) != _key(run)] + [run]
        if args.json:
            args.json.write_text(json.dumps(stored, indent=1) + "\n")
    print(summary([r for r in stored if all(r[k] == v for k, v in config.items())]))


def _key(run: Run) -> tuple:
    """What identifies a run."""
    return tuple(run[k] for k in ("model", "platform", "batch", "method", "budget", "seed"))


def summary(runs: list[Run]) -> str:
    """Per budget: runs, median and best EDP, median CPU s; SA's plateau; the speed ratios."""
    lines = ["method budget runs median_edp best_edp median_cpu_s"]
    table: dict[tuple[str, int], tuple[float, float, float]] = {}
    for method, budget in sorted({(r["method"], r["budget"]) for r in runs}):
        group = [r for r in runs if (r["method"], r["budget"]) == (method, budget)]
        edps = [r["edp"] for r in group]
        cpu = statistics.median(r["cpu_s"] for r in group)
        table[(method, budget)] = (statistics.median(edps), min(edps), cpu)
        lines.append(
            f"{method} {budget} {len(group)} {table[(method, budget)][0]:.4g} {min(edps):.4g}"
            f" {cpu:.3f}"
        )
    medians = {b: v[0] for (m, b), v in table.items() if m == "sa"}
    plateau = plateau_budget(medians)
    if plateau is None:
        return "\n".join(lines)
    sa_edp, _, sa_cpu = table[("sa", plateau)]
    largest = max(medians)
    literal = min(  # the rule read against the largest budget's median alone
        b for b, edp in medians.items() if edp <= medians[largest] * (1 + PLATEAU_TOLERANCE)
    )
    lines.append(
        f"SA plateau: {plateau} iterations (median EDP {sa_edp:.4g}, within"
        f" {PLATEAU_TOLERANCE:.0%} of the lowest median {min(medians.values()):.4g});"
        f" median CPU {sa_cpu:.3f} s; against the largest budget's median"
        f" {medians[largest]:.4g} alone: {literal} iterations,"
        f" {table[('sa', literal)][2]:.3f} s"
    )
    for (method, budget), (edp, _, cpu) in sorted(table.items()):
        if method == "hypercut":
            lines.append(
                f"HyperCut width {budget}: {sa_cpu / cpu:.1f}x faster than SA's plateau,"
                f" EDP {edp / sa_edp:.3f} x SA's plateau median,"
                f" {edp / min(v[1] for (m, _), v in table.items() if m == 'sa'):.3f} x SA's best"
            )
    return "\n".join(lines)


def plateau_budget(medians: dict[int, float]) -> int | None:
    """Smallest budget whose median EDP is at most PLATEAU_TOLERANCE above the lowest one."""
    if not medians:
        return None
    best = min(medians.values())
    return min(b for b, edp in medians.items() if edp <= best * (1 + PLATEAU_TOLERANCE))


if __name__ == "__main__":
    main()
