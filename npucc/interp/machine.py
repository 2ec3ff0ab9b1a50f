"""The reference interpreter: executes a parsed stream on numpy memories, checks it, times it.

Each pipe of each core is an in-order queue; alloc/free/barrier events run as soon as their
flags are set. The next instruction is the ready one with the earliest start time (ties: events
by line, then pipes in PIPES order). Every data access is checked against per-element state
(4-byte granularity): liveness, the written mask, and the last writer and readers, whose
vector clocks (one entry per pipe, carried by flags) must be ordered before the access.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypedDict, cast

import numpy as np

from npucc import progress
from npucc.errors import NpuccError
from npucc.interp.ops import (
    EXEC,
    View,
    gather_indices,
    gather_rows,
    img2col_args,
    img2col_index,
    img2col_reads,
)
from npucc.interp.parser import (
    Event,
    FlagKey,
    Line,
    Stream,
    StreamError,
    load_stream,
)
from npucc.interp.trace import Trace, TraceInstr, TraceMem, TraceOperand
from npucc.ir.dtypes import HOST_DTYPES, INDEX_DTYPE, to_device, to_host
from npucc.ir.isa import (
    DDR,
    NOC,
    PIPES,
    Copy,
    Gather,
    Img2Col,
    Instr,
    MemRef,
    Mmad,
    NocCopy,
    Operand,
    Spill,
    VBinary,
    VFill,
    VReduce,
    VUnary,
)
from npucc.ir.isa_cost import ddr_bytes, gather_bytes, instr_cycles, instr_energy
from npucc.target.cost import ddr_channel, sync_cycles

_NEVER = np.iinfo(np.int64).max  # clock entry of the initial writer: ordered before everything
_PIPE_RANK = 1 << 40  # pipes sort after events at equal start time


class Counters(TypedDict):
    """Statistics of a run (a plain dict at run time)."""

    bytes: dict[str, int]  # "SRC->DST" tier path -> bytes copied
    noc_byte_hops: int  # bytes moved over the NoC times the hops each travelled
    macs: int
    vector_elements: int
    instructions: int
    events: int
    opcodes: dict[str, int]  # opcode -> instructions executed


@dataclass(slots=True)
class RunResult:
    """What a run produced: outputs, timing, energy, residency and counters."""

    outputs: dict[str, np.ndarray]
    pipe_cycles: dict[str, int]  # pipe -> cycles busy, summed over cores
    makespan: int  # latest finish, cycles
    energy: float  # picojoules
    peak: dict[str, int]  # tier -> peak live bytes (maximum over cores)
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
    stream = load_stream(cmd_path)
    bin_path = Path(f"{cmd_path}.bin")
    try:
        image = bin_path.read_bytes()
    except OSError as exc:
        raise NpuccError(f"cannot read image {bin_path}: {exc.strerror}") from None
    _check_image(stream, image, str(bin_path))
    return _Machine(stream, check and not timing_only, serial, trace, timing_only).run(
        image, inputs
    )


def run_stream(
    stream: Stream,
    image: bytes,
    inputs: dict[str, np.ndarray],
    *,
    check: bool = True,
    serial: bool = False,
    trace: bool = False,
    timing_only: bool = False,
) -> RunResult:
    """Run a stream; `check=False` skips per-access checks, `serial=True` runs one at a time.

    `trace=True` records every instruction and alloc/free in `RunResult.trace` (for reports).
    `timing_only=True` times every instruction but computes no data (implies `check=False`;
    the outputs are then meaningless).
    """
    _check_image(stream, image, "image")
    return _Machine(stream, check and not timing_only, serial, trace, timing_only).run(
        image, inputs
    )


def _check_image(stream: Stream, image: bytes, name: str) -> None:
    name = f"{stream.where(stream.image_line)}: {name}"
    if len(image) != stream.image_size:
        raise NpuccError(
            f"{name}: size {len(image)} differs from the stream header's {stream.image_size}"
        )
    if hashlib.sha256(image).hexdigest() != stream.image_sha256:
        raise NpuccError(f"{name}: sha256 differs from the stream header's")


@lru_cache(maxsize=4096)
def _is_dense(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    expected = 1
    for d, s in zip(reversed(dims), reversed(strides), strict=True):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def strided(
    arr: np.ndarray, base: int, dims: tuple[int, ...], strides: tuple[int, ...]
) -> np.ndarray:
    """Writable view of arr's elements base + sum(i*s) for i in dims (strides in elements).

    The same view as `as_strided`, built with the ndarray constructor (several times cheaper).
    """
    if _is_dense(dims, strides):
        return arr[base : base + math.prod(dims)].reshape(dims)
    size = arr.itemsize
    return np.ndarray(dims, arr.dtype, arr, base * size, tuple(s * size for s in strides))


@lru_cache(maxsize=4096)
def _canonical(
    dims: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same set of elements with broadcast and unit dims dropped and dense dims merged."""
    merged: list[list[int]] = []
    for d, s in zip(reversed(dims), reversed(strides), strict=True):
        if d == 1 or s == 0:
            continue
        if merged and merged[-1][0] * merged[-1][1] == s:
            merged[-1][0] *= d
        else:
            merged.append([d, s])
    merged.reverse()
    return tuple(d for d, _ in merged), tuple(s for _, s in merged)


