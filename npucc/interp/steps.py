"""A stream's lines as the interpreter's steps, each in its queue, with its cost precomputed.

Queue 0 holds every pipe-less event (alloc, free, barrier: dataflow, not in order); queue
`1 + core * len(PIPES) + pipe` is one pipe of one core, in program order.
"""

from __future__ import annotations

from collections.abc import Sequence

from npucc.interp.access import Access, accesses, check_unit
from npucc.ir.isa import PIPES
from npucc.ir.isa_cost import ddr_bytes, instr_cycles, instr_energy
from npucc.ir.stream import Event, FlagKey, Line, Stream, StreamError

_PIPE_RANK = 1 << 40  # pipes sort after events at equal start time


class Step:
    """One line, with everything precomputed for its execution."""

    # set for pipe instructions only (events have no cost or accesses)
    cycles: int
    energy: float
    ddr_bytes: int  # bytes it moves to or from DDR (through the shared channel on a mesh)
    reads: Sequence[Access]
    writes: Sequence[Access]

    __slots__ = ("line", "core", "qid", "seq", "rank", "pending", "cycles", "energy", "ddr_bytes",
                 "reads", "writes", "start")  # fmt: skip

    def __init__(self, line: Line, core: int, qid: int, seq: int, rank: int) -> None:
        self.line = line
        self.core = core
        self.qid = qid  # 0 for events
        self.seq = seq  # position in its queue, from 1 (0 for events)
        self.rank = rank  # heap tie-break among steps ready at the same time (unique)
        self.pending = len(line.waits)  # flags not yet set
        self.start = 0  # earliest start, once ready


class Steps:
    """Every step of a stream, by queue, and the step that waits for each flag."""

    __slots__ = ("all", "queues", "qnames", "waiter")

    def __init__(self, stream: Stream, serial: bool, timing_only: bool) -> None:
        target = stream.target
        unit = check_unit(target)
        multi = len(stream.cores) > 1
        self.qnames = [""] + [
            f"{p}@{c.row},{c.col}" if multi else p for c in stream.cores for p in PIPES
        ]
        self.queues: list[list[Step]] = [[] for _ in self.qnames]
        self.all: list[Step] = []
        self.waiter: dict[FlagKey, Step] = {}
        # (cycles, energy, DDR bytes, reads, writes) by instruction, one lookup a step: a parsed
        # stream's repeated lines share one (VGG-19: 182 k pipe steps, 47 k instructions; the
        # event loop replaces a step's reads, never changes them)
        known: dict[int, tuple[int, float, int, Sequence[Access], Sequence[Access]]] = {}
        pipe_of = {p: i for i, p in enumerate(PIPES)}
        steps, waiter, queues = self.all, self.waiter, self.queues
        for ci, core in enumerate(stream.cores):
            first = 1 + ci * len(PIPES)  # the queue id of the core's first pipe
            for line in core.lines:
                ins = line.instr
                if isinstance(ins, Event):
                    step = Step(line, ci, 0, 0, line.lineno)
                else:
                    qid = first + pipe_of[line.queue]
                    queue = queues[qid]
                    step = Step(line, ci, qid, len(queue) + 1, _PIPE_RANK + qid)
                    cost = known.get(id(ins))
                    if cost is None:
                        acc = ((), ()) if timing_only else accesses(ins, target, unit)
                        cost = known[id(ins)] = (
                            instr_cycles(target, ins), instr_energy(target, ins),
                            ddr_bytes(target, ins), *acc,
                        )  # fmt: skip
                    step.cycles, step.energy, step.ddr_bytes, step.reads, step.writes = cost
                    queue.append(step)
                if serial:
                    step.rank = line.lineno
                steps.append(step)
                for flag in line.waits:
                    waiter[flag.key] = step

    def line_of(self, qid: int, seq: int) -> int:
        """The stream line of the `seq`-th step of queue `qid`."""
        return self.queues[qid][seq - 1].line.lineno


def fail(stream: Stream, at: Step | int, message: str) -> StreamError:
    """The error of a step (or of a line number) of `stream`."""
    lineno = at if isinstance(at, int) else at.line.lineno
    return StreamError(f"{stream.where(lineno)}: {message}")
