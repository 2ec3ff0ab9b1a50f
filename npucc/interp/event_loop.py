"""The reference interpreter: executes a parsed stream on numpy memories, checks it, times it.

Each pipe of each core is an in-order queue; alloc/free/barrier events run as soon as their
flags are set. The next instruction is the ready one with the earliest start time (ties: events
by line, then pipes in PIPES order). This module is the event loop; each concern it drives has
its module: `stream_clock` (when steps start and finish), `memories` (data, liveness, the written
mask), `races` (vector clocks), `counters` (cycles, energy, bytes), `exec_trace` (the trace).
"""

from __future__ import annotations

import hashlib
import heapq
import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from npucc import progress
from npucc.errors import NpuccError
from npucc.gcpause import gc_paused
from npucc.interp.access import Access, resolved
from npucc.interp.counters import Counters, Tally
from npucc.interp.exec_trace import Trace, Tracer
from npucc.interp.memories import Memories, Memory
from npucc.interp.ops import EXEC, View, gather_indices, gather_rows
from npucc.interp.races import RaceDetector
from npucc.interp.steps import Step, Steps, fail
from npucc.interp.stream_clock import StreamTiming
from npucc.ir.dtypes import NUMPY_DTYPES
from npucc.ir.isa import DDR, Gather, Instr, MemRef, Operand, Spill
from npucc.ir.isa_cost import operand_bytes
from npucc.ir.residency import stream_residency
from npucc.ir.stream import Event, Stream, StreamError
from npucc.ir.stream_parse import load_stream
from npucc.parallel import fork_map, forks

# NOTE: a checked run of at least so many steps runs its checks in a forked worker while this
# process computes the data (`jobs` > 1): below it the fork's cost (~0.05-0.1 CPU s) is not won
SPLIT_STEPS = 20_000


class MemView:
    """The data of one core's memories, as ops.py reads and writes them (a `View`)."""

    __slots__ = ("memories", "core", "target", "dtypes", "mems", "views")

    def __init__(self, memories: Memories, core: int) -> None:
        self.memories = memories
        self.core = core
        self.target = memories.stream.target
        self.dtypes: dict[str, np.dtype] = {}  # tier -> its elements' numpy type
        self.mems: dict[str, Memory] = {}  # tier -> its memory (`Memories.mem`'s, kept)
        # (id of an operand, dims, strides, dtype) -> (the operand, its view) of an on-chip
        # tier. NOTE: a view of an on-chip memory stays valid for the whole run (its `data`
        # is never replaced); DDR's are not kept (the image's pages give way to `data` when
        # it is materialized). The operand is held so that its id is not reused. VGG-19:
        # 405,929 views asked for, 82,976 distinct on-chip ones kept
        self.views: dict[tuple[int, tuple[int, ...], tuple[int, ...], np.dtype | None],
                         tuple[Operand, np.ndarray]] = {}  # fmt: skip

    def __call__(
        self, ref: Operand, dims: tuple[int, ...], strides: tuple[int, ...],
        dtype: np.dtype | None = None,
    ) -> np.ndarray:  # fmt: skip
        """The elements of a pattern at `ref`, as `dtype` (default: its tier's element type)."""
        key = (id(ref), dims, strides, dtype)
        known = self.views.get(key)
        if known is not None:
            return known[1]
        mref = cast(MemRef, ref)  # the parser accepts only resolved (MemRef) operands
        tier = mref.tier
        kind = self.dtype(tier) if dtype is None else dtype
        mem = self.mems.get(tier)
        if mem is None:
            mem = self.mems[tier] = self.memories.mem(self.core, tier)
        view = mem.view(mref.addr, dims, strides, kind)
        if tier != DDR:
            self.views[key] = (ref, view)
        return view

    def dtype(self, tier: str) -> np.dtype:
        """The numpy type of one tier's elements (L0C: the accumulator's)."""
        kind = self.dtypes.get(tier)
        if kind is None:
            kind = self.dtypes[tier] = np.dtype(NUMPY_DTYPES[self.target.tier_dtype(tier)])
        return kind


@dataclass(slots=True)
class RunResult:
    """What a run produced: outputs, timing, energy, residency and counters."""

    outputs: dict[str, np.ndarray]
    pipe_cycles: dict[str, int]  # pipe -> cycles busy, summed over cores
    makespan: int  # latest finish, cycles
    energy: float  # picojoules
    peak: dict[str, int]  # tier (and L1+UB) -> peak residency (npucc.ir.residency)
    counters: Counters  # bytes per path, macs, vector elements, instruction counts
    core_makespan: dict[tuple[int, int], int]  # (row, col) -> latest finish on that core
    trace: Trace | None = None  # every instruction and alloc/free, when run with trace=True

    def report(self) -> dict[str, object]:
        """Everything but the outputs, as JSON-ready data."""
        return {
            "makespan": self.makespan,
            "pipe_cycles": self.pipe_cycles,
            "core_makespan": {f"{r},{c}": v for (r, c), v in self.core_makespan.items()},
            "energy_pj": self.energy,
            "peak_bytes": self.peak,
            "counters": self.counters,
        }


