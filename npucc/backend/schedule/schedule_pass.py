"""The `schedule` pass: order, place and time every core's DAG with a named scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.backend.lower.program import TiledProgram
from npucc.backend.schedule import Schedule
from npucc.backend.schedule.mesh_timing import mesh_makespan
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.replay import Replay
from npucc.passes import CompileContext, Pass, register
from npucc.target import Target
from npucc.target.cost import TargetSpillModel


@dataclass(slots=True)
class ScheduledProgram:
    """A TiledProgram with one schedule and its replay per core."""

    program: TiledProgram
    schedules: list[tuple[Schedule, Replay]]  # per core, in program.cores order

    @property
    def makespan(self) -> int:
        """Predicted makespan over all cores, cross-core waits included."""
        return mesh_makespan(self.program, [r for _, r in self.schedules])

    def verify(self) -> None:
        """Every core has exactly one schedule covering all its nodes."""
        self.program.verify()
        if len(self.schedules) != len(self.program.cores):
            raise ValueError("one schedule per core expected")
        for core, (schedule, replay) in zip(self.program.cores, self.schedules, strict=True):
            if len(replay.order) != len(core.graph) + 2 * len(schedule.spills):
                raise ValueError(f"core {core.row},{core.col}: schedule does not cover the DAG")

    def to_text(self) -> str:
        """The scheduled text form (see npucc.ir.tiled_text); it parses back."""
        from npucc.ir.tiled_text import scheduled_to_text

        return scheduled_to_text(self)


def capacities(target: Target) -> dict[str, int]:
    """Bytes of each on-chip tier a per-core schedule may use."""
    return target.memory.on_chip()


@register
@dataclass
class SchedulePass(Pass):
    """Schedule each core with `method` (original, dan, ...) under the target's capacities."""

    name = "schedule"
    method: str = "dan"

    def run(self, ir: TiledProgram, ctx: CompileContext) -> ScheduledProgram:
        target = ctx.target
        capacity = capacities(target)
        spill_model = TargetSpillModel(target)
        schedules = [
            schedule_graph(core.graph, self.method, capacity, spill_model, target.memory.alignment)
            for core in ir.cores
        ]
        scheduled = ScheduledProgram(ir, schedules)
        ctx.stats["predicted_makespan"] = scheduled.makespan
        ctx.stats["spills"] = sum(r.spills for _, r in schedules)
        ctx.stats["peak_l1_ub"] = max((r.peak for _, r in schedules), default=0)
        return scheduled
