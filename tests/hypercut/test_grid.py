"""Grid cuts cover the mesh exactly with disjoint rectangles; allocation and placement."""

import pytest

from npucc.backend.hypercut.gridcut import allocate, cut, cut_many
from npucc.backend.hypercut.placement import place
from npucc.ir.plan import Rect


def cells(r: Rect) -> set[tuple[int, int]]:
    return {(x, y) for x in range(r.x, r.x + r.w) for y in range(r.y, r.y + r.h)}


def test_allocate_floor_then_spare():
    assert allocate(8, [5, 1, 1]) == [6, 1, 1]
    assert allocate(10, [1, 1, 1]) == [4, 3, 3]
    assert allocate(2, [1, 1, 1]) is None


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 13, 20, 64])
def test_cut_many_partitions_the_mesh(k):
    whole = Rect(0, 0, 8, 8)
    rects = cut_many(whole, [float(i % 4 + 1) for i in range(k)])
    assert rects is not None and len(rects) == k
    seen: set[tuple[int, int]] = set()
    for r in rects:
        assert not (cells(r) & seen)
        seen |= cells(r)
    assert seen == cells(whole)


def test_cut_many_answers_a_new_list_each_call():
    first = cut_many(Rect(0, 0, 8, 8), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert first is not None
    first.clear()  # NOTE: the answers are memoised: a caller's edit must not reach the next
    again = cut_many(Rect(0, 0, 8, 8), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert again is not None and len(again) == 9


def test_cut_orthogonal_fallback_and_indivisible():
    rects, axis = cut(Rect(0, 0, 2, 8), [1.0, 1.0, 1.0], 0)
    assert axis == 1 and sum(r.cores for r in rects) == 16
    assert cut(Rect(0, 0, 2, 2), [1.0, 1.0, 1.0], 0) is None
    assert cut_many(Rect(0, 0, 1, 2), [1.0, 1.0, 1.0]) is None


def test_place_near_producer():
    east = Rect(7, 0, 1, 8)
    rects = place(Rect(0, 0, 7, 8), [1.0, 1.0], 0, {}, [[(east, 100.0)], []])
    assert rects is not None and rects[0].x > rects[1].x
