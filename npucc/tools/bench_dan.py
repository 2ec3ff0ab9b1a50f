"""`npucc bench dan [--json FILE]`: every method on the six workloads, one replay, bounds."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from npucc.backend.schedule.baseline_schedulers import exact_min_peak
from npucc.backend.schedule.original import bounds
from npucc.backend.schedule.registry import SCHEDULERS, schedule_graph
from npucc.target.cost import TraceSpillModel
from npucc.tools.bench_args import check_output_dir, choose
from npucc.tools.dan_command import DEFAULT_CAPACITY
from npucc.tools.dan_workloads import WORKLOADS

METRICS = ("peak", "extra_ddr", "spills", "makespan")
METHODS = tuple(m for m in SCHEDULERS if m != "dan-mpas")  # all capacity-respecting methods


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `dan` benchmark (under `npucc bench`)."""
    p = subparsers.add_parser("dan", help="benchmark DAN against the baselines")
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--workload", action="append", default=None, help="only these (repeatable)")
    p.set_defaults(func=main)
    return p


def run(names: list[str] | None = None) -> dict[str, Any]:
    """The benchmark results in the JSON schema of issue 3."""
    model = TraceSpillModel()
    out: dict[str, Any] = {"capacity": DEFAULT_CAPACITY, "workloads": {}}
    for name in names or list(WORKLOADS):
        graph = WORKLOADS[name]()
        methods: dict[str, Any] = {}
        for method in METHODS:
            t0 = time.perf_counter()
            schedule, r = schedule_graph(graph, method, DEFAULT_CAPACITY, model)
            entry: dict[str, Any] = {**r.metrics(), "seconds": time.perf_counter() - t0}
            if method == "dan":
                entry["stages"] = schedule.seconds
            methods[method] = entry
        b = bounds(graph)
        exact = exact_min_peak(graph) if len(graph.nodes) <= 40 else None
        if exact is not None:
            b["peak"] = exact
        out["workloads"][name] = {"methods": methods, "bounds": b, "nodes": len(graph.nodes)}
    return out


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
        ms, b = w["methods"], w["bounds"]
        orig = ms["original"]
        lines.append(
            f"{name} ({w['nodes']} nodes)  bounds: peak >= {b['peak']}, "
            f"makespan >= {b['makespan']}  dan/bound makespan "
            f"{ms['dan']['makespan'] / max(b['makespan'], 1):.3f}"
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
    return "\n".join(lines) + "\n"


def main(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table, write --json; exit code 0."""
    names = choose(",".join(args.workload), WORKLOADS, "workload") if args.workload else None
    if args.json is not None:
        check_output_dir(args.json)
    result = run(names)
    sys.stdout.write(table(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0
