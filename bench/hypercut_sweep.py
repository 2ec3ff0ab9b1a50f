"""Search-time sweep: HyperCut beam widths vs SA iteration budgets on one model and mesh.

Plateau protocol (docs/cost-model.md, "Search speed"): SA runs every budget with every seed
(one run each); its plateau budget is the smallest budget whose median EDP over the seeds is
at most PLATEAU_TOLERANCE above the lowest median of any budget run (the largest budget's
when more iterations never hurt; SA's medians are not monotonic). The speed ratio of a
HyperCut width is SA's median CPU seconds at the plateau budget over HyperCut's median CPU
seconds (`--repeat` runs). With `--json FILE` runs accumulate in FILE (keyed by model,
platform, batch, method, budget, seed), so SA and HyperCut may be measured in separate calls.

`--executed FILE` measures the row as compiled instead (docs/cost-model.md, "Issue 17's rows
executed"): the model made batch-symbolic and compiled at `--batch`, every method planning it
with the execution-faithful estimate (`--sa ''`: HyperCut alone); each method's chosen plan
(SA: the best of its seeds) is lowered and interpreted timing-only, with its estimate,
interpreted makespan, energy and EDP. Time to quality: SA runs the budgets in increasing
order per seed and stops at the first plan it prices at or below HyperCut's EDP; a seed's
time is the CPU of its first run that got there ("never" if none did), and SA's is the
median over the seeds. `--quality FILE` times the same with the SET-aligned model.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import onnx

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.compiler import Program, batch_input_shapes, pipeline
from npucc.ir.plan import MeshPlan, PlannedGraph
from npucc.options import STARTS, CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target
from npucc.tools.bench_hypercut import MODELS, ZOO
from npucc.transforms.graph_pipeline import import_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from batched import symbolic_batch  # noqa: E402  (the tests' batch-symbolic models)

SWEPT = {**MODELS, "squeezenet": ZOO / "light_squeezenet.onnx"}

PLATEAU_TOLERANCE = 0.02  # a budget is on SA's plateau within 2 % of the largest's median

Run = dict  # model, platform, batch, method, budget, seed, edp, cpu_s, wall_s


def main() -> None:
    """Run the requested budgets, then print the per-budget summary, plateau and ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="resnet50", choices=sorted(SWEPT))
    ap.add_argument("--platform", default="mesh8x8")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--widths", default="1,2", help="HyperCut beam widths ('' for none)")
    ap.add_argument(
        "--sa",
        default="1000,3000,10000,30000,100000",
        help="SA iterations ('' for none; with --executed: HyperCut alone)",
    )
    ap.add_argument("--seeds", default="0,1,2,3,4", help="SA seeds (one run each)")
    ap.add_argument(
        "--starts", default=",".join(STARTS), help="HyperCut's descent starts (with --executed)"
    )
    ap.add_argument("--repeat", type=int, default=5, help="HyperCut runs per width (median)")
    ap.add_argument("--json", type=Path, help="file the runs accumulate in (read, then updated)")
    ap.add_argument(
        "--executed", type=Path, help="measure the row as compiled (first width); rows kept here"
    )
    ap.add_argument(
        "--quality", type=Path, help="time to quality by the SET model (first width); rows here"
    )
    args = ap.parse_args()
    if args.executed:
        executed(args)
        return
    if args.quality:
        quality(args)
        return
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
            "edp": plan.cost.edp,
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


def executed(args: argparse.Namespace) -> None:
    """Plan the compiled graph by every method with the exec estimate, interpret each chosen
    plan timing-only, time SA to HyperCut's EDP; the row joins the JSON file `args.executed`."""
    model = symbolic_batch(onnx.load(SWEPT[args.model]))
    target = load_target(args.platform)
    options = CompileOptions(target=args.platform)
    passes = pipeline(replace(options, input_shapes=batch_input_shapes(model, None, args.batch)))
    split = [p.name for p in passes].index("hypercut")
    start = time.process_time()
    graph = PassManager(passes[:split]).run(model, CompileContext(target))
    print(f"frontend {time.process_time() - start:.1f} CPU s", flush=True)
    width = int(args.widths.split(",")[0])

    def plan(method: str, **fields) -> tuple[MeshPlan, float]:
        begin = time.process_time()
        chosen = plan_graph(graph, target, PlanOptions(method=method, **fields))
        return chosen, time.process_time() - begin

    starts = tuple(args.starts.split(","))
    chosen = {"hypercut": plan("hypercut", beam=BeamOptions(width=width, starts=starts))}
    goal = chosen["hypercut"][0].cost.edp
    sa_runs: list[dict] = []
    reach: list[float] = []
    if args.sa:  # the baselines too
        chosen["layer-sequential"] = plan("layer-sequential")
        chosen["layer-pipelined"] = plan("layer-pipelined")
        sa_runs, reach, chosen["sa"] = time_to_quality(
            lambda seed, budget: plan("sa", seed=seed, sa_iterations=budget, sa_goal=goal),
            goal,
            [int(s) for s in args.seeds.split(",")],
            [int(b) for b in args.sa.split(",")],
        )
    for method, (p, cpu) in chosen.items():
        print(f"{method} edp={p.cost.edp:.4g} search {cpu:.1f} CPU s", flush=True)
    row = {
        "model": args.model,
        "platform": args.platform,
        "batch": args.batch,
        "estimate": "exec",
        "hypercut_width": width,
        "hypercut_starts": list(starts),
        "sa_runs": sa_runs,
        "sa_reach_cpu_s": [None if math.isinf(t) else t for t in reach],
        "methods": {
            m: _interpret(graph, passes[split + 1 :], target, *c) for m, c in chosen.items()
        },
    }
    _keep(args.executed, row, reach or [math.nan], chosen["hypercut"][1])


