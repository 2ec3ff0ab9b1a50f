"""Row bands of DDR tensors: a copy addressed in a band's coordinates, remapped to its tensor.

A cascaded layer (npucc.backend.lower.cascade) reads and writes rows [row0, row0 + rows) of
every [H, W] plane of a DDR tensor as if they were a tensor of their own, [..., rows, W]. The
builder remaps each such copy to the whole tensor: band element e lies at
`base + (e // plane) * whole_plane + row0 * W + e % plane`. A pattern whose dims either step
whole planes or stay inside one plane maps to one pattern; any other is cut at plane
boundaries into pieces that do (the regular pieces merged back into one strided copy).
"""

from __future__ import annotations

from dataclasses import dataclass

# one piece of a remapped copy: (whole offset, dims, whole strides, other offset, other strides)
Piece = tuple[int, tuple[int, ...], tuple[int, ...], int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class BandView:
    """Rows of every plane of DDR tensor `key` (from element `base`) seen as a tensor."""

    key: str
    base: int  # element of `key` where the whole tensor starts
    plane: int  # elements of one band plane (rows x W)
    whole_plane: int  # elements of one plane of the whole tensor (H x W)
    row_off: int  # first row of the band x W

    def at(self, e: int) -> int:
        """The element of `key` holding band element `e`."""
        q, r = divmod(e, self.plane)
        return self.base + q * self.whole_plane + self.row_off + r

    def span(self, elems: int) -> tuple[int, int]:
        """The elements [lo, hi) of `key` a band of `elems` elements lies within."""
        return self.at(0), self.at(elems - 1) + 1

    def _fits(self, off: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
        """Whether the pattern's in-plane dims stay inside the plane of its first element."""
        inner = sum((n - 1) * s for n, s in zip(dims, strides, strict=True) if s % self.plane)
        return off % self.plane + inner < self.plane

    def remap(
        self, off: int, dims: tuple[int, ...], st: tuple[int, ...], other: int, ost: tuple[int, ...]
    ) -> list[Piece]:
        """The pieces of a copy whose band side is (off, dims, st) and other side (other, ost)."""
        if self._fits(off, dims, st):
            whole = tuple(s // self.plane * self.whole_plane if s % self.plane == 0 else s
                          for s in st)  # fmt: skip
            return [(self.at(off), dims, whole, other, ost)]
        # the outermost in-plane dim with more than one index: cut it where a plane ends
        i = next(j for j, n in enumerate(dims) if n > 1 and st[j] % self.plane)
        n, s = dims[i], st[i]
        rest = sum((m - 1) * t for j, (m, t) in enumerate(zip(dims, st, strict=True))
                   if j != i and t % self.plane)  # fmt: skip
        pieces: list[Piece] = []
        j0 = 0
        while j0 < n:
            start = off + j0 * s
            room = self.plane - rest - start % self.plane - 1
            j1 = min(n, j0 + max(1, room // s + 1)) if room >= 0 else j0 + 1
            sub = (*dims[:i], j1 - j0, *dims[i + 1 :])
            pieces += self.remap(start, sub, st, other + j0 * ost[i], ost)
            j0 = j1
        return _merge(pieces)


def _merge(pieces: list[Piece]) -> list[Piece]:
    """Runs of equal pieces at constant steps on both sides as one piece with one more dim."""
    out: list[Piece] = []
    i = 0
    while i < len(pieces):
        off, dims, st, other, ost = pieces[i]
        j = i + 1
        if j < len(pieces) and pieces[j][1:3] == (dims, st) and pieces[j][4] == ost:
            step, ostep = pieces[j][0] - off, pieces[j][3] - other
            while (
                j < len(pieces)
                and pieces[j][1:3] == (dims, st)
                and pieces[j][4] == ost
                and pieces[j][0] - off == (j - i) * step
                and pieces[j][3] - other == (j - i) * ostep
            ):
                j += 1
        if j - i > 1:
            out.append((off, (j - i, *dims), (step, *st), other, (ostep, *ost)))
        else:
            out.append(pieces[i])
        i = j
    return out
