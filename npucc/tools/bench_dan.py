"""`npucc bench dan [--json FILE]`: every method on the workloads, one replay, bounds.

Workloads: the six of paper 000 (`dan_workloads`), the hard ones whose working set is many
times L1 (`dan_hard`), and with --models one core of compiled light ResNet-50 and BERT at
shrunk capacities (`dan_model_traces`). Per workload DAN's makespan is reported over the
no-memory bound and over the capacity-aware bound, its extra DDR over the extra-DDR bound;
--small N measures both capacity-aware bounds against exhaustive optima on N small graphs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from npucc.backend.schedule.baseline_schedulers import exact_min_peak
from npucc.backend.schedule.capacity_bounds import memory_bounds
from npucc.backend.schedule.exhaustive import min_extra_ddr, min_makespan
from npucc.backend.schedule.registry import SCHEDULERS, schedule_graph
from npucc.ir.tiled import TileGraph
from npucc.target.cost import TraceSpillModel
from npucc.tools.bench_args import check_output_dir, choose
from npucc.tools.dan_command import DEFAULT_CAPACITY
from npucc.tools.dan_hard import HARD_WORKLOADS, small_instance
from npucc.tools.dan_model_traces import MODEL_TRACES, shrunk_capacity
from npucc.tools.dan_workloads import WORKLOADS

METRICS = ("peak", "extra_ddr", "spills", "makespan")
METHODS = tuple(m for m in SCHEDULERS if m != "dan-mpas")  # all capacity-respecting methods
BIG = 20_000  # graphs with more nodes run only the linear-time methods
FAST = ("original", "dan", "dan-dlr", "belady")


def _workloads(models: bool) -> dict[str, Callable[[], TileGraph]]:
    return {**WORKLOADS, **HARD_WORKLOADS, **(MODEL_TRACES if models else {})}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `dan` benchmark (under `npucc bench`)."""
    p = subparsers.add_parser("dan", help="benchmark DAN against the baselines")
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--workload", action="append", default=None, help="only these (repeatable)")
    p.add_argument(
        "--models", action="store_true", help="also ResNet-50 and BERT traces (compiles them)"
    )
    p.add_argument(
        "--small", type=int, default=0, metavar="N", help="bounds vs exhaustive optima, N graphs"
    )
    p.set_defaults(func=main)
    return p


def ratio(value: int, bound: int) -> float:
    """value / bound, 1.0 when both are 0 (a zero bound met exactly)."""
    if bound == 0:
        return 1.0 if value == 0 else float("inf")
    return value / bound


def run(names: list[str] | None = None, models: bool = False) -> dict[str, Any]:
    """The benchmark results in the JSON schema of issue 3, with issue 21's bounds and ratios."""
    model = TraceSpillModel()
    known = _workloads(models or bool(names and set(names) & set(MODEL_TRACES)))
    out: dict[str, Any] = {"capacity": DEFAULT_CAPACITY, "workloads": {}}
    for name in names or list(known):
        graph = known[name]()
        capacity = shrunk_capacity(graph) if name in MODEL_TRACES else DEFAULT_CAPACITY
        methods: dict[str, Any] = {}
        for method in METHODS if len(graph.nodes) <= BIG else FAST:
            t0 = time.perf_counter()
            schedule, r = schedule_graph(graph, method, capacity, model)
            entry: dict[str, Any] = {**r.metrics(), "seconds": time.perf_counter() - t0}
            if method == "dan":
                entry["stages"] = schedule.seconds
            methods[method] = entry
        b = memory_bounds(graph, capacity, model)
        exact = exact_min_peak(graph) if len(graph.nodes) <= 40 else None
        if exact is not None:
            b["peak"] = exact
        dan = methods["dan"]
        out["workloads"][name] = {
            "methods": methods,
            "bounds": b,
            "nodes": len(graph.nodes),
            "capacity": capacity,
            "dan_over_bounds": {
                "makespan": ratio(dan["makespan"], b["makespan"]),
                "makespan_capacity": ratio(dan["makespan"], b["makespan_capacity"]),
                "extra_ddr": ratio(dan["extra_ddr"], b["extra_ddr"]),
            },
        }
    return out


