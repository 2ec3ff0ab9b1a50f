"""Data-race detection with vector clocks over the flag graph.

Each queue carries a vector clock (one entry per queue: the latest position of it known to have
happened before); a flag carries its setter's clock to its waiter. Per element each memory
keeps its last writer (queue, position) and each queue's last read; an access must be ordered
after the last write (and a write after every other queue's last read), else a flag is missing.

On-chip tensors that share bytes of a home's buffer at different times (`OnChip.live`, or a
life per home: `OnChip.lives`) are checked home by home (`_Reuse`): every access of the later
one's elements on a home must be ordered after every access of the earlier one's there, and the
earlier one is never accessed on a home once the later one has been. Two that take turns with
the bytes inside a sub-batch loop (`OnChip.alternates`) are checked both ways: every access of
either must be ordered after every access of the other made before it.
"""

from __future__ import annotations

import bisect
from typing import cast

import numpy as np

from npucc.interp.access import Access, check_unit, locate
from npucc.interp.steps import Step, Steps, fail
from npucc.ir.dtypes import NUMPY_DTYPES
from npucc.ir.isa import DDR, NOC, Gather, Instr
from npucc.ir.stream import FlagKey, Stream, StreamTensor

SHARED = (DDR, NOC)  # memories every core addresses
_NEVER = np.iinfo(np.int64).max  # clock entry of the initial writer: ordered before everything
Home = tuple[int, int]  # (row, col) of a core holding an on-chip tensor's chunk


def _seq_type(steps: int) -> type[np.integer]:
    """The smallest integer type holding the numbers 0..steps."""
    return np.uint16 if steps < 1 << 16 else np.int32 if steps < 1 << 31 else np.int64


_RECENT = 16  # at least a queue's latest accesses of a segment kept as spans (`_Recent`)
_LATE = 64  # at most so many accesses of a segment's writer (a queue's reads) not yet put


class _Recent:
    """A queue's latest accesses of one segment as unit spans (seq, first, end), newest
    last: which of its accesses an access of the segment may meet, without comparing units."""

    __slots__ = ("spans", "cut")

    def __init__(self) -> None:
        self.spans: list[tuple[int, int, int]] = []
        self.cut = 0  # the sequence number of the newest span dropped (0: none)

    def add(self, seq: int, first: int, end: int) -> None:
        """The queue's access at `seq` touched units of [first, end)."""
        spans = self.spans
        spans.append((seq, first, end))
        if len(spans) > 2 * _RECENT:  # NOTE: trimmed in batches, at least _RECENT kept
            drop = len(spans) - _RECENT
            self.cut = spans[drop - 1][0]
            del spans[:drop]

    def may_meet(self, known: int, first: int, end: int) -> bool:
        """Whether an access of the queue after its position `known` may touch [first, end).

        NOTE: a span holds every unit its access touches, so False is exact; True asks for
        the per-unit compare (the spans of strided accesses over-approximate them)."""
        for seq, lo, hi in reversed(self.spans):
            if seq <= known:
                return False
            if lo < end and first < hi:
                return True
        return self.cut > known