def run_file(
    cmd_path: str | Path,
    inputs: dict[str, np.ndarray],
    *,
    check: bool = True,
    serial: bool = False,
    trace: bool = False,
    timing_only: bool = False,
) -> RunResult:
    """Load `cmd_path` and its image `cmd_path.bin`, then run it (options as for run_stream)."""
    stream, image = load_program(cmd_path)
    with gc_paused():  # NOTE: see run_stream
        machine = _Machine(stream, check and not timing_only, serial, trace, timing_only)
        return machine.run(image, inputs)


def load_program(cmd_path: str | Path) -> tuple[Stream, bytes]:
    """The parsed stream `cmd_path` and its image `cmd_path.bin` (checked against its header)."""
    stream = load_stream(cmd_path)
    return stream, load_image(cmd_path, stream)


def run_stream(
    stream: Stream,
    image: bytes,
    inputs: dict[str, np.ndarray],
    *,
    check: bool = True,
    serial: bool = False,
    trace: bool = False,
    timing_only: bool = False,
    image_checked: bool = False,
    jobs: int = 1,
) -> RunResult:
    """Run a stream; `check=False` skips per-access checks, `serial=True` runs one at a time.

    `trace=True` records every instruction and alloc/free in `RunResult.trace` (for reports).
    `timing_only=True` times every instruction but computes no data (implies `check=False`;
    the outputs are then meaningless). `image_checked=True`: the caller checked `image`
    against the stream's header (`load_image`, or the compile that wrote both). `jobs` > 1
    lets a big checked run check in a forked worker while this process computes (`_split`):
    the same result and the same first error.
    """
    if not image_checked:
        _check_image(stream, image, "image")
    # NOTE: the cyclic collector is paused (gc_paused): a run leaves no cyclic garbage
    # (light ResNet-50, timing-only or checked), and full collections over the steps and
    # the stream's objects took a third of a timing-only run
    with progress.stage("interpret"), gc_paused():
        if check and not timing_only and not trace and _splits(stream, jobs):
            return _split(stream, image, inputs, serial)
        machine = _Machine(stream, check and not timing_only, serial, trace, timing_only)
        return machine.run(image, inputs)


def _splits(stream: Stream, jobs: int) -> bool:
    """Whether a checked run of `stream` checks in a forked worker (`_split`): a big stream,
    no gather (the rows a gather's table read checks are the values of its indices, data the
    worker does not compute), and `jobs` and the platform allowing a fork."""
    lines = sum(len(core.lines) for core in stream.cores)
    return (
        lines >= SPLIT_STEPS
        and forks(jobs, 2)
        and not any(isinstance(line.instr, Gather) for core in stream.cores for line in core.lines)
    )


def _split(stream: Stream, image: bytes, inputs: dict[str, np.ndarray], serial: bool) -> RunResult:
    """A checked run as two runs of the same steps in the same order: this process computes
    the data without the checks, a forked worker checks without computing data.

    NOTE: both runs take every step in the one order the clock gives (it depends on no data)
    and both make the same liveness changes; each error is placed at the step that raised it
    (`_Machine.at`) and the earlier one is raised, the worker's at the same step (a step's
    checks come before its execution): the error a checked run in one process raises.
    """

    def part(checks: bool) -> tuple[RunResult | None, int, NpuccError | None]:
        machine = _Machine(stream, checks, serial, False, False, compute=not checks)
        try:
            result = machine.run(image, inputs)
        except NpuccError as exc:
            return None, machine.at, exc
        return (None if checks else result), machine.at, None

    (result, at, error), (_, check_at, check_error) = fork_map(part, [False, True], 2, here=0)
    if check_error is not None and (error is None or check_at <= at):
        raise check_error
    if error is not None:
        raise error
    assert result is not None
    return result


def load_image(cmd_path: str | os.PathLike[str], stream: Stream) -> bytes:
    """The image `cmd_path.bin` of a loaded stream, its size and sha256 checked against the
    stream's header."""
    bin_path = Path(f"{cmd_path}.bin")
    try:
        image = bin_path.read_bytes()
    except OSError as exc:
        raise NpuccError(f"cannot read image {bin_path}: {exc.strerror}") from None
    _check_image(stream, image, str(bin_path))
    return image


