"""Address-range labels (each byte range's latest release in a tier) and the coldest-fit query.

DLR's free list and replay's address-reuse edges ask, per tier, which aligned window of a free
range was released longest ago (`LabelMap.coldest`); `replay` records releases the same way.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import deque
from typing import Literal

import numpy as np

SMALL_WINDOW = 16  # LabelMap.coldest over at most this many ranges: slices, not a deque
NUMPY_WINDOW = 96  # ... over more than this many: numpy, a sparse table of range maxima
RUN_WINDOW = 1024  # ... over at most this many released end to end: _coldest_run first


def align_up(value: int, alignment: int) -> int:
    """Smallest multiple of `alignment` that is >= value."""
    return -(-value // alignment) * alignment


class LabelMap:
    """Disjoint address ranges, each labelled with an int (a release position or node)."""

    __slots__ = ("starts", "ends", "label", "heap", "holes", "held")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.label: list[int] = []
        # NOTE: from the first query over more than NUMPY_WINDOW ranges (`_least`), a lazy
        # min-heap of (label, start, end), an entry stale once no range is exactly it, and
        # the number of holes between ranges, both kept by put/assign; `held`: the lists
        # they describe (lists assigned from outside, a restored copy, make them rebuilt)
        self.heap: list[tuple[int, int, int]] | None = None
        self.holes = 0
        self.held: tuple[list[int], list[int], list[int]] | None = None

    def coldest(self, lo: int, hi: int, size: int, al: int) -> tuple[int, int] | None:
        """The least (latest release over [off, off+size), off) inside [lo, hi), or None.

        The offsets tried are lo and hi - size (aligned inwards) and the aligned starts and
        ends of the labelled ranges strictly inside (lo, hi), as in FreeList.coldest_fit.
        """
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, lo) - 1
        if i < 0 or ends[i] <= lo:
            i += 1
        j = bisect_left(starts, hi)
        last = hi - size  # the highest offset that fits
        if j - i <= RUN_WINDOW and size > 0:
            found = self._coldest_run(i, j, lo, hi, size, al)
            if found is not False:
                return found
        if al == 1:  # the same offsets: ranges are disjoint and sorted, so are their bounds
            if last < lo:
                return None
            if i == j or starts[i] >= lo + size:  # the first offset meets no labelled range
                return (-1, lo)
            if j - i > NUMPY_WINDOW:
                return self._coldest_in(i, j, lo, hi, size, al) or self._coldest_np(
                    i, j, lo, hi, size, al
                )
            offsets = [lo]
            for k in range(i, j):
                x = starts[k]
                if lo < x < last and x != offsets[-1]:
                    offsets.append(x)
                x = ends[k]
                if lo < x < last and x != offsets[-1]:
                    offsets.append(x)
            if last > offsets[-1]:
                offsets.append(last)
            return self._window_min(i, j, offsets, size)
        if j - i > NUMPY_WINDOW:
            return self._coldest_in(i, j, lo, hi, size, al) or self._coldest_np(
                i, j, lo, hi, size, al
            )
        # NOTE: the bounds inside (lo, hi) ascend (disjoint sorted ranges), so do they aligned
        # up: the distinct offsets come out sorted, each compared with the last one kept
        first = -(-lo // al) * al  # align_up, inlined
        offsets = [first] if first <= last else []
        prev = first
        for k in range(i, j):
            x = starts[k]
            if x > lo:
                off = -(-x // al) * al
                if off > last:
                    break
                if off != prev:
                    offsets.append(off)
                    prev = off
            x = ends[k]
            if x < hi:
                off = -(-x // al) * al
                if off > last:
                    break
                if off != prev:
                    offsets.append(off)
                    prev = off
        top = last // al * al
        if lo <= top and top != prev:
            offsets.append(top)
        return self._window_min(i, j, offsets, size)

    def _coldest_run(
        self, i: int, j: int, lo: int, hi: int, size: int, al: int
    ) -> tuple[int, int] | None | Literal[False]:
        """`coldest` over ranges i..j-1 when no hole lies between them (holes below the first
        or above the last allowed), trying only the offsets whose first range is colder than
        the best so far; False where a hole lies between them (the per-offset loop answers).
        `size` > 0."""
        # NOTE: DLR's tiers are mostly released ranges end to end, so this answers nearly
        # every placement of a compiled program or trace
        starts, ends, label = self.starts, self.ends, self.label
        last = hi - size
        first = -(-lo // al) * al  # align_up, inlined
        if first > last:
            return None
        if i == j:
            return (-1, first)
        if starts[i + 1 : j] != ends[i : j - 1]:
            return False
        s, e = starts[i], ends[j - 1]
        # no hole between the ranges: a window meeting none lies below s or above e, and the
        # lowest offsets tried there are first and e aligned up
        if s > lo and first + size <= s:
            return (-1, first)
        top = -(-e // al) * al
        if e < hi and top + size <= hi:
            return (-1, top)
        # so every window meets a range (one below e: e aligned up is past last): none is
        # colder than their least label m, and one as cold starts in the first range labelled
        # m, k (it meets only ranges labelled m, those below k are labelled otherwise and no
        # hole lies between them, k == i aside)
        m = min(label[i:j])
        k = label.index(m, i, j)
        if k > i or s <= lo:
            x, y = starts[k], ends[k]
            off = -(-(x if x > lo else lo) // al) * al
            if off + size <= (y if y < hi else hi):
                return (m, off)
        # else by ascending offset: first, each range's start aligned up (the ends are the
        # next starts), last aligned down; an offset in range a has a window at least as
        # late as label[a] (one past it is the next range's offset), so it is tried only
        # when label[a] is below the best so far, which no later offset can tie
        x = bisect_right(ends, first, i, j)
        y = bisect_left(starts, first + size, x, j)
        best, best_off = max(label[x:y]), first
        for a in range(i if s > lo else i + 1, j):
            if label[a] < best:
                off = -(-starts[a] // al) * al
                if off > last:
                    break
                x = bisect_right(ends, off, a, j)
                y = bisect_left(starts, off + size, x, j)
                latest = max(label[x:y])
                if latest < best:
                    best, best_off = latest, off
                    if latest == m:
                        return (m, off)
        off = last // al * al
        x = bisect_right(ends, off, i, j)
        y = bisect_left(starts, off + size, x, j)
        latest = max(label[x:y])
        return (latest, off) if latest < best else (best, best_off)

    def _coldest_in(
        self, i: int, j: int, lo: int, hi: int, size: int, al: int
    ) -> tuple[int, int] | None:
        """`coldest` over ranges i..j-1 when its window lies in the first range of their least
        label, else None (a hole in [lo, hi), or the window not inside that range)."""
        # NOTE: with ranges i..j-1 covering [lo, hi) without a hole every window meets one,
        # so none is colder than their least label m, and a window as cold starts in a range
        # labelled m: at or above the first one, k; the lowest offset tried there is lo or
        # k's start aligned up, and where its window lies inside k it is the answer
        starts, ends, label = self.starts, self.ends, self.label
        if starts[i] > lo or ends[j - 1] < hi:
            return None
        m, start, end = self._least()
        if self.holes and starts[i + 1 : j] != ends[i : j - 1]:
            return None
        if not i <= bisect_left(starts, start) < j:  # the map's least is not theirs
            m = min(label[i:j])
            k = label.index(m, i, j)
            start, end = starts[k], ends[k]
        off = -(-(start if start > lo else lo) // al) * al  # align_up, inlined
        if off + size > end or off + size > hi:
            return None
        return (m, off)

    def _least(self) -> tuple[int, int, int]:
        """The heap's top (label, start, end): the least label, on its first range."""
        heap, held = self.heap, self.held
        starts, ends, label = self.starts, self.ends, self.label
        if (
            heap is None
            or held is None
            or held[0] is not starts
            or held[1] is not ends
            or held[2] is not label
            or len(heap) > 4 * len(starts) + 64  # stale entries: compacted
        ):
            heap = self.heap = list(zip(label, starts, ends, strict=True))
            heapq.heapify(heap)
            self.holes = sum(e < s for e, s in zip(ends, starts[1:], strict=False))
            self.held = (starts, ends, label)
        while not self._exists(heap[0]):
            heapq.heappop(heap)
        return heap[0]

    def _exists(self, entry: tuple[int, int, int]) -> bool:
        """Is a range exactly `entry`'s (label, start, end)?"""
        label, start, end = entry
        x = bisect_left(self.starts, start)
        return (
            x < len(self.starts)
            and self.starts[x] == start
            and self.ends[x] == end
            and self.label[x] == label
        )

    def _coldest_np(
        self, i: int, j: int, lo: int, hi: int, size: int, al: int
    ) -> tuple[int, int] | None:
        """`coldest` over ranges i..j-1 with numpy: the same offsets, each window's latest
        from a sparse table of range maxima (O(R log R + C), no Python loop per range)."""
        starts = np.array(self.starts[i:j], np.int64)
        ends = np.array(self.ends[i:j], np.int64)
        label = np.array(self.label[i:j], np.int64)
        last = hi - size
        # disjoint sorted ranges: their starts and ends interleaved ascend, and stay so aligned
        bounds = np.stack((starts, ends), axis=1).ravel()
        bounds = bounds[(bounds > lo) & (bounds < hi)]
        bounds = -(-bounds // al) * al  # align_up
        bounds = bounds[: np.searchsorted(bounds, last, "right")]
        first, top = -(-lo // al) * al, last // al * al  # aligned lo and last, if inside
        offs = np.concatenate((np.array([first] if first <= last else [], np.int64), bounds,
                               np.array([top] if top >= lo else [], np.int64)))  # fmt: skip
        if not len(offs):
            return None
        offs = offs[np.concatenate(([True], offs[1:] != offs[:-1]))]  # distinct
        a = np.searchsorted(ends, offs, "right")  # the first range ending past the offset
        b = np.searchsorted(starts, offs + size, "left")  # the first starting past its end
        width = b - a
        latest = np.full(len(offs), -1, np.int64)
        some = width > 0
        if some.any():
            aw, bw, ww = a[some], b[some], width[some]
            n = len(label)
            levels = int(ww.max()).bit_length()  # level k holds the maxima of 2**k ranges
            table = np.empty((levels, n), np.int64)
            table[0] = label
            for k in range(1, levels):
                half = 1 << (k - 1)
                table[k, : n - 2 * half + 1] = np.maximum(
                    table[k - 1, : n - 2 * half + 1], table[k - 1, half : n - half + 1]
                )
            level = np.frexp(ww)[1] - 1  # floor(log2(width)), exact
            latest[some] = np.maximum(table[level, aw], table[level, bw - (1 << level)])
        k = int(np.argmin(latest))
        return int(latest[k]), int(offs[k])

    def _window_min(self, i: int, j: int, offsets: list[int], size: int) -> tuple[int, int] | None:
        """The least (latest over [off, off+size), off) for ascending offsets, ranges i..j-1."""
        # both ends of the window only move right, so a deque of range indices with decreasing
        # labels (a sliding-window maximum) gives every window's latest in O(R + C) overall;
        # with few ranges a max over the window's slice is cheaper
        # NOTE: labels are >= 0, so an offset meeting no labelled range (-1) cannot be beaten
        starts, ends, label = self.starts, self.ends, self.label
        best: tuple[int, int] | None = None
        a = b = i  # the window meets ranges a..b-1
        if j - i <= SMALL_WINDOW:
            for off in offsets:
                end = off + size
                while b < j and starts[b] < end:
                    b += 1
                while a < b and ends[a] <= off:
                    a += 1
                latest = max(label[a:b]) if a < b else -1
                if best is None or latest < best[0]:
                    best = (latest, off)
                    if latest < 0:
                        break
            return best
        window: deque[int] = deque()
        for off in offsets:
            end = off + size
            while b < j and starts[b] < end:
                while window and label[window[-1]] <= label[b]:
                    window.pop()
                window.append(b)
                b += 1
            while a < b and ends[a] <= off:
                a += 1
            while window and window[0] < a:
                window.popleft()
            latest = label[window[0]] if window else -1
            if best is None or latest < best[0]:
                best = (latest, off)
                if latest < 0:
                    break
        return best

    def latest(self, lo: int, hi: int) -> int:
        """Latest release position over [lo, hi) (-1 where never released)."""
        i = bisect_right(self.starts, lo) - 1
        if i < 0 or self.ends[i] <= lo:
            i += 1
        j = bisect_left(self.starts, hi)
        return max(self.label[i:j], default=-1)

    def assign(self, lo: int, hi: int, label: int) -> list[int]:
        """Label [lo, hi) with `label`; return the distinct labels it overwrote, in order."""
        if hi <= lo:
            return []
        starts, labels = self.starts, self.label
        i = bisect_right(starts, lo) - 1
        if i < 0 or self.ends[i] <= lo:
            i += 1
        j = bisect_left(starts, hi)
        if j == i + 1 and starts[i] == lo and self.ends[i] == hi:  # the same range again
            prev = [labels[i]]
            labels[i] = label
            if self.heap is not None:
                heapq.heappush(self.heap, (label, lo, hi))
            return prev
        prev = list(dict.fromkeys(labels[i:j])) if j > i + 1 else labels[i:j]
        self._splice(i, j, lo, hi, label)
        return prev

    def put(self, lo: int, hi: int, label: int) -> None:
        """`assign` without the overwritten labels."""
        if hi <= lo:
            return
        starts = self.starts
        i = bisect_right(starts, lo) - 1
        if i < 0 or self.ends[i] <= lo:
            i += 1
        j = bisect_left(starts, hi)
        if j == i + 1 and starts[i] == lo and self.ends[i] == hi:  # the same range again
            self.label[i] = label
            if self.heap is not None:
                heapq.heappush(self.heap, (label, lo, hi))
        else:
            self._splice(i, j, lo, hi, label)

    def _splice(self, i: int, j: int, lo: int, hi: int, label: int) -> None:
        """Replace ranges i..j-1 (those meeting [lo, hi)) by [lo, hi) and what they keep
        outside it."""
        starts, ends, labels = self.starts, self.ends, self.label
        heap = self.heap
        if heap is not None:  # the holes between ranges i-1..j, counted again after
            self.holes -= sum(
                e < s
                for e, s in zip(ends[max(i - 1, 0) : j], starts[max(i, 1) : j + 1], strict=False)
            )
        if i == j:
            starts.insert(i, lo)
            ends.insert(i, hi)
            labels.insert(i, label)
            new = 1
        else:
            below = starts[i] < lo  # the first range keeps a piece below lo
            above = ends[j - 1] > hi  # the last range keeps a piece above hi
            if below and above:
                starts[i:j] = [starts[i], lo, hi]
                ends[i:j] = [lo, hi, ends[j - 1]]
                labels[i:j] = [labels[i], label, labels[j - 1]]
                new = 3
            elif below:
                starts[i:j] = [starts[i], lo]
                ends[i:j] = [lo, hi]
                labels[i:j] = [labels[i], label]
                new = 2
            elif above:
                starts[i:j] = [lo, hi]
                ends[i:j] = [hi, ends[j - 1]]
                labels[i:j] = [label, labels[j - 1]]
                new = 2
            else:
                starts[i:j] = [lo]
                ends[i:j] = [hi]
                labels[i:j] = [label]
                new = 1
        if heap is not None:
            for x in range(i, i + new):
                heapq.heappush(heap, (labels[x], starts[x], ends[x]))
            self.holes += sum(
                e < s
                for e, s in zip(
                    ends[max(i - 1, 0) : i + new], starts[max(i, 1) : i + new + 1], strict=False
                )
            )