class _Writers:
    """The last writer and the readers of each unit of one written segment of a memory.

    NOTE: the per-unit arrays are filled late (`later`): a write (a queue's read) is held as
    its Access until the array is read or `_LATE` are held, and one that touches the same units
    as a held one replaces it (the newer value is what each of those units would hold), so that
    a buffer written and read over and over is filled once per compare, not once per access.
    """

    __slots__ = ("start", "writer", "readers", "wrecent", "rrecent", "wlate", "rlate")

    def __init__(self, start: int, n: int, writers: type[np.integer]) -> None:
        self.start = start  # the segment's first unit: its arrays' entry 0
        # last writer: its sequence number times the number of queues plus its queue id (0:
        # written before the start); one array, so that a write fills one (`RaceDetector.mark`)
        self.writer = np.zeros(n, writers)
        self.readers: dict[int, np.ndarray] = {}  # queue id -> last read's sequence number
        # queue id -> its latest writes (reads) in the segment (a queue runs in order): the
        # units are compared only where one not ordered before an access may meet it
        self.wrecent: dict[int, _Recent] = {}
        self.rrecent: dict[int, _Recent] = {}
        # the writes (each queue's reads) not yet put in `writer` (`readers`), oldest first
        self.wlate: dict[object, tuple[Access, int]] = {}
        self.rlate: dict[int, dict[object, tuple[Access, int]]] = {}

    def later(self, late: dict[object, tuple[Access, int]], arr: np.ndarray, acc: Access,
              value: int) -> None:  # fmt: skip
        """Put `value` in `acc`'s units of `arr` (`writer` or a reader's), held in `late`."""
        if late.pop(acc.key, None) is None and len(late) >= _LATE:
            self.settle(late, arr)
        late[acc.key] = (acc, value)

    def settle(self, late: dict[object, tuple[Access, int]], arr: np.ndarray) -> np.ndarray:
        """`arr` with the values held in `late` put, oldest first."""
        start = self.start
        for acc, value in late.values():
            acc.put(arr, value, start)
        late.clear()
        return arr

    def settled(self) -> None:
        """Every held value put (the arrays as a fill at each access would have left them)."""
        self.settle(self.wlate, self.writer)
        for q, late in self.rlate.items():
            self.settle(late, self.readers[q])


class _Segments:
    """The unit ranges of one memory that the stream's accesses touch, overlapping spans
    merged (so that each access lies in one), and whether some step writes in each."""

    __slots__ = ("starts", "ends", "written")

    def __init__(self, spans: set[tuple[int, int, bool]]) -> None:
        merged: list[list[int]] = []  # [first, end, written]
        for lo, hi, write in sorted(spans):
            if merged and lo < merged[-1][1]:
                last = merged[-1]
                last[1] = max(last[1], hi)
                last[2] |= write
            else:
                merged.append([lo, hi, write])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.written = [bool(m[2]) for m in merged]

    def find(self, first: int) -> int:
        """The segment holding unit `first` if some step writes in it, else -1."""
        i = bisect.bisect_right(self.starts, first) - 1
        return i if i >= 0 and first < self.ends[i] and self.written[i] else -1


