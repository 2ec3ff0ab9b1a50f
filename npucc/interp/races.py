"""Data-race detection with vector clocks over the flag graph.

Each queue carries a vector clock (one entry per queue: the latest position of it known to have
happened before); a flag carries its setter's clock to its waiter. Per element each memory
keeps its last writer (queue, position) and each queue's last read; an access must be ordered
after the last write (and a write after every other queue's last read), else a flag is missing.

On-chip tensors that share bytes of a home's buffer at different times (`OnChip.live`) are
checked per tensor (`_Reuse`): every access of the later one must be ordered after every access
of the earlier one, and the earlier one is never accessed once the later one has been.
"""

from __future__ import annotations

import bisect
from typing import cast

import numpy as np

from npucc.interp.access import Access, check_unit, locate
from npucc.interp.memories import Memories, Memory
from npucc.interp.steps import Step, Steps, fail
from npucc.ir.isa import DDR, NOC, Instr
from npucc.ir.stream import FlagKey, Stream, StreamTensor

SHARED = (DDR, NOC)  # memories every core addresses
_NEVER = np.iinfo(np.int64).max  # clock entry of the initial writer: ordered before everything


def _seq_type(steps: int) -> type[np.integer]:
    """The smallest integer type holding the sequence numbers 0..steps."""
    return np.uint16 if steps < 1 << 16 else np.int32


class _Writers:
    """The last writer and the readers of each element of one memory."""

    __slots__ = ("wq", "wseq", "readers")

    def __init__(self, n: int, queues: int, seqs: type[np.integer]) -> None:
        # last writer's queue id (0: written before the start), in 2 bytes when ids fit
        self.wq = np.zeros(n, np.int16 if queues <= 1 << 15 else np.int32)
        self.wseq = np.zeros(n, seqs)  # last writer's sequence number in its queue
        self.readers: dict[int, np.ndarray] = {}  # queue id -> last read's sequence number


class RaceDetector:
    """The clocks of every queue and flag, and the accesses of every memory.

    NOTE: a read is recorded only where some step of the stream writes (`written`, per
    memory the units from the first to the last any step writes): elsewhere no write is ever
    checked against it. VGG-19's weights (548 MB) are read, never written, and each reading
    queue kept an int32 per unit of them.
    """

    __slots__ = ("stream", "steps", "qvc", "flag_vc", "writers", "written", "seqs", "wseqs",
                 "reuse")  # fmt: skip

    def __init__(self, stream: Stream, steps: Steps) -> None:
        self.stream = stream
        self.steps = steps
        self.qvc = [self.clock() for _ in steps.qnames]
        self.flag_vc: dict[FlagKey, np.ndarray] = {}
        self.writers: dict[Memory, _Writers] = {}
        self.written: dict[tuple[int, str], tuple[int, int]] = {}  # (core, tier) -> [lo, hi)
        # sequence numbers in 2 bytes where a queue is short enough (a mesh's queues are)
        self.seqs = [_seq_type(len(q)) for q in steps.queues]  # of each queue's reads
        self.wseqs = _seq_type(max(map(len, steps.queues)))  # of any queue's writes
        self.reuse = _Reuse(stream)
        for step in steps.all:
            for acc in step.writes if step.qid else ():  # events access nothing
                key = self._key(step.core, acc.tier)
                lo, hi = acc.span()
                was = self.written.get(key, (lo, hi))
                self.written[key] = (min(lo, was[0]), max(hi, was[1]))

    @staticmethod
    def _key(core: int, tier: str) -> tuple[int, str]:
        """(core, tier) of a core's memory; (-1, tier) of a shared one (DDR, NOC)."""
        return (-1 if tier in SHARED else core, tier)

    def clock(self) -> np.ndarray:
        """A clock that has seen nothing but the initial state."""
        vc = np.zeros(len(self.steps.qnames), np.int64)
        vc[0] = _NEVER
        return vc

    def begin(self, step: Step) -> np.ndarray:
        """The clock of a step: its queue's, joined with every flag it waits for, then itself."""
        vc = self.qvc[step.qid] if step.qid else self.clock()
        for flag in step.line.waits:
            # a flag is waited once (the parser checks): its clock goes with the wait
            np.maximum(vc, self.flag_vc.pop(flag.key), out=vc)
        if step.qid:
            vc[step.qid] = step.seq
        return vc

    def publish(self, step: Step, vc: np.ndarray) -> None:
        """The flags a step sets carry its clock (a snapshot: the queue's clock moves on)."""
        if step.line.sets:
            snapshot = vc.copy() if step.qid else vc
            for flag in step.line.sets:
                self.flag_vc[flag.key] = snapshot

    def _of(self, mem: Memory) -> _Writers:
        writers = self.writers.get(mem)
        if writers is None:
            writers = self.writers[mem] = _Writers(len(mem.dead), len(self.steps.qnames),
                                                   self.wseqs)  # fmt: skip
        return writers

    def check(self, step: Step, mem: Memory, acc: Access, vc: np.ndarray, write: bool) -> None:
        """An access must be ordered after the last write, and a write after other reads."""
        state = self._of(mem)
        qnames = self.steps.qnames
        if acc.tier == NOC and self.reuse.shared:
            self.reuse.check(self, step, acc, vc)
        op = cast(Instr, step.line.instr).opcode  # only pipe steps have accesses
        wq = acc.get(state.wq)
        wseq = acc.get(state.wseq)
        bad = wseq > vc[wq]
        if bad.any():
            pos, text = locate(acc, bad, op, write, qnames[step.qid])
            q, s = int(wq.ravel()[pos]), int(wseq.ravel()[pos])
            line = self.steps.line_of(q, s)
            raise fail(self.stream, step, f"{text} not ordered after its write by {qnames[q]} at "
                                          f"line {line}: missing flag")  # fmt: skip
        if write:
            for r, seqs in state.readers.items():
                if r == step.qid:
                    continue
                rseq = acc.get(seqs)
                bad = rseq > vc[r]
                if bad.any():
                    pos, text = locate(acc, bad, op, write, qnames[step.qid])
                    s = int(rseq.ravel()[pos])
                    line = self.steps.line_of(r, s)
                    message = f"{text} not ordered after its read by {qnames[r]} at line {line}"
                    raise fail(self.stream, step, f"{message}: missing flag")

    def record(self, step: Step, memories: Memories) -> None:
        """Make a step the last reader of what it read and the last writer of what it wrote."""
        for acc in step.reads:
            lo, hi = self.written.get(self._key(step.core, acc.tier), (0, 0))
            first, last = acc.span()
            if last <= lo or first >= hi:
                continue  # no step writes there
            mem = memories.mem(step.core, acc.tier)
            state = self._of(mem)
            seqs = state.readers.get(step.qid)
            if seqs is None:
                seqs = state.readers[step.qid] = np.zeros(len(mem.dead), self.seqs[step.qid])
            acc.put(seqs, step.seq)
        for acc in step.writes:
            state = self._of(memories.mem(step.core, acc.tier))
            acc.put(state.wq, step.qid)
            acc.put(state.wseq, step.seq)


