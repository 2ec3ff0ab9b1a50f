"""Grid cuts: split a rectangle of cores into sub-grids in proportion to each part's compute."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from npucc.ir.plan import LayerLoad, Rect


def compute_weight(layer: LayerLoad) -> float:
    """A layer's weight when sub-grids are cut in proportion to compute: its MACs and element
    operations, plus one (a layer without either still gets cores)."""
    return float(layer.macs + layer.vops) + 1.0


def allocate(units: int, weights: list[float]) -> list[int] | None:
    """SET's optimal tile allocation: floor of the proportional share (at least one), then
    each spare unit to the part with the most work per unit; None if units < parts."""
    k = len(weights)
    if units < k:
        return None
    total = sum(weights) or 1.0
    alloc = [max(1, int(units * w / total)) for w in weights]
    spare = units - sum(alloc)
    while spare < 0:  # minimum-one grants may overshoot: take from the richest
        j, low = 0, weights[0] / alloc[0] if alloc[0] > 1 else 1e300
        for i in range(1, k):  # NOTE: the least, the first of equals
            ratio = weights[i] / alloc[i] if alloc[i] > 1 else 1e300
            if ratio < low:
                j, low = i, ratio
        alloc[j] -= 1
        spare += 1
    while spare > 0:
        j, high = 0, weights[0] / alloc[0]
        for i in range(1, k):  # NOTE: the most, the first of equals
            ratio = weights[i] / alloc[i]
            if ratio > high:
                j, high = i, ratio
        alloc[j] += 1
        spare -= 1
    return alloc


def strips(rect: Rect, weights: list[float], axis: int) -> list[Rect] | None:
    """Cut across one axis (0: along X, columns; 1: along Y, rows) into len(weights) strips."""
    length = rect.w if axis == 0 else rect.h
    sizes = allocate(length, weights)
    if sizes is None:
        return None
    out, pos = [], 0
    for s in sizes:
        if axis == 0:
            out.append(Rect(rect.x + pos, rect.y, s, rect.h))
        else:
            out.append(Rect(rect.x, rect.y + pos, rect.w, s))
        pos += s
    return out


def cut(rect: Rect, weights: list[float], axis: int) -> tuple[list[Rect], int] | None:
    """One round: strips along `axis`, else the orthogonal axis; None when indivisible.

    Returns the rectangles (in the order of `weights`) and the axis used.
    """
    for a in (axis, 1 - axis):
        rects = strips(rect, weights, a)
        if rects is not None:
            return rects, a
    return None


def cut_many(rect: Rect, weights: Sequence[float], axis: int = 0) -> list[Rect] | None:
    """Any number of parts: one round if it fits, else recursive halving with alternating
    axes (parts stay in order); None when the rectangle has fewer cores than parts."""
    rects = _cut_many(rect, tuple(weights), axis)
    return None if rects is None else list(rects)


@lru_cache(maxsize=65536)
def _cut_many(rect: Rect, weights: tuple[float, ...], axis: int) -> tuple[Rect, ...] | None:
    """`cut_many` (memoised: the baselines and the beam cut the same runs of layers, and the
    halves of a cut repeat among runs that share their layers)."""
    k = len(weights)
    if k == 1:
        return (rect,)
    if rect.cores < k:
        return None
    one = cut(rect, list(weights), axis)
    if one is not None:
        return tuple(one[0])
    total, acc, split = sum(weights), 0.0, 1
    for i in range(1, k):
        acc += weights[i - 1]
        if acc >= total / 2:
            split = i
            break
    else:
        split = k - 1
    for a in (axis, 1 - axis):
        length = rect.w if a == 0 else rect.h
        if length < 2:
            continue
        left, right = weights[:split], weights[split:]
        halves = _proportional_halves(rect, len(left), len(right), sum(left), sum(right), a)
        if halves is None:
            continue
        first = _cut_many(halves[0], left, 1 - a)
        second = _cut_many(halves[1], right, 1 - a)
        if first is not None and second is not None:
            return first + second
    return None


def _proportional_halves(
    rect: Rect, n_left: int, n_right: int, w_left: float, w_right: float, axis: int
) -> list[Rect] | None:
    """Two strips whose core counts can hold n_left and n_right parts, sized by work."""
    length = rect.w if axis == 0 else rect.h
    across = rect.h if axis == 0 else rect.w
    lo = -(-n_left // across)
    hi = length - -(-n_right // across)
    if lo > hi:
        return None
    share = round(length * w_left / ((w_left + w_right) or 1.0))
    size = min(max(share, lo, 1), hi)
    return strips_at(rect, size, axis)


def strips_at(rect: Rect, size: int, axis: int) -> list[Rect]:
    """Two strips, the first `size` long along `axis`."""
    if axis == 0:
        return [
            Rect(rect.x, rect.y, size, rect.h),
            Rect(rect.x + size, rect.y, rect.w - size, rect.h),
        ]
    return [Rect(rect.x, rect.y, rect.w, size), Rect(rect.x, rect.y + size, rect.w, rect.h - size)]