def _resolved(ref: Operand) -> MemRef:
    """An operand of a parsed stream: the parser accepts only resolved (MemRef) operands."""
    assert isinstance(ref, MemRef)
    return ref


class _Access:
    """The set of elements one operand of one instruction touches, for checks and bookkeeping."""

    __slots__ = ("name", "tier", "base", "dims", "strides", "index", "lo", "hi")

    def __init__(
        self,
        name: str,
        operand: Operand,
        dims: tuple[int, ...],
        strides: tuple[int, ...],
        index: np.ndarray | None = None,
    ) -> None:
        ref = _resolved(operand)
        self.name = name
        self.tier = ref.tier
        self.base = ref.addr >> 2
        self.dims, self.strides = _canonical(dims, strides)
        self.index = index  # explicit element offsets (img2col source), else a strided pattern
        dense = index is None and len(self.dims) <= 1 and self.strides in ((), (1,))
        self.lo = self.base if dense else -1  # a dense pattern is the slice [lo, hi)
        self.hi = self.base + math.prod(self.dims)

    def get(self, arr: np.ndarray) -> np.ndarray:
        """The touched elements of a per-element array."""
        if self.lo >= 0:
            return arr[self.lo : self.hi]
        if self.index is not None:
            return arr[self.base :][self.index]
        return strided(arr, self.base, self.dims, self.strides)

    def put(self, arr: np.ndarray, value: object) -> None:
        """Assign to the touched elements of a per-element array."""
        if self.lo >= 0:
            arr[self.lo : self.hi] = value
        elif self.index is not None:
            arr[self.base :][self.index] = value
        else:
            strided(arr, self.base, self.dims, self.strides)[...] = value

    def address(self, pos: int) -> int:
        """Byte address of the pos-th touched element."""
        if self.index is not None:
            return (self.base + int(self.index[pos])) * 4
        coords = np.unravel_index(pos, self.dims) if self.dims else ()
        return (self.base + sum(int(c) * s for c, s in zip(coords, self.strides, strict=True))) * 4


