"""Greedy placement: order parts along the cut so that heavy traffic travels few hops."""

from __future__ import annotations

from collections.abc import Sequence

from npucc.backend.hypercut.gridcut import strips
from npucc.backend.hypercut.set_model import rect_hops
from npucc.ir.plan import Rect


def place(
    rect: Rect,
    weights: Sequence[float],
    axis: int,
    traffic: dict[tuple[int, int], float],
    anchors: Sequence[Sequence[tuple[Rect, float]]],
) -> list[Rect] | None:
    """Rectangles for parts 0..k-1 (strips along `axis`).

    Parts are taken in order; each gets the free strip position that minimises the
    volume-weighted Manhattan distance between its centre and its already placed partners
    (`traffic[(a, b)]` bytes between parts) and its fixed producers (`anchors[part]`).
    """
    k = len(weights)
    slot_of: list[int] = [-1] * k
    free = list(range(k))
    for part in range(k):
        best: tuple[float, int] | None = None
        for slot in free:
            order = _order(slot_of, part, slot, free)
            rects = strips(rect, [weights[p] for p in order], axis)
            if rects is None:
                return None
            mine = rects[slot]
            cost = sum(v * rect_hops(r, mine) for r, v in anchors[part])
            for other in range(part):
                vol = traffic.get((other, part), 0.0) + traffic.get((part, other), 0.0)
                if vol:
                    cost += vol * rect_hops(rects[slot_of[other]], mine)
            if best is None or cost < best[0]:
                best = (cost, slot)
        assert best is not None
        slot_of[part] = best[1]
        free.remove(best[1])
    order = [0] * k
    for part, slot in enumerate(slot_of):
        order[slot] = part
    rects = strips(rect, [weights[p] for p in order], axis)
    if rects is None:
        return None
    return [rects[slot_of[part]] for part in range(k)]


def _order(slot_of: list[int], part: int, slot: int, free: list[int]) -> list[int]:
    """Part in each slot: placed parts, `part` in `slot`, the rest in their original order."""
    k = len(slot_of)
    order = [-1] * k
    for p, s in enumerate(slot_of):
        if s >= 0:
            order[s] = p
    order[slot] = part
    rest = iter(p for p in range(part + 1, k))
    for s in free:
        if order[s] < 0:
            order[s] = next(rest)
    return order
