"""What a report shows, derived from a stream and one traced run: live intervals (cycles), the
residency along each core's schedule order (npucc.ir.residency), NoC traffic and metrics."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from npucc.interp.event_loop import RunResult
from npucc.interp.exec_trace import Trace, TraceInstr
from npucc.ir.isa import NOC, PIPES
from npucc.ir.residency import COMBINED, core_series
from npucc.ir.stream import Stream, StreamTensor
from npucc.target import Target

Coord = tuple[int, int]  # mesh row, column


@dataclass(frozen=True, slots=True)
class Interval:
    """A region of an on-chip tier live from `start` to `end` (cycles)."""

    tier: str
    addr: int  # byte address
    size: int  # bytes
    start: int
    end: int
    filler: str = ""  # opcode of the first instruction writing into it ("" if none does)


@dataclass(slots=True)
class CoreData:
    """Per-core figures of a run."""

    coord: Coord
    intervals: list[Interval] = field(default_factory=list)
    # tier (and L1+UB) -> (stream line, live bytes) steps along the schedule order
    residency: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    busy: dict[str, int] = field(default_factory=dict)  # pipe -> busy cycles
    makespan: int = 0
    peak: int = 0  # peak residency of L1+UB (npucc.ir.residency)
    peak_line: int = 0  # the stream line where it was first reached


@dataclass(slots=True)
class ReportData:
    """Everything the figures and the page need."""

    title: str
    target: Target
    result: RunResult
    cores: dict[Coord, CoreData]
    spills: int  # spill-outs to DDR
    extra_ddr: int  # bytes moved by spill instructions (both directions)
    noc: dict[tuple[Coord, Coord], int] = field(default_factory=dict)  # (from, to) -> bytes
    links: dict[tuple[Coord, Coord], int] = field(default_factory=dict)  # neighbour link -> bytes

    @property
    def peak(self) -> int:
        """Peak live L1+UB bytes over all cores."""
        return max((c.peak for c in self.cores.values()), default=0)

    @property
    def latency_us(self) -> float:
        """Makespan in microseconds at the target's clock."""
        return self.result.makespan / (self.target.clock_ghz * 1e3)

    def metrics(self) -> dict[str, int]:
        """The four DAN metrics."""
        return {
            "peak": self.peak,
            "extra_ddr": self.extra_ddr,
            "spills": self.spills,
            "makespan": self.result.makespan,
        }


def _intervals(trace: Trace, core: Coord, end: int) -> list[Interval]:
    open_at: dict[tuple[str, int], tuple[int, int]] = {}  # (tier, addr) -> (start, size)
    out: list[Interval] = []
    for ev in sorted(
        (m for m in trace.mem if m.core == core), key=lambda m: (m.time, m.kind == "alloc")
    ):
        key = (ev.tier, ev.addr)
        if ev.kind == "alloc":
            open_at[key] = (ev.time, ev.size)
        elif key in open_at:
            start, size = open_at.pop(key)
            out.append(Interval(ev.tier, ev.addr, size, start, ev.time))
    out += [Interval(t, a, size, start, end) for (t, a), (start, size) in open_at.items()]
    out.sort(key=lambda i: (i.start, i.tier, i.addr))
    return out


def _fillers(trace: Trace, core: Coord, intervals: list[Interval]) -> None:
    """Set each interval's filler: the first instruction of `core` writing into it while live."""
    writes: dict[str, list[tuple[int, int, int, str]]] = {}  # tier -> (start, addr, end, opcode)
    for ins in trace.instrs:
        if ins.core == core:
            for op in ins.operands:
                if op.write:
                    writes.setdefault(op.tier, []).append(
                        (ins.start, op.addr, op.addr + op.nbytes, ins.opcode)
                    )
    for tier_writes in writes.values():
        tier_writes.sort()
    for k, i in enumerate(intervals):
        found = writes.get(i.tier, [])
        for start, lo, hi, opcode in found[bisect_left(found, (i.start,)) :]:
            if start > i.end:
                break
            if lo < i.addr + i.size and i.addr < hi:
                intervals[k] = Interval(i.tier, i.addr, i.size, i.start, i.end, opcode)
                break