class RaceDetector:
    """The clocks of every queue and flag, and the accesses of every memory.

    NOTE: the last writer and readers are kept per segment of a memory (`_Segments`: the
    accesses' spans merged) and only in segments some step writes: a read elsewhere is
    never checked against a write, so it is neither checked nor recorded. VGG-19's weights
    (548 MB) are read, never written; on a mesh each queue that reads the on-chip NOC space
    reads a few homes' tensors, and kept 2 bytes per unit of the whole space.
    """

    __slots__ = ("stream", "steps", "qvc", "initial", "flag_vc", "segments", "state", "seqs",
                 "writers", "reuse", "found")  # fmt: skip

    def __init__(self, stream: Stream, steps: Steps) -> None:
        self.stream = stream
        self.steps = steps
        self.qvc = [self.clock() for _ in steps.qnames]
        self.initial = self.clock()  # the clock of an event that waits for nothing
        self.initial.flags.writeable = False
        self.flag_vc: dict[FlagKey, np.ndarray] = {}
        self.state: dict[tuple[int, str, int], _Writers] = {}  # (core, tier, segment) ->
        # (core, access) -> `_of`'s answer: a step's accesses are its instruction's, the same
        # objects each time it runs (and the same answer: segments are fixed, states kept)
        self.found: dict[tuple[int, Access], _Writers | None] = {}
        # sequence numbers in 2 bytes where a queue is short enough (a mesh's queues are)
        self.seqs = [_seq_type(len(q)) for q in steps.queues]  # of each queue's reads
        # of a last writer's mark (`mark`): VGG-19's in 4 bytes, was 2 for the queue and 4
        self.writers = _seq_type(self.mark(max(map(len, steps.queues)), len(steps.qnames) - 1))
        self.reuse = _Reuse(stream)
        self.segments = {key: _Segments(spans) for key, spans in _spans(stream, steps).items()}

    @staticmethod
    def _key(core: int, tier: str) -> tuple[int, str]:
        """(core, tier) of a core's memory; (-1, tier) of a shared one (DDR, NOC)."""
        return (-1 if tier in SHARED else core, tier)

    def clock(self) -> np.ndarray:
        """A clock that has seen nothing but the initial state."""
        vc = np.zeros(len(self.steps.qnames), np.int64)
        vc[0] = _NEVER
        return vc

    def mark(self, seq: int, qid: int) -> int:
        """The last-writer mark of queue `qid`'s `seq`-th step (0: the initial writer)."""
        return seq * len(self.steps.qnames) + qid

    def begin(self, step: Step) -> np.ndarray:
        """The clock of a step: its queue's, joined with every flag it waits for, then itself."""
        waits = step.line.waits
        if not step.qid:
            # NOTE: an event's clock is only published, never changed: one that waits for one
            # flag shares its clock (every clock is at least `clock()`, so the join is it)
            if not waits:
                return self.initial
            vc = self.flag_vc.pop(waits[0].key)
            if len(waits) == 1:
                return vc
            vc = vc.copy()
            waits = waits[1:]
        else:
            vc = self.qvc[step.qid]
        for flag in waits:
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

    def _of(self, core: int, acc: Access) -> _Writers | None:
        """The state of the written segment `acc` lies in, or None where no step writes."""
        try:
            return self.found[core, acc]
        except KeyError:
            found = self.found[core, acc] = self._find(core, acc)
            return found

    def _find(self, core: int, acc: Access) -> _Writers | None:
        """`_of`'s answer the first time."""
        first, end = acc.span()
        key = self._key(core, acc.tier)
        segments = self.segments.get(key)
        if segments is None or end <= first:
            return None
        i = segments.find(first)
        if i < 0:
            return None
        writers = self.state.get((*key, i))
        if writers is None:
            start = segments.starts[i]
            writers = self.state[(*key, i)] = _Writers(
                start, segments.ends[i] - start, self.writers
            )
        return writers

    def check(
        self, step: Step, acc: Access, vc: np.ndarray, write: bool, read_too: bool = False
    ) -> None:
        """An access must be ordered after the last write, and a write after other reads
        (only those when `read_too`: the step's read of the same Access checked the last
        write)."""
        qnames = self.steps.qnames
        if acc.tier == NOC and self.reuse.shared:
            self.reuse.check(self, step, acc, vc)
        state = self._of(step.core, acc)
        if state is None:
            return  # no step writes there: nothing to be ordered after
        op = cast(Instr, step.line.instr).opcode  # only pipe steps have accesses
        # NOTE: each unit's last write by queue q is one of q's writes in the segment, so the
        # units are compared only when one of those not ordered before may meet the access
        first, end = acc.span()
        # (the newest span is looked at first here: most queues' are ordered before)
        late = [] if read_too else [q for q, recent in state.wrecent.items()
                                    if recent.spans[-1][0] > vc[q]
                                    and recent.may_meet(vc[q], first, end)]  # fmt: skip
        if late:
            self._check_writes(step, acc, vc, write, state, op, late)
        if write:
            for r, seqs in state.readers.items():
                recent = state.rrecent[r]
                if (r == step.qid or recent.spans[-1][0] <= vc[r]
                        or not recent.may_meet(vc[r], first, end)):  # fmt: skip
                    continue
                rseq = acc.get(state.settle(state.rlate[r], seqs), state.start)
                bad = rseq > vc[r]
                if bad.any():
                    pos, text = locate(acc, bad, op, write, qnames[step.qid])
                    s = int(rseq.ravel()[pos])
                    line = self.steps.line_of(r, s)
                    message = f"{text} not ordered after its read by {qnames[r]} at line {line}"
                    raise fail(self.stream, step, f"{message}: missing flag")

    def _check_writes(
        self,
        step: Step,
        acc: Access,
        vc: np.ndarray,
        write: bool,
        state: _Writers,
        op: str,
        late: list[int],
    ) -> None:
        """Each unit of `acc` must be ordered after its last write (`late`: the queues with a
        write in the segment not ordered before `step` that may meet `acc`, the only ones that
        can fail)."""
        qnames = self.steps.qnames
        writer = acc.get(state.settle(state.wlate, state.writer), state.start)
        nq = len(qnames)
        if len(late) == 1:  # one queue's units: no gather of the clock per unit
            q = late[0]  # a unit q wrote after vc[q]: its mark is q's, and above mark(vc[q], q)
            after = state.writer.dtype.type(self.mark(int(vc[q]), q))
            if not np.logical_and(writer % nq == q, writer > after).any():
                return
        wseq, wq = np.divmod(writer, nq)
        bad = wseq > vc[wq]
        if bad.any():
            pos, text = locate(acc, bad, op, write, qnames[step.qid])
            q, s = int(wq.ravel()[pos]), int(wseq.ravel()[pos])
            line = self.steps.line_of(q, s)
            raise fail(self.stream, step, f"{text} not ordered after its write by {qnames[q]} at "
                                          f"line {line}: missing flag")  # fmt: skip

    def record(self, step: Step) -> None:
        """Make a step the last reader of what it read and the last writer of what it wrote."""
        for acc in step.reads:
            state = self._of(step.core, acc)
            if state is None:
                continue  # no step writes there
            seqs = state.readers.get(step.qid)
            if seqs is None:
                seqs = state.readers[step.qid] = np.zeros(len(state.writer), self.seqs[step.qid])
                state.rlate[step.qid] = {}
            state.later(state.rlate[step.qid], seqs, acc, step.seq)
            recent = state.rrecent.get(step.qid)
            if recent is None:
                recent = state.rrecent[step.qid] = _Recent()
            recent.add(step.seq, *acc.span())
        for acc in step.writes:
            state = self._of(step.core, acc)
            assert state is not None  # a write's segment is written
            state.later(state.wlate, state.writer, acc, self.mark(step.seq, step.qid))
            recent = state.wrecent.get(step.qid)
            if recent is None:
                recent = state.wrecent[step.qid] = _Recent()
            recent.add(step.seq, *acc.span())


