"""Exact DDR read-after-write dependencies on one core: which writes a read overlaps.

A copy's DDR side touches a set of contiguous runs of elements (its pattern with the innermost
contiguous dims merged). The writes of a tensor that one layer closes are kept as sorted runs,
each with the node that wrote it (`Written`); a later read of the tensor on the same core then
waits for exactly the writers whose runs it overlaps (`writers`), not for the close BARRIER
after all of them, so a consumer's first tiles can run while its producer still writes its
last ones (the read of rows 0-9 of a conv's output waits for the stores of rows 0-9).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

Runs = tuple[np.ndarray, int]  # sorted start offsets of equal-length runs, and that length


MAX_RUNS = 1024  # a pattern of more runs counts as its whole extent (more writers: still safe)


def pattern_runs(off: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> Runs:
    """The contiguous runs the pattern (`off`, `dims`, `strides`) touches, start offsets sorted
    and unique; one run over its whole extent when it has more than MAX_RUNS (or a negative
    stride). NOTE: a superset of a write's or a read's elements only adds dependencies.

    The runs of a pattern at offset 0 are worked out once (the lowerings copy the same few
    patterns band after band, at other offsets) and shifted by `off` (a new array: a caller
    may keep it)."""
    starts, length = _runs(dims, strides)
    return starts + off, length


RUNS_KEPT = 1 << 10  # patterns `pattern_runs` keeps: each of up to MAX_RUNS starts, <= 8 MiB


@functools.lru_cache(maxsize=RUNS_KEPT)
def _runs(dims: tuple[int, ...], strides: tuple[int, ...]) -> Runs:
    """`pattern_runs` of the pattern at offset 0."""
    pairs = [(d, s) for d, s in zip(dims, strides, strict=True) if d != 1]
    if any(d == 0 for d, _ in pairs):
        return np.empty(0, dtype=np.int64), 1
    length = 1
    while pairs and pairs[-1][1] == length:  # the innermost dims that continue the run
        length *= pairs.pop()[0]
    if not pairs:  # one run (most copies)
        return np.zeros(1, dtype=np.int64), length
    if math.prod(d for d, _ in pairs) > MAX_RUNS or any(s < 0 for _, s in pairs):
        lo = sum((d - 1) * s for d, s in pairs if s < 0)
        hi = sum((d - 1) * s for d, s in pairs if s > 0) + length
        return np.array([lo], dtype=np.int64), hi - lo
    starts = np.zeros(1, dtype=np.int64)
    nested = True  # each dim's stride spans everything inside it: the starts come out sorted
    inner = length
    for d, s in reversed(pairs):
        nested = nested and s >= inner
        inner = (d - 1) * s + inner
    for d, s in pairs:
        starts = (starts[:, None] + np.arange(d, dtype=np.int64) * s).ravel()
    return (starts if nested else np.unique(starts)), length


@dataclass(frozen=True, slots=True)
class Written:
    """The runs one close covers: start, end and writer node of each, sorted by start."""

    starts: np.ndarray
    ends: np.ndarray
    nodes: np.ndarray
    longest: int  # the longest run's length (bounds the search for overlaps)

    @staticmethod
    def of(writes: list[tuple[int, Runs]]) -> Written:
        """The runs of `writes` (writer node, its runs)."""
        counts = [len(r[0]) for _, r in writes]  # NOTE: each writer's length and node once
        starts = np.concatenate([r[0] for _, r in writes])
        lengths = np.array([r[1] for _, r in writes], np.int64).repeat(counts)
        nodes = np.array([n for n, _ in writes], np.int64).repeat(counts)
        order = np.argsort(starts, kind="stable")
        longest = int(lengths.max()) if len(lengths) else 1
        return Written(starts[order], starts[order] + lengths[order], nodes[order], longest)

    def writers(self, runs: Runs) -> list[int]:
        """The writer nodes, ascending, of the runs that overlap any of `runs`."""
        starts, length = runs
        if len(starts) == 1:  # NOTE: one run (most reads): the same, with fewer numpy calls
            at = int(starts[0])
            first = int(self.starts.searchsorted(at - self.longest, side="right"))
            last = int(self.starts.searchsorted(at + length, side="left"))
            if first >= last:
                return []
            hit = self.ends[first:last] > at
            return sorted(set(self.nodes[first:last][hit].tolist()))
        if not len(starts):
            return []
        # NOTE: the arrays' own methods, not numpy's functions (each a Python wrapper more)
        lo = self.starts.searchsorted(starts - self.longest, side="right")
        counts = self.starts.searchsorted(starts + length, side="left") - lo
        ends = counts.cumsum()
        total = int(ends[-1])
        if not total:
            return []
        # NOTE: every candidate run starts before the read's end; it overlaps if it ends after
        # the read's start
        idx = np.arange(total) + (lo - (ends - counts)).repeat(counts)
        hit = self.ends[idx] > starts.repeat(counts)
        # NOTE: a set of a few ints, not np.unique (which also imports numpy.ma, 17 ms)
        return sorted(set(self.nodes[idx[hit]].tolist()))


def by_channels(closes: list[Written], off: int, channels: int, plane: int) -> bool:
    """Whether the `channels` planes of `plane` elements at `off` were written channel group
    after channel group: every writer of the first plane comes before every writer of the last
    (its producer's tiles were groups of whole planes; a band of rows of every channel writes
    the last plane's first rows before the first plane's last ones)."""
    if channels < 2:
        return False

    def writers(at: int) -> list[int]:
        runs = (np.array([at], dtype=np.int64), plane)
        return sorted({n for w in closes for n in w.writers(runs)})

    first, last = writers(off), writers(off + (channels - 1) * plane)
    return bool(first) and bool(last) and first[-1] < last[0]
