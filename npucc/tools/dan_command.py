"""`npucc dan GRAPH.json --out DIR`: schedule a trace and write the dan-traces.md output files."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from npucc.backend.schedule.original import bounds
from npucc.backend.schedule.registry import SCHEDULERS, schedule_graph
from npucc.backend.schedule.trace_json import load_trace
from npucc.errors import NpuccError
from npucc.target import TIERS
from npucc.target.cost import TraceSpillModel
from npucc.tools.cli_parsing import COMMANDS

DEFAULT_CAPACITY = {"L1": 4096, "UB": 1024, "L0A": 256, "L0B": 256, "L0C": 512}
STAGE_METHOD = {"mpas": "dan-mpas", "dlr": "dan-dlr", "full": "dan"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `dan` subcommand."""
    p = subparsers.add_parser("dan", help=COMMANDS["dan"])
    p.add_argument("graph", type=Path, help="GRAPH.json trace")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument(
        "--stage",
        choices=tuple(STAGE_METHOD),
        default="full",
        help="stop after MPAS ordering, DLR layout, or run all of DAN (full)",
    )
    p.add_argument("--capacity", default="", help="e.g. L1=4096,UB=1024 (defaults per tier)")
    p.add_argument(
        "--method",
        default=None,
        choices=tuple(SCHEDULERS),
        help="scheduler name (overrides --stage)",
    )
    p.set_defaults(func=main)
    return p


def parse_capacity(text: str) -> dict[str, int]:
    """Default capacities updated by a TIER=BYTES,... list."""
    caps = dict(DEFAULT_CAPACITY)
    for item in filter(None, (x.strip() for x in text.split(","))):
        tier, _, value = item.partition("=")
        if tier not in TIERS or not value.isdigit():
            raise NpuccError(f"--capacity: expected TIER=BYTES with TIER in {TIERS}, got {item!r}")
        caps[tier] = int(value)
    return caps


def main(args: argparse.Namespace) -> int:
    """Schedule, write NAME_schedule/memory/spill.txt and NAME_metrics.json; exit code 0."""
    method = args.method or STAGE_METHOD[args.stage]
    if method not in SCHEDULERS:
        raise NpuccError(f"unknown method '{method}' (known: {', '.join(sorted(SCHEDULERS))})")
    graph = load_trace(args.graph)
    schedule, r = schedule_graph(graph, method, parse_capacity(args.capacity), TraceSpillModel())
    ids = [int(b.name) for b in graph.buffers]
    name = args.graph.stem
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}_schedule.txt").write_text("".join(f"{v}\n" for v in schedule.order))
    (out / f"{name}_memory.txt").write_text(
        "".join(f"{ids[b]}:{off}\n" for b, off in sorted(schedule.offsets.items()))
    )
    (out / f"{name}_spill.txt").write_text(
        "".join(f"{ids[b]}:{off}\n" for b, off in schedule.spills)
    )
    seconds = {k: schedule.seconds.get(k, 0.0) for k in ("mpas", "dlr", "cpe")}
    metrics = {**r.metrics(), "bounds": bounds(graph), "seconds": seconds}
    (out / f"{name}_metrics.json").write_text(json.dumps(metrics) + "\n")
    return 0
