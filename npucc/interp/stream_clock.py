"""The interpreter's clock: when each step of a stream starts and finishes.

NOTE: this is the interpreter's whole timing rule, the one list timer's (`target/timing.py`,
which the replay and the mesh timing run) so that interpreted makespans equal predicted ones:
each pipe of each core runs its instructions in order; a step starts once its pipe is free and
every flag it waits for is set; a flag is set when its setter finishes plus the NoC latency
between the two cores (`cost.sync_cycles`); an instruction's DDR bytes go through the mesh's
one shared DDR channel (the timer's `DdrChannel`); events take no time.
"""

from __future__ import annotations

from npucc.interp.steps import Step
from npucc.ir.stream import Flag, FlagKey
from npucc.target import Target
from npucc.target.cost import sync_cycles
from npucc.target.timing import DdrChannel


class StreamTiming:
    """Per-queue finish times, flag times, the DDR channel, and the latest finish per core."""

    __slots__ = ("target", "serial", "qfinish", "flag_time", "channel", "now", "core_end")

    def __init__(self, target: Target, queues: int, cores: int, serial: bool) -> None:
        self.target = target
        self.serial = serial  # one step at a time: each starts after everything before it
        self.qfinish = [0] * queues  # when each queue's latest instruction finishes
        self.flag_time: dict[FlagKey, int] = {}  # when each flag set so far is visible
        self.channel = DdrChannel(target)  # the mesh's shared DDR channel
        self.now = 0  # the latest finish so far
        self.core_end = [0] * cores  # the latest finish on each core

    def ready(self, step: Step) -> int:
        """The earliest start of a step whose flags are all set: its pipe free, its flags seen."""
        start = self.qfinish[step.qid] if step.qid else 0
        for flag in step.line.waits:
            start = max(start, self.flag_time[flag.key])
        return start

    def start(self, step: Step) -> int:
        """When a step taken from the ready heap starts."""
        return max(step.start, self.now) if self.serial else step.start

    def run(self, step: Step, start: int) -> int:
        """The finish of an instruction started at `start`; its pipe is busy until then."""
        finish = self.channel.transfer(step.ddr_bytes, step.cycles, start)
        self.qfinish[step.qid] = finish
        return finish

    def signal(self, flag: Flag, finish: int) -> None:
        """A flag set by a step that finished at `finish`."""
        self.flag_time[flag.key] = finish + sync_cycles(self.target, flag.src_at, flag.dst_at)

    def is_set(self, key: FlagKey) -> bool:
        """Whether a flag has been set."""
        return key in self.flag_time

    def done(self, step: Step, finish: int) -> None:
        """A step finished (an event finishes when it starts)."""
        self.now = max(self.now, finish)
        self.core_end[step.core] = max(self.core_end[step.core], finish)