def _spans(stream: Stream, steps: Steps) -> dict[tuple[int, str], set[tuple[int, int, bool]]]:
    """The distinct unit spans (first, end, whether a write) of the accesses by memory key
    (core, tier): a gather's table read spans the whole table (its rows are known only when
    it runs). NOTE: a set: VGG-19's 480 k accesses have 23 k distinct spans."""
    storage = np.dtype(NUMPY_DTYPES[stream.target.dtype]).itemsize
    unit = check_unit(stream.target)
    spans: dict[tuple[int, str], set[tuple[int, int, bool]]] = {}
    seen: set[tuple[int, int]] = set()  # (core, id of an instruction) already looked at
    for step in steps.all:
        if not step.qid:
            continue  # events access nothing
        ins = step.line.instr
        # NOTE: the steps of one instruction share its accesses (`Steps`): one look per core
        if (step.core, id(ins)) in seen:
            continue
        seen.add((step.core, id(ins)))
        table = (Access("table", ins.table, (ins.rows * ins.row,), (1,), None, (storage, unit)),
                 ) if isinstance(ins, Gather) else ()  # fmt: skip
        for write, group in ((False, step.reads), (False, table), (True, step.writes)):
            for acc in group:
                first, end = acc.span()
                if first < end:
                    key = RaceDetector._key(step.core, acc.tier)
                    spans.setdefault(key, set()).add((first, end, write))
    return spans