class _Reuse:
    """The on-chip tensors sharing home bytes at different times, and who accessed them."""

    __slots__ = ("unit", "starts", "tensors", "before", "after", "last", "first")

    def __init__(self, stream: Stream) -> None:
        self.unit = check_unit(stream.target)
        chip = sorted((t for t in stream.tensors.values() if t.onchip is not None),
                      key=lambda t: t.addr)  # fmt: skip
        self.tensors: list[StreamTensor] = chip
        self.starts = [t.addr // self.unit for t in chip]
        eb = stream.target.elem_bytes
        self.before: dict[int, list[int]] = {}  # tensor -> the sharers whose lives end before
        self.after: dict[int, list[int]] = {}  # tensor -> the sharers whose lives start after
        for i, a in enumerate(chip):
            for j, b in enumerate(chip):
                assert a.onchip is not None and b.onchip is not None
                if a.onchip.live[1] < b.onchip.live[0] and a.onchip.shares(b.onchip, eb):
                    self.after.setdefault(i, []).append(j)
                    self.before.setdefault(j, []).append(i)
        self.last: dict[int, dict[int, int]] = {}  # tensor -> queue -> its last access there
        self.first: dict[int, Step] = {}  # tensor -> its first access

    @property
    def shared(self) -> bool:
        """Whether any two tensors share bytes."""
        return bool(self.after)

    def check(self, races: RaceDetector, step: Step, acc: Access, vc: np.ndarray) -> None:
        """An access of an on-chip tensor: after every access of those it reuses the bytes
        of, and not after any that reuses its bytes."""
        index = bisect.bisect_right(self.starts, acc.span()[0]) - 1
        name = self.tensors[index].name
        for later in self.after.get(index, ()):
            if later in self.first:
                line = self.first[later].line.lineno
                later_name = self.tensors[later].name
                raise fail(races.stream, step, f"onchip {name!r} accessed after {later_name!r} "
                           f"reused its bytes at line {line}")  # fmt: skip
        for earlier in self.before.get(index, ()):
            for q, seq in self.last.get(earlier, {}).items():
                if seq > vc[q]:
                    line = races.steps.line_of(q, seq)
                    raise fail(races.stream, step, f"onchip {name!r} reuses the bytes of "
                               f"{self.tensors[earlier].name!r} not ordered after its access by "
                               f"{races.steps.qnames[q]} at line {line}: missing flag")  # fmt: skip
        self.first.setdefault(index, step)
        seqs = self.last.setdefault(index, {})
        seqs[step.qid] = max(seqs.get(step.qid, 0), step.seq)
