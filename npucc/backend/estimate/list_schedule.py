"""The execution-faithful estimate's list schedule: layer runs in lowering order on a mesh.

A run waits for its cores' previous barrier and for the runs that wrote its inputs (plus
their closing flags' hops); its const loads only for its cores' DDR loads; its DDR bytes pass
the mesh's shared DDR channel in lowering order (`npucc.backend.estimate.exec_cost` builds
the runs of a plan and states the rules).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from npucc.backend.estimate.timing_kernel import cores_after, schedule_runs
from npucc.backend.lower.subbatch import Part
from npucc.ir.plan import Rect
from npucc.target import Target
from npucc.target.timing import DdrChannel


@dataclass(frozen=True, slots=True)
class LayerTiming:
    """A layer's duration on one core of its rectangle, cold and per release class.

    Class 0 holds the nodes that read only constants or nothing (weight loads, fills: no
    barrier holds them, so they may run ahead); class 1 + i the nodes that need input i.
    """

    cold: int  # makespan when every node may start at once
    mte2_tail: int  # cycles from the last MTE2 finish to the end, cold
    tails: tuple[tuple[int, int], ...]  # (class, cycles from its release to the end)


def decisive(timings: tuple[LayerTiming, ...]) -> tuple[LayerTiming, ...]:
    """The timings of a run's cores that can decide its end in `schedule`, in order: a timing
    that an earlier one with the same classes, no shorter cold duration and no shorter tails
    dominates never ends later than it, and the schedule takes the first of the latest."""
    out: list[LayerTiming] = []
    for b in timings:
        classes = [c for c, _ in b.tails]
        if not any(
            a.cold >= b.cold
            and [c for c, _ in a.tails] == classes
            and all(x >= y for (_, x), (_, y) in zip(a.tails, b.tails, strict=True))
            for a in out
        ):
            out.append(b)
    return tuple(out)


def farthest(box: tuple[int, int, int, int], core: tuple[int, int]) -> tuple[int, int]:
    """The core of the bounding box y0, x0, y1, x1 farthest from `core` (row, col) in hops."""
    y0, x0, y1, x1 = box
    y, x = core
    return (y0 if abs(y - y0) >= abs(y - y1) else y1), (x0 if abs(x - x0) >= abs(x - x1) else x1)


READY = (0, 0, 0, 0)  # a graph input's box: in DDR from the start (finish 0, flag from core 0,0)
READY_AT = -1  # ... and its footprint id


def channel_bound(target: Target, costs: Iterable[RunCost]) -> int:
    """A lower bound of `schedule`'s latency for runs of these costs: on a shared DDR channel
    the cycles their bytes hold it, one run after another (0 without one)."""
    if not DdrChannel(target).shared:
        return 0
    return sum(cost.lead_held + cost.rest_held for cost in costs)


@dataclass(slots=True)
class Timeline:
    """Where a list schedule stands after its first `done` runs (`schedule` continues from it),
    in C long long arrays (`schedule_runs`'s)."""

    done: int  # the runs scheduled
    ends: array  # READY's finish, then each run's (entries past `done`: room, not yet set)
    loads: array  # 0, then when each run's cores finished its DDR loads (the same)
    channels: array  # 0, then when the shared DDR channel takes the next bytes after each run
    core_free: array  # per core: after its last barrier
    mte2_free: array  # per core: after its last DDR load

    @classmethod
    def start(cls, cores: int, room: int = 0) -> Timeline:
        """Before the first run, with room for `room` runs: every core and the channel free at 0."""
        zeros, free = array("q", bytes(8 * (room + 1))), array("q", bytes(8 * cores))
        return cls(0, zeros, zeros[:], zeros[:], free, free[:])

    @property
    def channel(self) -> int:
        """When the shared DDR channel takes the next bytes."""
        return self.channels[self.done]

    def upto(self, runs: list[LayerRun], k: int) -> Timeline:
        """The schedule after the first k (at most `done`) of `runs`, this one's: its arrays
        copied whole (past k: room, for `schedule` to overwrite) and its cores' times rebuilt
        from those k runs (`cores_after`), with no run scheduled anew."""
        cores = len(self.core_free)
        at = Timeline(
            k, self.ends[:], self.loads[:], self.channels[:], array("q", bytes(8 * cores)),
            array("q", bytes(8 * cores)),
        )  # fmt: skip
        cores_after(runs, k, at.ends, at.loads, at.core_free, at.mte2_free)
        return at


def schedule(target: Target, runs: list[LayerRun], at: Timeline | None = None) -> int:
    """The latency of one list schedule of the layer runs in lowering order, continued from
    `at` (which it then extends to after them) if given, else from the start (the rules:
    `timing_kernel.schedule_runs`)."""
    if at is None:
        at = Timeline.start(target.cores, len(runs))
    room = at.done + len(runs) + 1 - len(at.ends)
    if room > 0:
        more = array("q", bytes(8 * room))
        at.ends += more
        at.loads += more
        at.channels += more
    shared = DdrChannel(target).shared
    start, at.done = at.done, at.done + len(runs)
    return schedule_runs(
        runs, start, at.ends, at.loads, at.channels, at.core_free, at.mte2_free, shared
    )


class RunCost(NamedTuple):
    """What a layer run costs whenever its inputs arrive (shared by the plans that run the
    layer alike).

    NOTE: NamedTuples, not frozen dataclasses: the estimate makes a LayerRun per layer run
    of every priced plan, and a tuple is several times cheaper to build."""

    timings: tuple[LayerTiming, ...]  # per distinct core (see LayerProfile.timing), `decisive`
    energy: float  # pJ
    ddr: int  # bytes to or from DDR
    lead_held: int  # cycles its const loads ahead of its first input-dependent DDR copy hold
    rest_held: int  # ... and its other DDR bytes hold the shared channel (`ddr_channel_held`)
    after: int  # cycles its slowest core runs after its last load


class LayerRun(NamedTuple):
    """How one layer runs under a plan: its cost, where, and whom it waits for."""

    cost: RunCost
    spans: tuple[tuple[int, int], ...]  # the cores it uses, row * cols + col (`core_spans`)
    box: tuple[int, int, int, int]  # bounding box of its cores: y0, x0, y1, x1
    data: tuple[int, ...]  # release classes of its non-const inputs
    srcs: tuple[tuple[tuple[int, int], ...], ...]  # per input, (run + 1, flag) per writer
    at: int  # `_footprint_id` of its cores


def oldest_first(parts: list[Part]) -> list[Part]:
    """`parts` with each pipeline wavefront (sub-batch t - s of stage s, lowered together)
    reversed: its parts are independent of one another, and the shared DDR channel serves
    them oldest sub-batch first, as the interpreter serves transfers in the order they
    become ready (lowering order would let a stage's newer sub-batch pass the deeper stages'
    older ones, which then lag and drain the pipeline late)."""
    out: list[Part] = []
    i = 0
    while i < len(parts):
        p, j = parts[i], i + 1
        if p.stage < 0:  # not pipelined (the common case): as it is
            out.append(p)
            i = j
            continue
        t = p.part + p.stage
        while j < len(parts) and parts[j].stage >= 0 and parts[j].loop == p.loop:
            if parts[j].part + parts[j].stage != t:
                break
            j += 1
        out += reversed(parts[i:j])
        i = j
    return out


def covering(parts: list[int], m: int, j: int, n: int) -> tuple[int, ...]:
    """Of the runs `parts` of a producer split in m sub-batches (those lowered so far, in
    order), the ones writing slice j of n."""
    if m == 1:
        return (parts[0],)
    if n == 1:
        return tuple(parts)
    return tuple(parts[j * m // n : ((j + 1) * m - 1) // n + 1])


@lru_cache(maxsize=65536)
def core_spans(cores: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """`cores` as ranges [a, b) of consecutive indices (the list schedule updates a range of
    cores at once)."""
    out: list[tuple[int, int]] = []
    for c in sorted(cores):
        if out and out[-1][1] == c:
            out[-1] = (out[-1][0], c + 1)
        else:
            out.append((c, c + 1))
    return tuple(out)


@lru_cache(maxsize=65536)
def footprint(
    r: Rect, tiles: int, cols: int
) -> tuple[tuple[int, ...], tuple[int, int], tuple[int, int, int, int]]:
    """Of the cores of `r` that get a tile: their row-major indices, the first's (row, col)
    and their bounding box y0, x0, y1, x1."""
    used = used_cores(r, tiles)
    ys = [y for y, _ in used]
    xs = [x for _, x in used]
    return tuple(y * cols + x for y, x in used), used[0], (min(ys), min(xs), max(ys), max(xs))


@lru_cache(maxsize=65536)
def used_cores(r: Rect, tiles: int) -> tuple[tuple[int, int], ...]:
    """(row, col) of the cores of `r` that get a tile: the first `tiles` in row-major order."""
    return r.coords()[:tiles]