class _Reuse:
    """The on-chip tensors sharing home bytes at different times, and who accessed them, home
    by home."""

    __slots__ = ("unit", "starts", "tensors", "before", "after", "turns", "last", "first", "eb")

    def __init__(self, stream: Stream) -> None:
        self.unit = check_unit(stream.target)
        chip = sorted((t for t in stream.tensors.values() if t.onchip is not None),
                      key=lambda t: t.addr)  # fmt: skip
        self.tensors: list[StreamTensor] = chip
        self.starts = [t.addr // self.unit for t in chip]
        eb = self.eb = stream.target.elem_bytes
        # tensor -> (sharer, the homes where it holds: None for every home both hold)
        Sharers = dict[int, list[tuple[int, frozenset[Home] | None]]]
        self.before: Sharers = {}  # the sharers whose lives there end before
        self.after: Sharers = {}  # the sharers whose lives there start after
        self.turns: Sharers = {}  # the sharers it takes turns with
        for i, a in enumerate(chip):
            for j, b in enumerate(chip):
                assert a.onchip is not None and b.onchip is not None
                if not a.onchip.shares(b.onchip, eb) or i == j:
                    continue
                if a.onchip.lives is None and b.onchip.lives is None:
                    if a.onchip.live[1] < b.onchip.live[0]:
                        self.after.setdefault(i, []).append((j, None))
                        self.before.setdefault(j, []).append((i, None))
                    elif a.onchip.meets(b.onchip) and a.onchip.alternates(b.onchip):
                        self.turns.setdefault(i, []).append((j, None))
                    continue
                homes = frozenset(
                    a.onchip.homes[h]
                    for h, k in a.onchip.common(b.onchip)
                    if a.onchip.life(h)[1] < b.onchip.life(k)[0]
                )
                if homes:
                    self.after.setdefault(i, []).append((j, homes))
                    self.before.setdefault(j, []).append((i, homes))
        # (tensor, home) -> queue -> its last access there; (tensor, home) -> its first access
        self.last: dict[tuple[int, Home], dict[int, int]] = {}
        self.first: dict[tuple[int, Home], Step] = {}

    @property
    def shared(self) -> bool:
        """Whether any two tensors share bytes."""
        return bool(self.after or self.turns)

    def check(self, races: RaceDetector, step: Step, acc: Access, vc: np.ndarray) -> None:
        """An access of an on-chip tensor: on each home it touches, after every access of
        those it reuses the bytes of there (and of those it takes turns with so far), and not
        after any that reuses its bytes there."""
        first, end = acc.span()
        index = bisect.bisect_right(self.starts, first) - 1
        tensor = self.tensors[index]
        where = tensor.onchip
        assert where is not None
        lo = (first * self.unit - tensor.addr) // self.eb
        hi = ((end - 1) * self.unit - tensor.addr) // self.eb
        homes = where.homes[lo // where.chunk : hi // where.chunk + 1]
        name = tensor.name
        for later, at in self.after.get(index, ()):
            for home in homes:
                seen = self.first.get((later, home)) if at is None or home in at else None
                if seen is not None:
                    later_name, line = self.tensors[later].name, seen.line.lineno
                    raise fail(races.stream, step, f"onchip {name!r} accessed after "
                               f"{later_name!r} reused its bytes at line {line}")  # fmt: skip
        for earlier, at in (*self.before.get(index, ()), *self.turns.get(index, ())):
            for home in homes:
                if at is not None and home not in at:
                    continue
                for q, seq in self.last.get((earlier, home), {}).items():
                    if seq > vc[q]:
                        line, queue = races.steps.line_of(q, seq), races.steps.qnames[q]
                        raise fail(races.stream, step, f"onchip {name!r} reuses the bytes of "
                                   f"{self.tensors[earlier].name!r} not ordered after its "
                                   f"access by {queue} at line {line}: missing flag")  # fmt: skip
        for home in homes:
            self.first.setdefault((index, home), step)
            seqs = self.last.setdefault((index, home), {})
            seqs[step.qid] = max(seqs.get(step.qid, 0), step.seq)
