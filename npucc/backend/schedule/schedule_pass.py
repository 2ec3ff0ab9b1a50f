"""The `schedule` pass: order, place and time every core's DAG with a named scheduler."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.backend.lower.program import TiledProgram
from npucc.backend.schedule import Schedule
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.replay import Replay
from npucc.passes import CompileContext, Pass, register
from npucc.target.cost import TargetSpillModel


@dataclass(slots=True)
class ScheduledProgram:
    """A TiledProgram with one schedule and its replay per core."""

    program: TiledProgram
    schedules: list[tuple[Schedule, Replay]]  # per core, in program.cores order

    @property
    def makespan(self) -> int:
        """Predicted makespan: the latest core's."""
        return max((r.makespan for _, r in self.schedules), default=0)

    def verify(self) -> None:
        """Every core has exactly one schedule covering all its nodes."""
        self.program.verify()
        if len(self.schedules) != len(self.program.cores):
            raise ValueError("one schedule per core expected")
        for core, (schedule, replay) in zip(self.program.cores, self.schedules, strict=True):
            if len(replay.order) != len(core.graph) + 2 * len(schedule.spills):
                raise ValueError(f"core {core.row},{core.col}: schedule does not cover the DAG")

    def to_text(self) -> str:
        """Per core: the order with each node's op, pipe, start and finish."""
        lines = []
        for core, (schedule, replay) in zip(self.program.cores, self.schedules, strict=True):
            lines.append(
                f"core {core.row} {core.col} method={schedule.method} makespan={replay.makespan}"
                f" peak={replay.peak} spills={replay.spills} extra_ddr={replay.extra_ddr}"
            )
            for v in replay.order:
                node = replay.nodes[v]
                bufs = ",".join(f"b{b}@{replay.offset_at(v, b)}" for b in node.bufs)
                lines.append(
                    f"  %{v} {node.op} {node.pipe or '-'} [{replay.start[v]},{replay.finish[v]})"
                    f" {bufs}"
                )
        return "\n".join(lines) + "\n"


@register
@dataclass
class SchedulePass(Pass):
    """Schedule each core with `method` (original, dan, ...) under the target's capacities."""

    name = "schedule"
    method: str = "original"

    def run(self, ir: TiledProgram, ctx: CompileContext) -> ScheduledProgram:
        target = ctx.target
        capacity = {t: target.capacity[t] for t in ("L1", "UB", "L0A", "L0B", "L0C")}
        spill_model = TargetSpillModel(target)
        schedules = [
            schedule_graph(core.graph, self.method, capacity, spill_model, target.alignment)
            for core in ir.cores
        ]
        scheduled = ScheduledProgram(ir, schedules)
        ctx.stats["predicted_makespan"] = scheduled.makespan
        ctx.stats["spills"] = sum(r.spills for _, r in schedules)
        ctx.stats["peak_l1_ub"] = max((r.peak for _, r in schedules), default=0)
        return scheduled
