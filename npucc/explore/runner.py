"""Running a sweep on Ray: one task per point, rows written as they finish, resumable."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npucc import progress
from npucc.errors import NpuccError
from npucc.explore.point import evaluate
from npucc.explore.results import PLOT, ResultsFile, cell, columns, plot, write_page
from npucc.explore.sweep import Point, Sweep, macs, sram_bytes

INSTALL_HINT = (
    "npucc explore runs its points on Ray, which is not installed: "
    'pip install "npucc[explore]" (or pip install "ray>=2.9")'
)


@dataclass(frozen=True, slots=True)
class SweepRun:
    """What one run of a sweep did."""

    points: int  # points of the sweep
    skipped: int  # already in the results
    computed: int  # run now
    failed: int  # of those computed, with status other than ok
    results: Path  # the CSV
    plot: Path  # the Pareto PNG


def import_ray() -> Any:
    """The ray module, or an NpuccError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise NpuccError(INSTALL_HINT) from None
    return ray


@contextmanager
def ray_session(address: str | None, max_parallel: int | None) -> Iterator[Any]:
    """Ray, joined at `address` or started locally (`max_parallel` CPUs); stopped if started."""
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        quiet = {"log_to_driver": False, "logging_level": logging.ERROR}
        if address:
            ray.init(address=address, **quiet)
        else:
            cpus = max_parallel or os.cpu_count() or 1
            ray.init(num_cpus=cpus, include_dashboard=False, **quiet)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def make_row(point: Point, metrics: dict[str, Any]) -> dict[str, str]:
    """The CSV row of a point from the metrics its task returned."""
    row = {
        "key": point.key,
        "model": point.model.name,
        **{key: cell(value) for key, value in point.params.items()},
        "status": metrics["status"],
        "error": metrics["error"],
        "sram_bytes": str(sram_bytes(point.target)),
        "macs": str(macs(point.target)),
        "compile_s": f"{metrics['compile_s']:.3f}",
        "run_s": f"{metrics['run_s']:.3f}",
    }
    cycles, energy = metrics.get("latency_cycles"), metrics.get("energy_pj")
    if cycles is None or energy is None:
        row.update(dict.fromkeys(("latency_us", "energy_uj", "edp_uj_us", "energy_pj"), ""))
        row["latency_cycles"] = ""
        return row
    latency_us = cycles / (float(point.target["target"]["clock_ghz"]) * 1e3)
    energy_uj = energy / 1e6
    row.update(
        latency_cycles=str(cycles),
        latency_us=cell(latency_us),
        energy_uj=cell(energy_uj),
        edp_uj_us=cell(latency_us * energy_uj),
        energy_pj=cell(energy),
    )
    return row


def run_sweep(
    sweep: Sweep,
    directory: str | os.PathLike[str],
    *,
    address: str | None = None,
    max_parallel: int | None = None,
    check: bool = False,
    on_row: Callable[[dict[str, str]], None] | None = None,
) -> SweepRun:
    """Run the points not yet in DIRECTORY/results.csv (`on_row` after each), sort it, plot."""
    # rows are flushed as points finish: Ctrl-C (KeyboardInterrupt propagates) keeps them
    directory = Path(directory)
    points = sweep.points(check)
    results = ResultsFile.open(directory, columns([a.key for a in sweep.axes]))
    done = results.keys()
    todo: list[Point] = []
    for point in points:
        if point.key not in done:  # two models of equal bytes and shapes run once
            done.add(point.key)
            todo.append(point)
    finished = False
    try:
        if todo:
            with ray_session(address, max_parallel) as ray:
                _compute(ray, todo, results, max_parallel, on_row)
        finished = True
    finally:
        results.close([p.key for p in points] if finished else None)
    new = {p.key for p in todo}
    failed = sum(1 for r in results.rows if r["key"] in new and r["status"] != "ok")
    png = plot(results.rows, directory / PLOT)
    write_page(results.rows, results.header, directory)
    return SweepRun(len(points), len(points) - len(todo), len(todo), failed, results.path, png)


def _compute(
    ray: Any,
    todo: list[Point],
    results: ResultsFile,
    max_parallel: int | None,
    on_row: Callable[[dict[str, str]], None] | None,
) -> None:
    """Submit the points as Ray tasks (at most `max_parallel` in flight) and record each."""
    width = max_parallel or max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(num_cpus=1, max_retries=0)(evaluate)
    models = {p.model.name: p.model for p in todo}
    data = {name: ray.put(m.path.read_bytes()) for name, m in models.items()}
    queue = iter(todo)
    pending: dict[Any, Point] = {}
    finished = 0
    try:
        with progress.task("explore", len(todo)) as bar:
            while True:
                for point in queue:
                    ref = task.remote(data[point.model.name], point.target, point.options)
                    pending[ref] = point
                    if len(pending) >= width:
                        break
                if not pending:
                    break
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    point = pending.pop(ref)
                    try:
                        metrics = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # the task or its worker died
                        text = " ".join(str(exc).split())
                        metrics = {"status": "error", "error": text, "compile_s": 0.0,
                                   "run_s": 0.0}  # fmt: skip
                    row = make_row(point, metrics)
                    results.append(row)
                    finished += 1
                    if bar is not None:
                        bar.update(finished)
                    if on_row is not None:
                        on_row(row)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
