"""Peak residency: the one definition behind every peak-memory figure npucc prints.

A core's residency in a tier is the summed size of its buffers allocated and not yet freed, at
each position of the core's schedule order (the replay order, which is also the order of the
core's lines in the command stream); ALLOC and FREE alone count, so a buffer spilled out still
counts (shared/dan-traces.md rule 6). `L1+UB` is the sum over `PEAK_TIERS` (the scheduler's
peak metric). A program's peak in a tier is the largest over its cores. docs/design.md
("Peak residency") says why times are not used: allocations are dataflow events, issued as soon
as their address is free, so a residency over cycles depends on how far they run ahead.

Users: the replay (`Replay.peak`, `Replay.residency`), `Program.stats["peak"]`, the per-layer
table's `onchip_peak`, the compile summary, `npucc run` and the report (`stream_residency`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from npucc.ir.stream import Event, Stream

PEAK_TIERS = ("L1", "UB")  # tiers counted by the peak-residency metric (rule 6)
COMBINED = "L1+UB"  # the name of their sum


@dataclass(slots=True)
class Residency:
    """Live bytes per tier (and of L1+UB) along one core's schedule order, and their peaks."""

    live: dict[str, int] = field(default_factory=dict)  # tier -> live bytes now
    peaks: dict[str, int] = field(default_factory=dict)  # tier (or COMBINED) -> peak so far
    combined: int = 0  # live L1+UB bytes now
    peak: int = 0  # peak of `combined`

    def alloc(self, tier: str, size: int) -> None:
        """A buffer of `size` bytes becomes live in `tier`."""
        live = self.live.get(tier, 0) + size
        self.live[tier] = live
        if live > self.peaks.get(tier, 0):
            self.peaks[tier] = live
        if tier in PEAK_TIERS:
            self.combined += size
            if self.combined > self.peak:
                self.peak = self.combined
                self.peaks[COMBINED] = self.combined

    def free(self, tier: str, size: int) -> None:
        """A buffer of `size` bytes in `tier` is freed."""
        self.live[tier] -= size
        if tier in PEAK_TIERS:
            self.combined -= size


def merge_peaks(per_core: Iterable[dict[str, int]]) -> dict[str, int]:
    """A program's peaks: per tier (and COMBINED) the largest over its cores' peaks."""
    out: dict[str, int] = {}
    for peaks in per_core:
        for tier, nbytes in peaks.items():
            out[tier] = max(out.get(tier, 0), nbytes)
    return out


def core_events(stream: Stream, index: int) -> Iterator[tuple[int, Event]]:
    """The alloc and free events of core `index` of `stream`, in order, with their line."""
    for line in stream.cores[index].lines:
        ins = line.instr
        if isinstance(ins, Event) and ins.kind != "barrier":
            yield line.lineno, ins


def core_residency(stream: Stream, index: int) -> Residency:
    """The residency of core `index` of `stream` after its last line (its peaks)."""
    res = Residency()
    for _, ev in core_events(stream, index):
        (res.alloc if ev.kind == "alloc" else res.free)(ev.tier, ev.size)
    return res


def core_series(stream: Stream, index: int) -> dict[str, list[tuple[int, int]]]:
    """Per tier (and L1+UB) of core `index`, the live bytes after each alloc or free, as
    (stream line, bytes) steps starting at (core block line, 0): residency along the order."""
    start = stream.cores[index].lineno
    res = Residency()
    series: dict[str, list[tuple[int, int]]] = {}
    for lineno, ev in core_events(stream, index):
        (res.alloc if ev.kind == "alloc" else res.free)(ev.tier, ev.size)
        steps = [(ev.tier, res.live[ev.tier])]
        if ev.tier in PEAK_TIERS:
            steps.append((COMBINED, res.combined))
        for tier, live in steps:
            series.setdefault(tier, [(start, 0)]).append((lineno, live))
    return series


def stream_residency(stream: Stream) -> dict[str, int]:
    """The peak residency of a command stream per tier and of L1+UB (largest over cores)."""
    return merge_peaks(core_residency(stream, i).peaks for i in range(len(stream.cores)))