def _accesses(ins: Instr) -> tuple[list[_Access], list[_Access]]:
    """The read and write element sets of an instruction."""
    reads: list[_Access] = []
    writes: list[_Access] = []
    if isinstance(ins, Spill):
        reads.append(_Access("src", ins.src, (ins.size,), (1,)))
        writes.append(_Access("dst", ins.dst, (ins.size,), (1,)))
    elif isinstance(ins, Img2Col):
        args = img2col_args(ins)
        reads.append(_Access("src", ins.src, (), (), img2col_reads(*args)))
        writes.append(_Access("dst", ins.dst, (img2col_index(*args)[0].size,), (1,)))
    elif isinstance(ins, Mmad):
        reads.append(_Access("a", ins.a, (ins.m * ins.k,), (1,)))
        reads.append(_Access("b", ins.b, (ins.k * ins.n,), (1,)))
        if ins.acc:
            reads.append(_Access("dst", ins.dst, (ins.m * ins.n,), (1,)))
        writes.append(_Access("dst", ins.dst, (ins.m * ins.n,), (1,)))
    elif isinstance(ins, VReduce):
        outer = len(ins.dims) - ins.nred
        reads.append(_Access("src", ins.src, ins.dims, ins.src_strides))
        writes.append(_Access("dst", ins.dst, ins.dims[:outer], ins.dst_strides))
    elif isinstance(ins, Gather):
        # the table rows read depend on the indices: _execute adds them once idx is checked
        reads.append(_Access("idx", ins.idx, (ins.extents()["idx"],), (1,)))
        writes.append(_Access("dst", ins.dst, (ins.n * ins.row,), (1,)))
    elif isinstance(ins, VBinary):
        reads.append(_Access("a", ins.a, ins.dims, ins.a_strides))
        reads.append(_Access("b", ins.b, ins.dims, ins.b_strides))
        writes.append(_Access("dst", ins.dst, ins.dims, ins.dst_strides))
    else:
        assert isinstance(ins, (Copy, VUnary, VFill))  # the other INSTRUCTIONS are handled above
        if not isinstance(ins, VFill):
            reads.append(_Access("src", ins.src, ins.dims, ins.src_strides))
        writes.append(_Access("dst", ins.dst, ins.dims, ins.dst_strides))
    return reads, writes


class _Mem:
    """One memory (a tier of a core, or DDR): data plus per-element checking state."""

    __slots__ = ("data", "written", "live", "wq", "wseq", "readers", "allocs", "live_bytes")

    def __init__(self, nbytes: int, queues: int = 1 << 31) -> None:
        n = nbytes // 4
        self.data = np.zeros(n, np.float32)
        self.written = np.zeros(n, bool)
        self.live = np.zeros(n, bool)
        # last writer's queue id (0: written before the start), in 2 bytes when ids fit
        self.wq = np.zeros(n, np.int16 if queues <= 1 << 15 else np.int32)
        self.wseq = np.zeros(n, np.int32)  # last writer's sequence number in its queue
        self.readers: dict[int, np.ndarray] = {}  # queue id -> last read's sequence number
        self.allocs: dict[int, int] = {}  # live regions: byte address -> bytes
        self.live_bytes = 0


class _Step:
    """One line, with everything precomputed for its execution."""

    # set for pipe instructions only (events have no cost or accesses)
    cycles: int
    energy: float
    ddr_bytes: int  # bytes it moves to or from DDR (through the shared channel on a mesh)
    reads: Sequence[_Access]
    writes: Sequence[_Access]

    __slots__ = ("line", "core", "qid", "seq", "rank", "pending", "cycles", "energy", "ddr_bytes",
                 "reads", "writes", "start")  # fmt: skip

    def __init__(self, line: Line, core: int, qid: int, seq: int, rank: int) -> None:
        self.line = line
        self.core = core
        self.qid = qid  # 0 for events
        self.seq = seq
        self.rank = rank
        self.pending = len(line.waits)
        self.start = 0