def noc_traffic(stream: Stream, trace: Trace) -> dict[tuple[Coord, Coord], int]:
    """Bytes each noc copy moves between an on-chip tensor's home cores and the copying core,
    per directed (from, to) pair of distinct cores, split by the homes' chunks."""
    tensors = sorted(
        (t.addr, t.addr + t.nbytes, t) for t in stream.tensors.values() if t.onchip is not None
    )
    starts = [lo for lo, _, _ in tensors]
    links: dict[tuple[Coord, Coord], int] = {}
    for ins in trace.instrs:
        if ins.opcode == "noc":
            _noc_copy(ins, tensors, starts, links)
    return dict(sorted(links.items()))


def link_loads(traffic: dict[tuple[Coord, Coord], int]) -> dict[tuple[Coord, Coord], int]:
    """The bytes each directed link between neighbouring cores carries when every transfer
    goes along its row first, then along its column (dimension-order, for the mesh figure:
    the cost model counts hops, not routes)."""
    loads: dict[tuple[Coord, Coord], int] = {}
    for ((r0, c0), (r1, c1)), nbytes in traffic.items():
        path = [(r0, c) for c in _steps(c0, c1)] + [(r, c1) for r in _steps(r0, r1)[1:]]
        for a, b in zip(path, path[1:], strict=False):
            loads[(a, b)] = loads.get((a, b), 0) + nbytes
    return dict(sorted(loads.items()))


def _steps(a: int, b: int) -> list[int]:
    """a, a±1, ..., b."""
    return list(range(a, b + 1)) if b >= a else list(range(a, b - 1, -1))


def _noc_copy(
    ins: TraceInstr,
    tensors: list[tuple[int, int, StreamTensor]],
    starts: list[int],
    links: dict[tuple[Coord, Coord], int],
) -> None:
    for op in ins.operands:
        if op.tier != NOC:
            continue
        k = bisect_left(starts, op.addr + 1) - 1
        if k < 0:
            continue
        base, _, tensor = tensors[k]
        onchip = tensor.onchip
        assert onchip is not None  # only on-chip tensors are listed
        chunk = onchip.chunk * 4
        lo, hi = op.addr - base, op.addr - base + op.nbytes
        for h, home in enumerate(onchip.homes):
            nbytes = min(hi, (h + 1) * chunk) - max(lo, h * chunk)
            if nbytes > 0 and home != ins.core:
                pair = (ins.core, home) if op.write else (home, ins.core)
                links[pair] = links.get(pair, 0) + nbytes


def collect(title: str, stream: Stream, result: RunResult) -> ReportData:
    """Derive the report's data from `stream` and its run made with `trace=True`."""
    trace = result.trace
    if trace is None:
        raise ValueError("the run has no trace (run it with trace=True)")
    cores: dict[Coord, CoreData] = {c: CoreData(c) for c in result.core_makespan}
    for ins in trace.instrs:
        data = cores.setdefault(ins.core, CoreData(ins.core))
        data.busy[ins.queue] = data.busy.get(ins.queue, 0) + ins.finish - ins.start
    spills = extra = 0
    for ins in trace.instrs:
        if ins.opcode == "spill":
            dst = next(o for o in ins.operands if o.write)
            spills += dst.tier == "DDR"
            extra += dst.nbytes
    index = {(c.row, c.col): i for i, c in enumerate(stream.cores)}
    for coord, data in cores.items():
        data.makespan = result.core_makespan.get(coord, result.makespan)
        data.busy = {p: data.busy[p] for p in PIPES if p in data.busy}
        data.intervals = _intervals(trace, coord, data.makespan)
        _fillers(trace, coord, data.intervals)
        if coord in index:
            data.residency = core_series(stream, index[coord])
        for line, live in data.residency.get(COMBINED, []):
            if live > data.peak:
                data.peak, data.peak_line = live, line
    noc = noc_traffic(stream, trace)
    return ReportData(title, stream.target, result, cores, spills, extra, noc, link_loads(noc))
