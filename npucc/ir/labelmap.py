"""Address-range labels: each byte range's latest release in a tier (replay's address reuse).

`replay` records each release over the range it frees and reads the releases it overwrites
(`LabelMap.assign`). DLR's scan keeps its own labels with its free lists, in its compiled
kernel (npucc/backend/schedule/scan_kernel.py, `Space`), which the IR cannot import.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class LabelMap:
    """Disjoint address ranges, each labelled with an int (a release position or node)."""

    __slots__ = ("starts", "ends", "label")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.label: list[int] = []

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
            return prev
        prev = list(dict.fromkeys(labels[i:j])) if j > i + 1 else labels[i:j]
        self._splice(i, j, lo, hi, label)
        return prev

    def _splice(self, i: int, j: int, lo: int, hi: int, label: int) -> None:
        """Replace ranges i..j-1 (those meeting [lo, hi)) by [lo, hi) and what they keep
        outside it."""
        starts, ends, labels = self.starts, self.ends, self.label
        if i == j:
            starts.insert(i, lo)
            ends.insert(i, hi)
            labels.insert(i, label)
            return
        below = starts[i] < lo  # the first range keeps a piece below lo
        above = ends[j - 1] > hi  # the last range keeps a piece above hi
        if below and above:
            starts[i:j] = [starts[i], lo, hi]
            ends[i:j] = [lo, hi, ends[j - 1]]
            labels[i:j] = [labels[i], label, labels[j - 1]]
        elif below:
            starts[i:j] = [starts[i], lo]
            ends[i:j] = [lo, hi]
            labels[i:j] = [labels[i], label]
        elif above:
            starts[i:j] = [lo, hi]
            ends[i:j] = [hi, ends[j - 1]]
            labels[i:j] = [label, labels[j - 1]]
        else:
            starts[i:j] = [lo]
            ends[i:j] = [hi]
            labels[i:j] = [label]
