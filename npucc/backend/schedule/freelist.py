"""A tier's free address space as a sorted list of disjoint, merged segments [start, end)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque


def align_up(value: int, alignment: int) -> int:
    """Smallest multiple of `alignment` that is >= value."""
    return -(-value // alignment) * alignment


class FreeList:
    """Free segments of one tier of `capacity` bytes; offsets are aligned to `alignment`."""

    __slots__ = ("starts", "ends", "alignment")

    def __init__(self, capacity: int, alignment: int = 1) -> None:
        self.starts: list[int] = [0] if capacity > 0 else []
        self.ends: list[int] = [capacity] if capacity > 0 else []
        self.alignment = alignment

    def first_fit(self, size: int) -> int | None:
        """Lowest aligned offset where `size` bytes fit, or None."""
        for start, end in zip(self.starts, self.ends, strict=True):
            offset = align_up(start, self.alignment)
            if offset + size <= end:
                return offset
        return None

    def best_fit(self, size: int) -> int | None:
        """Aligned start of the segment with the least slack for `size` (lowest on ties)."""
        best: int | None = None
        best_slack = 0
        for start, end in zip(self.starts, self.ends, strict=True):
            offset = align_up(start, self.alignment)
            slack = end - offset - size
            if slack >= 0 and (best is None or slack < best_slack):
                best, best_slack = offset, slack
        return best

    def coldest_fit(self, size: int, released: LabelMap) -> int | None:
        """Best-fit among the aligned offsets whose range was released longest ago, or None.

        Per free segment the candidates are its aligned start, its aligned end and the starts
        of the released ranges inside it; the key is (latest release over the range, slack of
        the segment, offset), so a buffer avoids addresses just given back when it can.
        """
        best: tuple[int, int, int] | None = None
        al = self.alignment
        for start, end in zip(self.starts, self.ends, strict=True):
            slack = end - start - size
            if slack < 0:
                continue
            found = released.coldest(start, end, size, al)
            if found is not None:
                cand = (found[0], slack, found[1])
                if best is None or cand < best:
                    best = cand
        return None if best is None else best[2]

    def take(self, offset: int, size: int) -> None:
        """Mark [offset, offset+size) used; it must lie inside one free segment."""
        if size == 0:
            return
        i = bisect_right(self.starts, offset) - 1
        if i < 0 or self.ends[i] < offset + size:
            raise ValueError(f"[{offset}, {offset + size}) is not free")
        start, end = self.starts[i], self.ends[i]
        pieces = [(s, e) for s, e in ((start, offset), (offset + size, end)) if e > s]
        self.starts[i : i + 1] = [s for s, _ in pieces]
        self.ends[i : i + 1] = [e for _, e in pieces]

    def give(self, offset: int, size: int) -> None:
        """Return [offset, offset+size) and merge it with adjacent free segments."""
        if size == 0:
            return
        end = offset + size
        i = bisect_right(self.starts, offset)
        if (i > 0 and self.ends[i - 1] > offset) or (i < len(self.starts) and self.starts[i] < end):
            raise ValueError(f"[{offset}, {end}) is already free")
        lo, hi = i, i
        if i > 0 and self.ends[i - 1] == offset:
            lo = i - 1
            offset = self.starts[i - 1]
        if i < len(self.starts) and self.starts[i] == end:
            hi = i + 1
            end = self.ends[i]
        self.starts[lo:hi] = [offset]
        self.ends[lo:hi] = [end]


class LabelMap:
    """Disjoint address ranges, each labelled with an int (a release position or node)."""

    __slots__ = ("starts", "ends", "label")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.label: list[int] = []

    def coldest(self, lo: int, hi: int, size: int, al: int) -> tuple[int, int] | None:
        """The least (latest release over [off, off+size), off) inside [lo, hi), or None.

        The offsets tried are lo and hi - size (aligned inwards) and the aligned starts and
        ends of the labelled ranges strictly inside (lo, hi), as in FreeList.coldest_fit.
        """
        i = bisect_right(self.starts, lo) - 1
        if i < 0 or self.ends[i] <= lo:
            i += 1
        j = bisect_left(self.starts, hi)
        last = hi - size  # the highest offset that fits
        inner = [x for x in self.starts[i:j] if x > lo] + [x for x in self.ends[i:j] if x < hi]
        cands = {off for x in inner if (off := -(-x // al) * al) <= last}  # align_up, inlined
        cands.update(off for off in (align_up(lo, al), last // al * al) if lo <= off <= last)
        return self._window_min(i, j, sorted(cands), size)

    def _window_min(self, i: int, j: int, offsets: list[int], size: int) -> tuple[int, int] | None:
        """The least (latest over [off, off+size), off) for ascending offsets, ranges i..j-1."""
        # both ends of the window only move right, so a deque of range indices with decreasing
        # labels (a sliding-window maximum) gives every window's latest in O(R + C) overall
        starts, ends, label = self.starts, self.ends, self.label
        best: tuple[int, int] | None = None
        window: deque[int] = deque()
        a = b = i  # the window meets ranges a..b-1
        for off in offsets:
            while b < j and starts[b] < off + size:
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
        i = bisect_right(self.starts, lo) - 1
        if i < 0 or self.ends[i] <= lo:
            i += 1
        j = bisect_left(self.starts, hi)
        prev = list(dict.fromkeys(self.label[i:j]))
        starts, ends, labels = [lo], [hi], [label]
        if i < j and self.starts[i] < lo:
            starts.insert(0, self.starts[i])
            ends.insert(0, lo)
            labels.insert(0, self.label[i])
        if i < j and self.ends[j - 1] > hi:
            starts.append(hi)
            ends.append(self.ends[j - 1])
            labels.append(self.label[j - 1])
        self.starts[i:j] = starts
        self.ends[i:j] = ends
        self.label[i:j] = labels
        return prev
