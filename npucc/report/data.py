"""What a report shows, derived from one traced run: live intervals, residency and metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

from npucc.interp.event_loop import RunResult
from npucc.interp.exec_trace import Trace
from npucc.ir.isa import PIPES
from npucc.ir.residency import PEAK_TIERS
from npucc.target import TIERS, Target

Coord = tuple[int, int]  # mesh row, column


@dataclass(frozen=True, slots=True)
class Interval:
    """A region of an on-chip tier live from `start` to `end` (cycles)."""

    tier: str
    addr: int  # byte address
    size: int  # bytes
    start: int
    end: int


@dataclass(slots=True)
class CoreData:
    """Per-core figures of a run."""

    coord: Coord
    intervals: list[Interval] = field(default_factory=list)
    residency: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # tier -> steps
    busy: dict[str, int] = field(default_factory=dict)  # pipe -> busy cycles
    makespan: int = 0
    peak: int = 0  # max live L1+UB bytes
    peak_time: int = 0  # when it was first reached


@dataclass(slots=True)
class ReportData:
    """Everything the figures and the page need."""

    title: str
    target: Target
    result: RunResult
    cores: dict[Coord, CoreData]
    spills: int  # spill-outs to DDR
    extra_ddr: int  # bytes moved by spill instructions (both directions)

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


def _residency(intervals: list[Interval]) -> dict[str, list[tuple[int, int]]]:
    """Per tier (and L1+UB) the live bytes after each change, as (time, bytes) steps."""
    deltas: dict[str, list[tuple[int, int]]] = {}
    for i in intervals:
        for tier in (i.tier, "L1+UB") if i.tier in PEAK_TIERS else (i.tier,):
            deltas.setdefault(tier, []).extend(((i.start, i.size), (i.end, -i.size)))
    steps: dict[str, list[tuple[int, int]]] = {}
    for tier in (*TIERS, "L1+UB"):
        if tier not in deltas:
            continue
        live, series = 0, [(0, 0)]
        for time, delta in sorted(deltas[tier], key=lambda d: (d[0], d[1])):
            live += delta
            if series[-1][0] == time:
                series[-1] = (time, live)
            else:
                series.append((time, live))
        steps[tier] = series
    return steps


def collect(title: str, target: Target, result: RunResult) -> ReportData:
    """Derive the report's data from a run made with `trace=True`."""
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
    for coord, data in cores.items():
        data.makespan = result.core_makespan.get(coord, result.makespan)
        data.busy = {p: data.busy[p] for p in PIPES if p in data.busy}
        data.intervals = _intervals(trace, coord, data.makespan)
        data.residency = _residency(data.intervals)
        for time, live in data.residency.get("L1+UB", []):
            if live > data.peak:
                data.peak, data.peak_time = live, time
    return ReportData(title, target, result, cores, spills, extra)
