"""Time DAN's three stages on synthetic traces of 10^5 and 10^6 nodes (issue 3's scale goal).

The total includes validation and replay; stages: MPAS (both keys and the lowering order), DLR
(each order's placement and replay), CPE. `schedule_sha` hashes the schedule (order, offsets,
spills) and `replay_sha` its replayed start and finish times: a change that must keep every
decision keeps both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time

from npucc.backend.schedule.original import bounds
from npucc.backend.schedule.registry import schedule_graph
from npucc.parallel import default_jobs
from npucc.target.cost import TraceSpillModel
from npucc.tools.dan_command import DEFAULT_CAPACITY
from npucc.tools.dan_synthetic import synthetic_graph


def measure(nodes: int, jobs: int = 1) -> dict:
    """Build, schedule (validated) and replay one synthetic trace with `jobs` worker processes;
    wall times per stage, the total also in CPU seconds (the figure to compare on a shared
    machine: this process's and its workers')."""
    graph = synthetic_graph(nodes, seed=0)
    t0, c0 = time.perf_counter(), _cpu()
    schedule, r = schedule_graph(graph, "dan", DEFAULT_CAPACITY, TraceSpillModel(), jobs=jobs)
    total, cpu = time.perf_counter() - t0, _cpu() - c0
    b = bounds(graph)
    plan = [schedule.order, sorted(schedule.offsets.items()), schedule.spills]
    return {
        "nodes": len(graph.nodes),
        "jobs": jobs,
        "seconds": round(total, 2),
        "cpu_seconds": round(cpu, 2),
        "stages": {k: round(v, 2) for k, v in schedule.seconds.items()},
        "metrics": r.metrics(),
        "bounds": b,
        "makespan_over_bound": round(r.makespan / b["makespan"], 3),
        "schedule_sha": _sha(plan),
        "replay_sha": _sha([r.start, r.finish]),
    }


def _cpu() -> float:
    """User + system CPU seconds of this process and of its waited-for children (workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _sha(value: object) -> str:
    """Short sha256 of a JSON-able value."""
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def main() -> None:
    """Print one JSON line per size."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("sizes", nargs="*", type=int, default=[100_000, 1_000_000])
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: the CPUs)")
    args = p.parse_args()
    jobs = default_jobs() if args.jobs is None else args.jobs
    for n in args.sizes:
        print(json.dumps(measure(n, jobs)), flush=True)


if __name__ == "__main__":
    main()