def _check_image(stream: Stream, image: bytes, name: str) -> None:
    name = f"{stream.where(stream.image_line)}: {name}"
    if len(image) != stream.image_size:
        raise NpuccError(
            f"{name}: size {len(image)} differs from the stream header's {stream.image_size}"
        )
    if hashlib.sha256(image).hexdigest() != stream.image_sha256:
        raise NpuccError(f"{name}: sha256 differs from the stream header's")


class _Machine:
    """One run: the steps, the ready heap, and the state each concern keeps."""

    __slots__ = ("stream", "check", "timing_only", "compute", "steps", "qhead", "heap",
                 "timing", "memories", "races", "tally", "tracer", "at")  # fmt: skip

    def __init__(
        self, stream: Stream, check: bool, serial: bool, trace: bool, timing_only: bool,
        compute: bool = True,
    ) -> None:  # fmt: skip
        self.stream = stream
        self.check = check
        self.timing_only = timing_only
        self.compute = compute and not timing_only  # whether instructions compute their data
        self.at = 0  # the steps taken when an error is raised (1 + all of them: at the end)
        self.steps = Steps(stream, serial, timing_only)
        self.qhead = [0] * len(self.steps.qnames)  # index of each queue's next step
        self.heap: list[tuple[int, int, Step]] = []  # (start, or 0 when serial; rank; step)
        self.timing = StreamTiming(stream.target, len(self.steps.qnames), len(stream.cores),
                                   serial)  # fmt: skip
        self.memories = Memories(stream)
        # NOTE: vector clocks only serve the checks: an unchecked run keeps none
        self.races = RaceDetector(stream, self.steps) if check else None
        self.tally = Tally(stream.target)
        self.tracer = Tracer(stream.target) if trace else None

    def view(self, core: int) -> View:
        """The data of core index `core`'s memories, as ops.py reads and writes them."""
        return MemView(self.memories, core)

    def run(self, image: bytes, inputs: dict[str, np.ndarray]) -> RunResult:
        """Load, run every step, and collect the result."""
        self.memories.load(image, inputs, self.timing_only)
        cores = self.stream.cores
        views = [self.view(ci) for ci in range(len(cores))]
        steps = self.steps.all
        for step in steps:
            if step.pending == 0 and (step.qid == 0 or step.seq == 1):
                self._push(step)
        executed = 0
        every = progress.EVERY
        timing = self.timing
        with progress.task("interpret", len(steps)) as bar:
            try:
                while self.heap:
                    _, _, step = heapq.heappop(self.heap)
                    start = timing.start(step)
                    self.memories.release_until(start)
                    executed += 1
                    if step.qid:
                        finish = self._execute(step, start, views[step.core])
                    else:
                        finish = self._event(step, start)
                    timing.done(step, finish)
                    if bar is not None and executed % every == 0:
                        bar.update(executed)
            finally:
                self.at = executed
        if executed != len(steps):
            raise self._deadlock()
        self.at = executed + 1
        tally = self.tally
        tally.close()
        return RunResult(
            outputs=self.memories.outputs(self.check),
            pipe_cycles=tally.busy,
            makespan=timing.now,
            energy=tally.energy,
            peak=stream_residency(self.stream),
            counters=tally.counters,
            core_makespan={(c.row, c.col): t for c, t in zip(cores, timing.core_end, strict=True)},
            trace=self.tracer.trace if self.tracer is not None else None,
        )

    def _push(self, step: Step) -> None:
        step.start = self.timing.ready(step)
        heapq.heappush(self.heap, (0 if self.timing.serial else step.start, step.rank, step))

    def _set_flags(self, step: Step, finish: int, vc: np.ndarray | None) -> None:
        if self.races is not None and vc is not None:
            self.races.publish(step, vc)
        queues = self.steps.queues
        for flag in step.line.sets:
            self.timing.signal(flag, finish)
            waiter = self.steps.waiter[flag.key]  # the parser checked that every set is waited
            waiter.pending -= 1
            if waiter.pending == 0 and (
                waiter.qid == 0 or queues[waiter.qid][self.qhead[waiter.qid]] is waiter
            ):
                self._push(waiter)

    def _event(self, step: Step, start: int) -> int:
        ev = cast(Event, step.line.instr)  # steps of queue 0 hold the events
        self.tally.event()
        if ev.kind == "alloc":
            self.memories.make_live(step, ev.tier, ev.addr, ev.size)
        elif ev.kind == "free":
            self.memories.end_live(step, ev.tier, ev.addr, ev.size)
            self.memories.release(step.core, ev.tier, ev.addr, ev.size)
        if self.tracer is not None and ev.kind != "barrier":
            core = self.stream.cores[step.core]
            self.tracer.mem((core.row, core.col), start, ev.kind, ev.tier, ev.addr, ev.size,
                            step.line.lineno)  # fmt: skip
        vc = self.races.begin(step) if self.races is not None else None
        self._set_flags(step, start, vc)
        return start

    def _execute(self, step: Step, start: int, view: View) -> int:
        ins = cast(Instr, step.line.instr)  # steps of pipe queues hold the instructions
        qid = step.qid
        races = self.races
        vc = races.begin(step) if races is not None else None
        finish = self.timing.run(step, start)
        spill = isinstance(ins, Spill)
        if isinstance(ins, Spill):
            self._spill_residency(step, ins, finish)
        if isinstance(ins, Gather) and self.compute:
            self._gather_rows(step, ins, vc, view)
        if vc is not None:
            for acc in step.reads:
                self._check(step, acc, vc, False, spill)
            for acc in step.writes:
                self._check(step, acc, vc, True, spill, acc in step.reads)
        if self.compute:
            self.memories.before_writes(step)
            EXEC[ins.opcode](view, ins)
        if races is not None:
            races.record(step)
            self.memories.record_writes(step, spill)
        if self.tracer is not None:
            core = self.stream.cores[step.core]
            self.tracer.instr((core.row, core.col), step.line.queue, start, finish, ins,
                              step.line.lineno)  # fmt: skip
        self.qhead[qid] += 1
        self.tally.instr(ins, step.line.queue, step.cycles, step.energy)
        self._set_flags(step, finish, vc)
        queue = self.steps.queues[qid]
        if self.qhead[qid] < len(queue) and queue[self.qhead[qid]].pending == 0:
            self._push(queue[self.qhead[qid]])
        return finish

    def _check(
        self, step: Step, acc: Access, vc: np.ndarray, write: bool, spill: bool,
        read_too: bool = False,
    ) -> None:  # fmt: skip
        """One access: liveness and initialisation, then ordering against other queues.

        NOTE: a write of what the step also read (`read_too`: an accumulating dst, one Access)
        skips what the read checked of the same units just before (live; after the last
        write): the answer cannot differ, and only its reads by other queues are left.
        """
        assert self.races is not None  # checked runs only
        if not read_too:
            mem = self.memories.mem(step.core, acc.tier)
            self.memories.check(step, mem, acc, write, spill, self.steps.qnames[step.qid])
        self.races.check(step, acc, vc, write, read_too)

    def _gather_rows(self, step: Step, ins: Gather, vc: np.ndarray | None, view: View) -> None:
        """Check a gather's indices (written, in range) and add the table rows to its reads."""
        if vc is not None:
            self._check(step, step.reads[0], vc, False, False)
        idx = gather_indices(view, ins)
        whole = idx == np.trunc(idx)  # NaN and inf included: not an index
        if not whole.all():
            pos = int(np.argmin(whole))
            raise fail(self.stream, step, f"gather index {idx[pos]} (position {pos}) is not an "
                                          "integer")  # fmt: skip
        bad = (idx < -ins.rows) | (idx >= ins.rows)
        if bad.any():
            pos = int(np.argmax(bad))
            raise fail(self.stream, step, f"gather index {int(idx[pos])} (position {pos}) out of "
                                          f"range [{-ins.rows}, {ins.rows})")  # fmt: skip
        if vc is not None:
            first = gather_rows(idx.astype(np.int64), ins.rows)[:, None] * ins.row
            rows = (first + np.arange(ins.row)).ravel()
            units = (self.memories.storage.itemsize, self.memories.unit)
            step.reads = (*step.reads, Access("table", ins.table, (), (), rows, units))

    def _spill_residency(self, step: Step, ins: Spill, finish: int) -> None:
        dst = resolved(ins.dst)
        nbytes = ins.size * operand_bytes(self.stream.target, ins, "src")
        if dst.tier != DDR:
            self.memories.make_live(step, dst.tier, dst.addr, nbytes)
            return
        src = resolved(ins.src)
        self.memories.end_live(step, src.tier, src.addr, nbytes)
        self.memories.release_at(finish, step.core, src.tier, src.addr, nbytes)

    def _deadlock(self) -> StreamError:
        steps = self.steps
        stuck = []
        for qid in range(1, len(steps.queues)):
            if self.qhead[qid] < len(steps.queues[qid]):
                stuck.append((steps.qnames[qid], steps.queues[qid][self.qhead[qid]]))
        stuck += [(s.line.queue, s) for s in steps.all if s.qid == 0 and s.pending]
        parts = []
        for name, s in stuck:
            missing = [str(f) for f in s.line.waits if not self.timing.is_set(f.key)]
            parts.append(f"{name} at line {s.line.lineno} waits {', '.join(missing)}")
        first = min(s.line.lineno for _, s in stuck)
        return fail(self.stream, first, "deadlock: no queue can move; " + "; ".join(parts))