class _Machine:
    """The state of one run: queues, flags, memories, clocks and statistics."""

    __slots__ = ("stream", "check", "serial", "target", "cores", "mems", "ddr", "queues", "qnames",
                 "qvc", "qfinish", "qhead", "steps", "waiter", "flag_time", "flag_vc", "heap",
                 "noc", "releases", "now", "busy", "energy", "peak", "counters", "core_end",
                 "trace", "timing_only", "ddr_free")  # fmt: skip

    def __init__(
        self,
        stream: Stream,
        check: bool,
        serial: bool,
        trace: bool = False,
        timing_only: bool = False,
    ) -> None:
        self.stream = stream
        self.check = check
        self.serial = serial
        self.timing_only = timing_only
        self.trace = Trace() if trace else None
        self.target = stream.target
        self.cores = stream.cores
        multi = len(stream.cores) > 1
        self.qnames = [""] + [
            f"{p}@{c.row},{c.col}" if multi else p for c in stream.cores for p in PIPES
        ]
        self.queues: list[list[_Step]] = [[] for _ in self.qnames]
        self.steps: list[_Step] = []
        self.waiter: dict[FlagKey, _Step] = {}
        target = self.target
        self.counters: Counters = {
            "bytes": {},
            "noc_byte_hops": 0,
            "macs": 0,
            "vector_elements": 0,
            "instructions": 0,
            "events": 0,
            "opcodes": {},
        }
        for ci, core in enumerate(stream.cores):
            for line in core.lines:
                if isinstance(line.instr, Event):
                    step = _Step(line, ci, 0, 0, line.lineno)
                else:
                    qid = 1 + ci * len(PIPES) + PIPES.index(line.queue)
                    queue = self.queues[qid]
                    step = _Step(line, ci, qid, len(queue) + 1, _PIPE_RANK + qid)
                    step.cycles = instr_cycles(target, line.instr)
                    step.energy = instr_energy(target, line.instr)
                    step.ddr_bytes = ddr_bytes(target, line.instr)
                    step.reads, step.writes = ((), ()) if timing_only else _accesses(line.instr)
                    queue.append(step)
                if self.serial:
                    step.rank = line.lineno
                self.steps.append(step)
                for flag in line.waits:
                    self.waiter[flag.key] = step
        n = len(self.qnames)
        self.qvc = [self._clock() for _ in range(n)]
        self.qfinish = [0] * n
        self.qhead = [0] * n
        self.mems: list[dict[str, _Mem]] = [{} for _ in stream.cores]
        self.ddr = self._new_mem(DDR)
        self.noc = self._new_mem(NOC) if NOC in stream.extent else None
        self.flag_time: dict[FlagKey, int] = {}
        self.flag_vc: dict[FlagKey, np.ndarray] = {}
        self.heap: list[tuple[int, int, _Step]] = []
        self.releases: list[tuple[int, int, str, int, int]] = []
        self.now = 0
        self.ddr_free = 0  # when the mesh's shared DDR channel takes the next transfer
        self.busy = dict.fromkeys(PIPES, 0)
        self.energy = 0.0
        self.peak: dict[str, int] = {}
        self.core_end = [0] * len(stream.cores)

    # ------------------------------------------------------------------------------ helpers

    def _clock(self) -> np.ndarray:
        vc = np.zeros(len(self.qnames), np.int64)
        vc[0] = _NEVER
        return vc

    def fail(self, step: _Step | int, message: str) -> StreamError:
        lineno = step if isinstance(step, int) else step.line.lineno
        return StreamError(f"{self.stream.where(lineno)}: {message}")

    def mem(self, core: int, tier: str) -> _Mem:
        if tier == DDR:
            return self.ddr
        if tier == NOC:
            assert self.noc is not None  # the parser only accepts NOC inside onchip tensors
            return self.noc
        mems = self.mems[core]
        if tier not in mems:
            mems[tier] = self._new_mem(tier)
        return mems[tier]

    def _new_mem(self, tier: str) -> _Mem:
        """A memory of the bytes the stream addresses in `tier` (at most its capacity)."""
        nbytes, lineno = self.stream.extent[tier]
        try:
            return _Mem(nbytes, len(self.qnames))
        except (MemoryError, ValueError):  # a huge target: numpy cannot allocate it
            raise self.fail(lineno, f"cannot simulate {nbytes} bytes of {tier}") from None

    def view(self, core: int) -> View:
        def view(ref: Operand, dims: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
            mref = cast(MemRef, ref)  # the parser accepts only resolved (MemRef) operands
            return strided(self.mem(core, mref.tier).data, mref.addr >> 2, dims, strides)

        return view

    def line_of(self, qid: int, seq: int) -> int:
        return self.queues[qid][seq - 1].line.lineno

    # ------------------------------------------------------------------------------ run

    def run(self, image: bytes, inputs: dict[str, np.ndarray]) -> RunResult:
        self._load(image, inputs)
        views = [self.view(ci) for ci in range(len(self.cores))]
        for step in self.steps:
            if step.pending == 0 and (step.qid == 0 or step.seq == 1):
                self._push(step)
        executed = 0
        every = progress.EVERY
        with progress.task("interpret", len(self.steps)) as bar:
            while self.heap:
                _, _, step = heapq.heappop(self.heap)
                start = max(step.start, self.now) if self.serial else step.start
                while self.releases and self.releases[0][0] <= start:
                    self._release(*heapq.heappop(self.releases)[1:])
                executed += 1
                if step.qid:
                    finish = self._execute(step, start, views[step.core])
                else:
                    finish = self._event(step, start)
                self.now = max(self.now, finish)
                self.core_end[step.core] = max(self.core_end[step.core], finish)
                if bar is not None and executed % every == 0:
                    bar.update(executed)
        if executed != len(self.steps):
            raise self._deadlock()
        outputs = self._outputs()
        return RunResult(
            outputs=outputs,
            pipe_cycles=self.busy,
            makespan=self.now,
            energy=self.energy,
            peak=self.peak,
            counters=self.counters,
            core_makespan={
                (c.row, c.col): t for c, t in zip(self.cores, self.core_end, strict=True)
            },
            trace=self.trace,
        )

    def _load(self, image: bytes, inputs: dict[str, np.ndarray]) -> None:
        ddr = self.ddr
        ddr.data.view(np.uint8)[: len(image)] = np.frombuffer(image, np.uint8)
        declared = {t.name: t for t in self.stream.tensors.values() if t.kind == "input"}
        for name in inputs:
            if name not in declared:
                raise NpuccError(f"unknown input {json.dumps(name)} (inputs: "
                                 f"{', '.join(json.dumps(n) for n in declared)})")  # fmt: skip
        for tensor in self.stream.tensors.values():
            lo, hi = tensor.addr >> 2, (tensor.addr + tensor.nbytes) >> 2
            if tensor.kind == "onchip":  # live and unwritten in the on-chip buffer
                assert self.noc is not None
                self.noc.live[lo:hi] = True
                continue
            ddr.live[lo:hi] = True
            if tensor.kind == "const":
                ddr.written[lo:hi] = True
            elif tensor.kind == "input":
                if tensor.name not in inputs and self.timing_only:
                    continue  # timing computes no data: inputs are optional
                if tensor.name not in inputs:
                    raise NpuccError(f"missing input {json.dumps(tensor.name)}")
                value = np.asarray(inputs[tensor.name])
                if value.shape != tensor.shape:
                    raise NpuccError(f"input {json.dumps(tensor.name)} has shape "
                                     f"{value.shape}, expected {tensor.shape}")  # fmt: skip
                if tensor.dtype == INDEX_DTYPE:
                    if value.dtype.kind not in "iu":
                        raise NpuccError(f"input {json.dumps(tensor.name)} has dtype "
                                         f"{value.dtype}, expected integer indices "
                                         f"({INDEX_DTYPE})")  # fmt: skip
                    ddr.data[lo:hi].view("<i8")[...] = value.astype(np.int64).ravel()
                elif tensor.dtype in HOST_DTYPES:
                    ddr.data[lo:hi] = to_device(tensor.name, value, tensor.dtype).ravel()
                else:
                    ddr.data[lo:hi] = value.astype(np.float32).ravel()
                ddr.written[lo:hi] = True

    def _outputs(self) -> dict[str, np.ndarray]:
        outputs = {}
        for tensor in self.stream.tensors.values():
            if tensor.kind != "output":
                continue
            lo, hi = tensor.addr >> 2, (tensor.addr + tensor.nbytes) >> 2
            if self.check and not self.ddr.written[lo:hi].all():
                raise self.fail(tensor.lineno, f"output {json.dumps(tensor.name)} is not "
                                               "fully written at the end")  # fmt: skip
            data = self.ddr.data[lo:hi].reshape(tensor.shape)
            outputs[tensor.name] = to_host(tensor.name, data, tensor.dtype)  # a copy
        return outputs

    def _push(self, step: _Step) -> None:
        start = self.qfinish[step.qid] if step.qid else 0
        for flag in step.line.waits:
            start = max(start, self.flag_time[flag.key])
        step.start = start
        heapq.heappush(self.heap, (0 if self.serial else start, step.rank, step))  # rank: unique

    def _set_flags(self, step: _Step, finish: int, vc: np.ndarray) -> None:
        for flag in step.line.sets:
            key = flag.key
            self.flag_time[key] = finish + sync_cycles(self.target, flag.src_at, flag.dst_at)
            self.flag_vc[key] = vc
            waiter = self.waiter[key]  # the parser checked that every flag set is waited
            waiter.pending -= 1
            if waiter.pending == 0 and (
                waiter.qid == 0 or self.queues[waiter.qid][self.qhead[waiter.qid]] is waiter
            ):
                self._push(waiter)

    def _join(self, step: _Step, vc: np.ndarray) -> None:
        for flag in step.line.waits:
            np.maximum(vc, self.flag_vc[flag.key], out=vc)

    # ------------------------------------------------------------------------------ events

    def _event(self, step: _Step, start: int) -> int:
        ev = cast(Event, step.line.instr)  # steps of queue 0 hold the events
        self.counters["events"] += 1
        if ev.kind == "alloc":
            self._make_live(step, ev.tier, ev.addr, ev.size)
        elif ev.kind == "free":
            self._end_live(step, ev.tier, ev.addr, ev.size)
            self._release(step.core, ev.tier, ev.addr, ev.size)
        if self.trace is not None and ev.kind != "barrier":
            self._trace_mem(step, start, ev.kind, ev.tier, ev.addr, ev.size)
        vc = self._clock()
        self._join(step, vc)
        self._set_flags(step, start, vc)
        return start

    def _make_live(self, step: _Step, tier: str, addr: int, size: int) -> None:
        mem = self.mem(step.core, tier)
        lo, hi = addr >> 2, (addr + size) >> 2
        if mem.live[lo:hi].any():
            other = [f"{tier}[0x{a:06x}+{b}]" for a, b in mem.allocs.items() if a < addr + size
                     and addr < a + b] or ["being spilled out"]  # fmt: skip
            raise self.fail(step, f"{step.line.queue}: {tier}[0x{addr:06x}+{size}] overlaps the "
                                  f"live region {other[0]}")  # fmt: skip
        mem.live[lo:hi] = True
        mem.written[lo:hi] = False
        mem.allocs[addr] = size
        mem.live_bytes += size
        self.peak[tier] = max(self.peak.get(tier, 0), mem.live_bytes)

    def _end_live(self, step: _Step, tier: str, addr: int, size: int) -> None:
        mem = self.mem(step.core, tier)
        if mem.allocs.get(addr) != size:
            raise self.fail(step, f"{step.line.queue} of {tier}[0x{addr:06x}+{size}] does not "
                                  "match a live alloc")  # fmt: skip
        del mem.allocs[addr]

    def _release(self, core: int, tier: str, addr: int, size: int) -> None:
        mem = self.mem(core, tier)
        mem.live[addr >> 2 : (addr + size) >> 2] = False
        mem.live_bytes -= size

    # ------------------------------------------------------------------------------ pipes

    def _execute(self, step: _Step, start: int, view: View) -> int:
        ins = cast(Instr, step.line.instr)  # steps of pipe queues hold the instructions
        qid = step.qid
        vc = self.qvc[qid]
        self._join(step, vc)
        vc[qid] = step.seq
        spill = isinstance(ins, Spill)
        finish, self.ddr_free = ddr_channel(
            self.target, step.ddr_bytes, step.cycles, start, self.ddr_free
        )
        if isinstance(ins, Spill):
            self._spill_residency(step, ins, finish)
        if isinstance(ins, Gather) and not self.timing_only:
            self._gather_rows(step, ins, vc, view)
        if self.check:
            for acc in step.reads:
                self._check_access(step, acc, vc, False, spill)
            for acc in step.writes:
                self._check_access(step, acc, vc, True, spill)
        if not self.timing_only:
            EXEC[ins.opcode](view, ins)
        if self.check:
            self._record(step, ins, spill)
        if self.trace is not None:
            self._trace_instr(step, ins, start, finish)
        self.qhead[qid] += 1
        self.qfinish[qid] = finish
        pipe = step.line.queue
        self.busy[pipe] += step.cycles
        self.energy += step.energy
        self._count(ins)
        self._set_flags(step, finish, vc.copy())
        queue = self.queues[qid]
        if self.qhead[qid] < len(queue) and queue[self.qhead[qid]].pending == 0:
            self._push(queue[self.qhead[qid]])
        return finish

    def _gather_rows(self, step: _Step, ins: Gather, vc: np.ndarray, view: View) -> None:
        """Check a gather's indices (written, in range) and add the table rows to its reads."""
        if self.check:
            self._check_access(step, step.reads[0], vc, False, False)
        idx = gather_indices(view, ins)
        whole = idx == np.trunc(idx)  # NaN and inf included: not an index
        if not whole.all():
            pos = int(np.argmin(whole))
            raise self.fail(step, f"gather index {idx[pos]} (position {pos}) is not an "
                                  "integer")  # fmt: skip
        bad = (idx < -ins.rows) | (idx >= ins.rows)
        if bad.any():
            pos = int(np.argmax(bad))
            raise self.fail(step, f"gather index {int(idx[pos])} (position {pos}) out of range "
                                  f"[{-ins.rows}, {ins.rows})")  # fmt: skip
        if self.check:
            first = gather_rows(idx.astype(np.int64), ins.rows)[:, None] * ins.row
            rows = (first + np.arange(ins.row)).ravel()
            step.reads = (*step.reads, _Access("table", ins.table, (), (), rows))

    def _trace_mem(
        self, step: _Step, time: int, kind: str, tier: str, addr: int, size: int
    ) -> None:
        core = self.cores[step.core]
        assert self.trace is not None
        self.trace.mem.append(
            TraceMem((core.row, core.col), time, kind, tier, addr, size, step.line.lineno)
        )

    def _trace_instr(self, step: _Step, ins: Instr, start: int, finish: int) -> None:
        assert self.trace is not None
        extents = ins.extents()
        operands = tuple(
            TraceOperand(name, ref.tier, ref.addr, extents[name] * 4, name in ins.writes)
            for name, ref in ins.operands().items()
            if isinstance(ref, MemRef)
        )
        core = self.cores[step.core]
        self.trace.instrs.append(
            TraceInstr(
                (core.row, core.col),
                step.line.queue,
                start,
                finish,
                ins.opcode,
                operands,
                step.line.lineno,
            )  # fmt: skip
        )
        if isinstance(ins, Spill):
            dst, src = _resolved(ins.dst), _resolved(ins.src)
            if dst.tier != DDR:
                self._trace_mem(step, start, "alloc", dst.tier, dst.addr, ins.size * 4)
            else:
                self._trace_mem(step, finish, "free", src.tier, src.addr, ins.size * 4)

    def _spill_residency(self, step: _Step, ins: Spill, finish: int) -> None:
        dst = _resolved(ins.dst)
        if dst.tier != DDR:
            self._make_live(step, dst.tier, dst.addr, ins.size * 4)
            return
        src = _resolved(ins.src)
        self._end_live(step, src.tier, src.addr, ins.size * 4)
        heapq.heappush(self.releases, (finish, step.core, src.tier, src.addr, ins.size * 4))

    def _check_access(
        self, step: _Step, acc: _Access, vc: np.ndarray, write: bool, spill: bool
    ) -> None:
        mem = self.mem(step.core, acc.tier)
        what = "write" if write else "read"
        who = self.qnames[step.qid]
        op = cast(Instr, step.line.instr).opcode  # only pipe steps have accesses

        def where(bad: np.ndarray) -> tuple[int, str]:
            pos = int(np.argmax(bad.ravel()))
            return pos, f"{op}: {what} of {acc.tier}[0x{acc.address(pos):06x}] by {who}"

        live = acc.get(mem.live)
        if not live.all():
            raise self.fail(step, f"{where(~live)[1]}: region not live (never allocated, or "
                                  "already freed)")  # fmt: skip
        if not write and not spill:
            written = acc.get(mem.written)
            if not written.all():
                raise self.fail(step, f"{where(~written)[1]}: not written since its alloc")
        wq = acc.get(mem.wq)
        wseq = acc.get(mem.wseq)
        bad = wseq > vc[wq]
        if bad.any():
            pos, text = where(bad)
            q, s = int(wq.ravel()[pos]), int(wseq.ravel()[pos])
            raise self.fail(step, f"{text} not ordered after its write by {self.qnames[q]} at "
                                  f"line {self.line_of(q, s)}: missing flag")  # fmt: skip
        if write:
            for r, seqs in mem.readers.items():
                if r == step.qid:
                    continue
                rseq = acc.get(seqs)
                bad = rseq > vc[r]
                if bad.any():
                    pos, text = where(bad)
                    s = int(rseq.ravel()[pos])
                    raise self.fail(step, f"{text} not ordered after its read by "
                                          f"{self.qnames[r]} at line {self.line_of(r, s)}: "
                                          "missing flag")  # fmt: skip

    def _record(self, step: _Step, ins: Instr, spill: bool) -> None:
        for acc in step.reads:
            mem = self.mem(step.core, acc.tier)
            seqs = mem.readers.get(step.qid)
            if seqs is None:
                seqs = mem.readers[step.qid] = np.zeros(len(mem.data), np.int32)
            acc.put(seqs, step.seq)
        for acc in step.writes:
            mem = self.mem(step.core, acc.tier)
            acc.put(mem.wq, step.qid)
            acc.put(mem.wseq, step.seq)
            if spill:
                src = step.reads[0]
                acc.put(mem.written, src.get(self.mem(step.core, src.tier).written))
            else:
                acc.put(mem.written, True)

    def _count(self, ins: Instr) -> None:
        c = self.counters
        c["instructions"] += 1
        c["opcodes"][ins.opcode] = c["opcodes"].get(ins.opcode, 0) + 1
        if isinstance(ins, Mmad):
            c["macs"] += ins.m * ins.n * ins.k
        elif isinstance(ins, (VUnary, VBinary, VReduce, VFill)):
            c["vector_elements"] += math.prod(ins.dims)
        else:
            if isinstance(ins, Img2Col):
                nbytes = ins.extents()["dst"] * 4
            elif isinstance(ins, Gather):
                nbytes = gather_bytes(self.target, ins)
            elif isinstance(ins, Spill):
                nbytes = ins.size * 4
            else:
                assert isinstance(ins, Copy)  # the other INSTRUCTIONS are handled above
                nbytes = math.prod(ins.dims) * 4
            src_tier = DDR if isinstance(ins, Gather) else ins.src.tier
            path = f"{src_tier}->{ins.dst.tier}"
            if isinstance(ins, NocCopy):
                c["noc_byte_hops"] += nbytes * ins.hops
            c["bytes"][path] = c["bytes"].get(path, 0) + nbytes

    def _deadlock(self) -> StreamError:
        stuck = []
        for qid in range(1, len(self.queues)):
            if self.qhead[qid] < len(self.queues[qid]):
                stuck.append((self.qnames[qid], self.queues[qid][self.qhead[qid]]))
        stuck += [(s.line.queue, s) for s in self.steps if s.qid == 0 and s.pending]
        parts = []
        for name, s in stuck:
            missing = [str(f) for f in s.line.waits if f.key not in self.flag_time]
            parts.append(f"{name} at line {s.line.lineno} waits {', '.join(missing)}")
        first = min(s.line.lineno for _, s in stuck)
        return self.fail(first, "deadlock: no queue can move; " + "; ".join(parts))