def tightness(count: int) -> dict[str, Any]:
    """Both capacity-aware bounds against exhaustive optima on `count` small random graphs.

    Odd seeds chain each pipe in id order (as the hard workloads do). The optima are of the
    relaxation in `exhaustive` (<= the true optima), so bound <= optimum proves validity.
    """
    model = TraceSpillModel()
    rows: list[dict[str, int]] = []
    for seed in range(count):
        graph, capacity = small_instance(seed, chained=seed % 2 == 1)
        ddr = min_extra_ddr(graph, capacity, model)
        span = min_makespan(graph, capacity, model)
        if ddr is None or span is None:
            continue
        b = memory_bounds(graph, capacity, model)
        _, r = schedule_graph(graph, "dan", capacity, model)
        rows.append(
            {
                "seed": seed,
                "extra_ddr_bound": b["extra_ddr"],
                "extra_ddr_opt": ddr,
                "makespan_bound": b["makespan"],
                "makespan_capacity_bound": b["makespan_capacity"],
                "makespan_opt": span,
                "dan_extra_ddr": r.extra_ddr,
                "dan_makespan": r.makespan,
            }
        )
    spilling = [x for x in rows if x["extra_ddr_opt"]]
    return {
        "graphs": count,
        "solved": len(rows),
        "valid": all(
            x["extra_ddr_bound"] <= x["extra_ddr_opt"]
            and x["makespan_capacity_bound"] <= x["makespan_opt"]
            for x in rows
        ),
        "forced_spills": len(spilling),
        "extra_ddr_exact": sum(x["extra_ddr_bound"] == x["extra_ddr_opt"] for x in spilling),
        "extra_ddr_bound_over_opt": sum(x["extra_ddr_bound"] for x in spilling)
        / max(1, sum(x["extra_ddr_opt"] for x in spilling)),
        "makespan_capacity_exact": sum(
            x["makespan_capacity_bound"] == x["makespan_opt"] for x in rows
        ),
        "makespan_nomem_exact": sum(x["makespan_bound"] == x["makespan_opt"] for x in rows),
        "rows": rows,
    }


def best_cells(result: dict[str, Any]) -> tuple[int, int]:
    """(cells where dan is best or tied-best, total cells)."""
    good = total = 0
    for w in result["workloads"].values():
        ms = w["methods"]
        for metric in METRICS:
            total += 1
            good += ms["dan"][metric] <= min(m[metric] for m in ms.values())
    return good, total


def table(result: dict[str, Any]) -> str:
    """A readable table: absolute values, normalised to original, bounds and DAN stage times."""
    lines = []
    for name, w in result["workloads"].items():
        ms, b, q = w["methods"], w["bounds"], w["dan_over_bounds"]
        orig = ms["original"]
        lines.append(
            f"{name} ({w['nodes']} nodes)  bounds: peak >= {b['peak']}, makespan >= "
            f"{b['makespan']} (no memory), >= {b['makespan_capacity']} (capacity-aware), "
            f"extra DDR >= {b['extra_ddr']}"
        )
        lines.append(
            f"  dan: makespan / no-memory bound {q['makespan']:.3f}, / capacity-aware bound "
            f"{q['makespan_capacity']:.3f}, extra DDR / bound {q['extra_ddr']:.3f}"
        )
        lines.append(f"  {'method':14}" + "".join(f"{m:>22}" for m in METRICS) + f"{'seconds':>10}")
        for method, m in ms.items():
            cells = "".join(
                f"{m[k]:>14} ({m[k] / orig[k] if orig[k] else 1.0:5.3f})" for k in METRICS
            )
            lines.append(f"  {method:14}{cells}{m['seconds']:>10.3f}")
        st = ms["dan"]["stages"]
        lines.append(
            "  dan stages: "
            + ", ".join(f"{k} {st.get(k, 0.0):.3f} s" for k in ("mpas", "dlr", "cpe"))
        )
    good, total = best_cells(result)
    lines.append(f"dan best or tied-best on {good}/{total} workload x metric cells")
    small = result.get("small")
    if small:
        lines.append(
            f"bounds vs exhaustive optima on {small['solved']}/{small['graphs']} small graphs: "
            f"valid {small['valid']}; extra DDR bound exact on {small['extra_ddr_exact']}/"
            f"{small['forced_spills']} that must spill "
            f"(bound/opt {small['extra_ddr_bound_over_opt']:.3f}); "
            f"makespan capacity-aware bound exact on {small['makespan_capacity_exact']}, "
            f"no-memory bound on {small['makespan_nomem_exact']}"
        )
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table, write --json; exit code 0."""
    known = _workloads(True)
    names = choose(",".join(args.workload), known, "workload") if args.workload else None
    if args.json is not None:
        check_output_dir(args.json)
    result = run(names, args.models)
    if args.small:
        result["small"] = tightness(args.small)
    sys.stdout.write(table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0
