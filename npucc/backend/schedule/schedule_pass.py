"""The `schedule` pass: order, place and time every core's DAG with a named scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from npucc import progress
from npucc.backend.schedule.peak_floor import peak_floor
from npucc.backend.schedule.perf_table import layer_table, rows_as_dicts
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.roofline import node_traffic, scheduled_roofline
from npucc.errors import NpuccError
from npucc.ir.isa_cost import TargetSpillModel
from npucc.ir.program import TiledProgram
from npucc.ir.replay import Replay, ScheduleError, validate
from npucc.ir.residency import COMBINED, merge_peaks
from npucc.ir.schedule import UNBOUNDED, Schedule, capacities
from npucc.ir.scheduled_program import (
    Detached,
    ScheduledProgram,
    attach,
    core_ddr_bytes,
    detach,
    mesh_makespan,
)
from npucc.parallel import fork_map, forks
from npucc.passes import CompileContext, IRType, Pass

# NOTE: the cores of a program are scheduled in worker processes (npucc.parallel) only when
# they hold this many tile nodes in all: the workers' start and the results' pickling cost
# about 0.05 CPU s, won back from about 2,500 nodes (docs/design.md "jobs31")
FORK_NODES = 8000


def shares(sizes: list[int], jobs: int) -> list[list[int]]:
    """The cores (indices into `sizes`, their node counts) in `jobs` shares of about equal nodes:
    the largest first, each to the share with the fewest nodes so far (the first such)."""
    parts: list[list[int]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):  # NOTE: stable
        k = loads.index(min(loads))
        parts[k].append(i)
        loads[k] += sizes[i]
    return [sorted(p) for p in parts if p]


@dataclass(frozen=True, slots=True)
class SchedulePass(Pass):
    """Schedule each core with `method` (original, dan, ...) under the target's capacities."""

    name: ClassVar[str] = "schedule"
    input_ir: ClassVar[IRType] = TiledProgram
    output_ir: ClassVar[IRType] = ScheduledProgram
    method: str = "dan"
    # NOTE: on a compiled program DAN's CPE may drop the plan's memory order and overlap layers
    # within `overlap_peak` times the plan's L1+UB peak (1.0, the default: no more live bytes
    # than the plan's, the paper's peak; inf: within the plan's addresses, as they alone must
    # fit). One core only: on a mesh HyperCut's exec estimate times each core with the plan's
    # memory order, and a plan must run as it was priced (tests/e2e/test_subbatch_mesh.py: a
    # loop's estimate +6 % kept, +16 % overlapped) until the estimate models the free order
    overlap: bool = True
    overlap_peak: float = 1.0
    peak_floor: bool = False  # stats["peak_floor"]: the peak's lower bounds (peak_floor.py)
    jobs: int = 1  # worker processes (npucc.parallel); the same schedules whatever the number

    def run(self, ir: TiledProgram, ctx: CompileContext) -> ScheduledProgram:
        target = ctx.target
        capacity = capacities(target)
        if not self.overlap_peak >= 1:  # NOTE: below 1 the plan's own order would not fit
            raise NpuccError(f"overlap_peak must be at least 1, not {self.overlap_peak}")
        overlap = self.overlap_peak if self.overlap and target.cores == 1 else None
        spill_model = TargetSpillModel(target)
        align = target.memory.alignment
        graphs = [core.graph for core in ir.cores]
        sizes = [len(graph) for graph in graphs]
        forked = forks(self.jobs, len(graphs)) and sum(sizes) >= FORK_NODES

        # NOTE: forked, the cores go in `jobs` shares of about equal nodes (`shares`): this
        # process schedules share 0 while workers schedule the others (no worker of its own,
        # no pickling of its results)
        parts = shares(sizes, self.jobs) if forked else [list(range(len(graphs)))]
        finished = 0
        with progress.task("schedule", len(graphs)) as bar:

            def part(k: int) -> list[tuple[Schedule, Replay] | Detached]:
                nonlocal finished
                results = []
                for i in parts[k]:
                    graph, core = graphs[i], ir.cores[i]
                    if bar is not None and k == 0:  # NOTE: a worker's bar is not shown
                        bar.update(finished, f"schedule: core {core.row},{core.col} "
                                             f"({sizes[i]} nodes)")  # fmt: skip
                        finished += 1
                    # NOTE: inside a worker DAN's own tries stay in it (no pools inside pools)
                    result = schedule_graph(graph, self.method, capacity, spill_model, align,
                                            overlap=overlap, jobs=self.jobs)  # fmt: skip
                    results.append(result if k == 0 else detach(graph, *result))
                return results

            def done(k: int) -> None:
                nonlocal finished
                if bar is not None and k:
                    finished += len(parts[k])
                    bar.update(finished, f"schedule: {finished} cores done")

            weights = [sum(sizes[i] for i in p) for p in parts]
            got = fork_map(part, range(len(parts)), self.jobs, weights, done, here=0)
        made: dict[int, tuple[Schedule, Replay] | Detached] = {}
        for p, results in zip(parts, got, strict=True):
            made.update(zip(p, results, strict=True))
        schedules = [
            attach(graphs[i], result) if isinstance(result, Detached) else result
            for i, result in sorted(made.items())
        ]
        if self.method in UNBOUNDED:
            # NOTE: an ordering-only method lays buffers out in unbounded tiers; its program
            # runs only where that layout happens to fit the target's tiers
            for core, (schedule, _) in zip(ir.cores, schedules, strict=True):
                try:
                    validate(core.graph, schedule, capacity, target.memory.alignment)
                except ScheduleError as exc:
                    raise NpuccError(
                        f"scheduler '{self.method}' ignores capacities (an ordering stage "
                        f"alone) and its layout does not fit the target: {exc}; use dan"
                    ) from None
        scheduled = ScheduledProgram(ir, schedules)
        # NOTE: each core's nodes' DDR bytes once, for the mesh timing, roofline and layer table
        replays = [r for _, r in schedules]
        nbytes = [core_ddr_bytes(target, r) for r in replays]
        makespan = ctx.stats["predicted_makespan"] = mesh_makespan(ir, replays, nbytes)
        ctx.stats["spills"] = sum(r.spills for _, r in schedules)
        peaks = merge_peaks(r.residency for _, r in schedules)  # npucc.ir.residency
        ctx.stats["peak"] = peaks
        ctx.stats["peak_l1_ub"] = peaks.get(COMBINED, 0)
        if self.peak_floor:
            floors = [peak_floor(core.graph, capacity) for core in ir.cores]
            ctx.stats["peak_floor"] = {
                "any": max((f.any for f in floors), default=0),
                "unspilled": max((f.unspilled for f in floors), default=0),
            }
        ctx.stats["extra_ddr"] = sum(r.extra_ddr for _, r in schedules)
        traffic = [node_traffic(target, r, nb) for r, nb in zip(replays, nbytes, strict=True)]
        ctx.stats["roofline"] = scheduled_roofline(scheduled, traffic, makespan).as_dict()
        ctx.stats["layers"] = rows_as_dicts(layer_table(scheduled, traffic))
        return scheduled
