"""Scheduler registry: name -> scheduler, and `schedule_graph` (schedule, validate, replay)."""

from __future__ import annotations

from collections.abc import Callable

from npucc.backend.schedule.baseline_schedulers import BASELINES
from npucc.backend.schedule.dan.pipeline import dan, dan_dlr, dan_mpas
from npucc.backend.schedule.original import original
from npucc.errors import NpuccError
from npucc.gcpause import gc_paused
from npucc.ir.replay import Replay, replay, validate
from npucc.ir.schedule import UNBOUNDED, Schedule
from npucc.ir.tiled import TileGraph
from npucc.target.cost import SpillModel

Scheduler = Callable[[TileGraph, dict[str, int], SpillModel, int], Schedule]

SCHEDULERS: dict[str, Scheduler] = {
    "original": original,
    "dan": dan,
    "dan-dlr": dan_dlr,
    "dan-mpas": dan_mpas,
    **BASELINES,
}
# NOTE: a compiled program's variant of a method, whose CPE may drop the plan's memory order
# within an L1+UB budget (`overlap`: a multiple of the plan's peak); traces keep the paper's
# contract, the plan's memory order (`schedule_graph`)
OVERLAP: dict[str, Callable[..., Schedule]] = {"dan": dan}  # called with overlap=budget
# Methods whose independent tries may run in worker processes (called with jobs=N): the same
# schedule whatever N (npucc.parallel)
PARALLEL = frozenset({"dan", "dan-dlr"})


def schedule_graph(
    graph: TileGraph,
    method: str,
    capacity: dict[str, int],
    spill_model: SpillModel,
    alignment: int = 1,
    check: bool = True,
    overlap: float | None = None,
    jobs: int = 1,
) -> tuple[Schedule, Replay]:
    """Schedule `graph` with the named method (its OVERLAP variant given `overlap`, an L1+UB
    budget as a multiple of the plan's peak, or inf; a PARALLEL method's tries in up to `jobs`
    worker processes), validate it (unless check=False) and replay it."""
    if method not in SCHEDULERS:
        raise NpuccError(f"unknown scheduler '{method}' (known: {', '.join(sorted(SCHEDULERS))})")
    with gc_paused():  # NOTE: see gc_paused; a 1e6-node graph is millions of objects
        more = {"jobs": jobs} if method in PARALLEL else {}
        if overlap is not None and method in OVERLAP:
            schedule = OVERLAP[method](
                graph, capacity, spill_model, alignment, overlap=overlap, **more
            )
        else:
            schedule = SCHEDULERS[method](graph, capacity, spill_model, alignment, **more)
        checked = None
        if check:
            if method in UNBOUNDED:
                checked = validate(graph, schedule, None, alignment, single_l0=True)
            else:
                checked = validate(graph, schedule, capacity, alignment)
        like, schedule.basis = schedule.basis, None  # NOTE: not kept alive with the schedule
        return schedule, replay(
            graph, schedule, capacity, spill_model, alignment, like=like, checked=checked
        )