def quality(args: argparse.Namespace) -> None:
    """Time to quality with the SET-aligned model (the model imported at batch 1 and planned
    for `--batch`): HyperCut's median search CPU (first width) against SA's to its EDP."""
    graph, target = import_model(SWEPT[args.model]), load_target(args.platform)
    width = int(args.widths.split(",")[0])

    def plan(method: str, **fields) -> tuple[MeshPlan, float]:
        begin = time.process_time()
        options = PlanOptions(method=method, batch=args.batch, estimate="set", **fields)
        return plan_graph(graph, target, options), time.process_time() - begin

    runs = [plan("hypercut", beam=BeamOptions(width=width)) for _ in range(args.repeat)]
    goal, cpu = runs[0][0].cost.edp, statistics.median(c for _, c in runs)
    print(f"hypercut width {width} edp={goal:.4g} median {cpu:.3f} CPU s", flush=True)
    sa_runs, reach, _ = time_to_quality(
        lambda seed, budget: plan("sa", seed=seed, sa_iterations=budget, sa_goal=goal),
        goal,
        [int(s) for s in args.seeds.split(",")],
        [int(b) for b in args.sa.split(",")],
    )
    row = {
        "model": args.model,
        "platform": args.platform,
        "batch": args.batch,
        "estimate": "set",
        "hypercut_width": width,
        "hypercut_edp": goal,
        "hypercut_cpu_s": cpu,
        "sa_runs": sa_runs,
        "sa_reach_cpu_s": [None if math.isinf(t) else t for t in reach],
    }
    _keep(args.quality, row, reach, cpu)


def time_to_quality(
    sa: Callable[[int, int], tuple[MeshPlan, float]],
    goal: float,
    seeds: list[int],
    budgets: list[int],
) -> tuple[list[dict], list[float], tuple[MeshPlan, float]]:
    """Per seed, SA's budgets in increasing order until a run prices a plan at or below
    `goal` (`sa` stops there): the runs, each seed's CPU s of that run (inf: never), and the
    best final plan of the seeds with its CPU s."""
    runs, reach = [], []
    best: tuple[MeshPlan, float] | None = None
    for seed in seeds:
        reached = math.inf
        for budget in sorted(budgets):
            p, cpu = sa(seed, budget)
            runs.append({"seed": seed, "budget": budget, "edp": p.cost.edp, "cpu_s": cpu})
            print(f"sa seed={seed} budget={budget} edp={p.cost.edp:.4g} {cpu:.2f} CPU s")
            if p.cost.edp <= goal:
                reached = cpu
                break
        reach.append(reached)
        if best is None or p.cost.edp < best[0].cost.edp:
            best = (p, cpu)
    assert best is not None
    return runs, reach, best


def _keep(path: Path, row: dict, reach: list[float], hypercut_cpu: float) -> None:
    """Print the time-to-quality line and put `row` into the JSON list in `path`."""
    median = statistics.median(reach)  # nan: SA not run
    print(
        f"time to quality: HyperCut {hypercut_cpu:.2f} CPU s, SA's median to its EDP"
        f" {'never' if math.isinf(median) else f'{median:.2f} CPU s'}"
        f" ({median / hypercut_cpu:.1f}x)",
        flush=True,
    )
    rows = json.loads(path.read_text()) if path.exists() else []
    rows = [r for r in rows if _row(r) != _row(row)] + [row]
    path.write_text(json.dumps(rows, indent=1) + "\n")


def _interpret(graph, later: list, target, plan: MeshPlan, search_cpu: float) -> dict:
    """Lower `plan` with the passes `later`, interpret the program timing-only: estimate and
    interpreted figures (makespan = predicted, or an error)."""
    start = time.process_time()
    ctx = CompileContext(target)
    generated = PassManager(later).run(PlannedGraph(graph, plan), ctx)
    program = Program(
        generated.stream, generated.image, target, generated.inputs, generated.outputs, ctx.stats
    )
    lowered = time.process_time()
    result = program.execute({}, check=False, timing_only=True)
    if result.makespan != ctx.stats["predicted_makespan"]:
        raise AssertionError(f"interpreted {result.makespan} != predicted")
    figures = {
        "plan": plan.to_text().splitlines()[0],
        "plan_text": plan.to_text(),
        "steps": len(plan.steps),
        "nsub": sorted({s.nsub for s in plan.steps}),
        "search_cpu_s": search_cpu,
        "estimate_latency": plan.cost.latency_cycles,
        "estimate_energy_pj": plan.cost.energy_pj,
        "estimate_edp": plan.cost.edp,
        "makespan": result.makespan,
        "energy_pj": result.energy,
        "edp": result.makespan * result.energy,
        "error": plan.cost.latency_cycles / result.makespan - 1,
        "ddr_bytes": ctx.stats["roofline"]["ddr_bytes"],
        "min_ddr_bytes": ctx.stats["roofline"]["min_ddr_bytes"],
        "efficiency": ctx.stats["roofline"]["efficiency"],
        "lower_cpu_s": lowered - start,
        "interpret_cpu_s": time.process_time() - lowered,
    }
    print(
        f"{plan.method}: estimate {figures['estimate_latency']:.4g} interpreted"
        f" {result.makespan:.4g} ({figures['error']:+.1%}) energy {result.energy:.4g}"
        f" EDP {figures['edp']:.4g}; lower {figures['lower_cpu_s']:.1f}, interpret"
        f" {figures['interpret_cpu_s']:.1f} CPU s",
        flush=True,
    )
    return figures


def _row(row: dict) -> tuple:
    """What identifies an executed row."""
    return tuple(row.get(k) for k in ("model", "platform", "batch", "estimate"))


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
