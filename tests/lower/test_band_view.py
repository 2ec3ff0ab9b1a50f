"""Band views: a copy in a band's coordinates remapped onto its whole tensor, element by element."""

from __future__ import annotations

import itertools

import pytest

from npucc.backend.lower.band_view import BandView

# rows 3..7 (4 rows) of every 9 x 5 plane, the whole tensor at element 11 of its DDR tensor
VIEW = BandView("t", 11, 4 * 5, 9 * 5, 3 * 5)


def _elements(off: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> list[int]:
    return [off + sum(i * s for i, s in zip(idx, strides, strict=True))
            for idx in itertools.product(*map(range, dims))]  # fmt: skip


@pytest.mark.parametrize(
    ("off", "dims", "strides", "pieces"),
    [
        (5, (3, 2, 5), (20, 5, 1), 1),  # planes x rows x cols: one pattern
        (0, (60,), (1,), 1),  # three whole planes, flat: one 2-d pattern
        (7, (50,), (1,), 3),  # flat, from mid-plane: head, whole planes, tail
        (2, (6, 7), (7, 1), 6),  # rows of 7 across planes of 20: cut where planes end
    ],
)
def test_every_element_lands_on_its_row_of_the_whole(off, dims, strides, pieces):
    other = tuple(
        reversed(list(itertools.accumulate((1, *reversed(dims[1:])), lambda a, b: a * b)))
    )
    out = VIEW.remap(off, dims, strides, 100, other)
    assert len(out) == pieces
    got = sorted(
        (o, w)
        for w0, d, st, o0, ost in out
        for w, o in zip(_elements(w0, d, st), _elements(o0, d, ost), strict=True)
    )
    want = sorted(
        (o, VIEW.at(e))
        for e, o in zip(_elements(off, dims, strides), _elements(100, dims, other), strict=True)
    )
    assert got == want
    assert VIEW.at(0) == 11 + 15 and VIEW.at(20) == 11 + 45 + 15  # plane 1 starts 9 rows on
