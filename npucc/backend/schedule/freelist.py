"""A tier's free address space as a sorted list of disjoint, merged segments [start, end)."""

from __future__ import annotations

from bisect import bisect_right

from npucc.ir.labelmap import LabelMap, align_up


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

    def last_fit(self, size: int) -> int | None:
        """Highest aligned offset where `size` bytes fit, or None."""
        for start, end in zip(reversed(self.starts), reversed(self.ends), strict=True):
            offset = (end - size) // self.alignment * self.alignment
            if offset >= start:
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
        top = offset + size
        if offset > start:  # a piece stays below
            self.ends[i] = offset
            if end > top:  # and one above
                self.starts.insert(i + 1, top)
                self.ends.insert(i + 1, end)
        elif end > top:  # only the piece above stays
            self.starts[i] = top
        else:  # the whole segment is taken
            del self.starts[i], self.ends[i]

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
