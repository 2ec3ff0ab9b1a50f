"""A plan order with a lower sunk L1+UB peak: local re-sequencing where the peak sits.

CPE's overlap budget (`headroom`) follows a reference order of G2 with each ALLOC sunk to its
first user; its peak is the budget. The lowering order runs a layer's pieces or a module's
branches in id order, so the peak often sits where one buffer c was started (a band written by
a first piece, a branch's concat part) before another's work that does not need it (the next
piece's window, the next branch's weight block) ran and freed its buffers. Two moves on a window
of the order from the start of a buffer c live at a peak position p to the FREE of a buffer d
live at p or at a later peak position (at most SPAN positions), each keeping the window's two
parts in their own order (so the result stays a topological order of G2):

- **delay**: the window's nodes that do not depend on c's start first, its dependants after;
- **hoist**: the ancestors of d's FREE in the window first, the rest after.

The move kept at p is the one whose window's highest live bytes are least, then the one that
reaches furthest (ResNet-50's bias loaded after its output block's last weight block, not only
after the first).

NOTE: only the window's own order changes, so the live bytes before and after it stay, and the
moves are accepted only when every position at the peak is lowered: the result's sunk peak is
below the input's, or the input itself is returned (same order, same bytes).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npucc.backend.schedule.dan import moves_kernel
from npucc.backend.schedule.dan.headroom import G2, event_arrays, g2_arrays
from npucc.ir.tiled import TileGraph, TileNode

SPAN = 1024  # the longest window tried (positions), which bounds a move's cost
# Peak levels lowered: one, the least change that puts the budget below the plan's peak (DAN
# ranks makespan before peak; on SqueezeNet three levels, 594,816 -> 575,488, cost 0.5 % of
# its makespan, one level, -> 590,656, 0.03 %: docs/roofline.md, danpeak2)
ROUNDS = 1


class _Plan:
    """Per node of G2 its counted L1+UB ALLOC size, the ALLOC its FREE ends, whether an ALLOC,
    and G2's preds in CSR form (`headroom.g2_arrays`), with the kernel's scratch marks."""

    __slots__ = ("size", "freed", "is_alloc", "off", "idx", "tag", "stamp")

    def __init__(self, graph: TileGraph, total: int, g2: G2) -> None:
        # per ALLOC node its bytes, per FREE node its ALLOC (`headroom.event_arrays`)
        self.size, alloc_of = event_arrays(graph, total)
        # per FREE node: its counted ALLOC (-1: not a FREE, or its ALLOC counts no bytes)
        self.freed = np.where((alloc_of >= 0) & (self.size[alloc_of] > 0), alloc_of, -1)
        self.off, self.idx, self.is_alloc = g2
        self.tag = np.full(total, -1, np.int64)  # moves_kernel.reach's marks
        self.stamp = 0

    def reach(self, window: np.ndarray, back: bool) -> np.ndarray:
        """Per node of `window` (a slice of a topological order): 1 if it depends on the first
        (if the last depends on it, `back`), else 0 (the rule's home: `moves_kernel.reach`)"""
        out = np.zeros(len(window), np.uint8)
        moves_kernel.reach(window, self.off, self.idx, self.tag, self.stamp, back, out)
        self.stamp += 1
        return out


def lower_peak(
    graph: TileGraph,
    nodes: Sequence[TileNode],
    preds: Sequence[Sequence[int]],
    order: Sequence[int],
    rounds: int = ROUNDS,
    g2: G2 | None = None,
) -> list[int]:
    """`order` (a topological order of `preds`) re-sequenced in windows so that its L1+UB peak
    with ALLOCs sunk drops by up to `rounds` levels, as far as the delay and hoist moves reach;
    `order` if they do not (`g2`: `headroom.g2_arrays(nodes, preds)`, if the caller has it)."""
    plan = _Plan(graph, len(nodes), g2_arrays(nodes, preds) if g2 is None else g2)
    best = list(order)
    for _ in range(rounds):
        found = _round(plan, best)
        if found is None:
            break
        best = found
    return best


def _round(plan: _Plan, order: list[int]) -> list[int] | None:
    """`order` with every position at its peak lowered by one move each; None if one is not."""
    at = np.array(order, np.int64)
    total = len(at)
    size, freed = plan.size, plan.freed
    # each non-ALLOC node's uses of counted ALLOCs (its preds), by position then in its list
    off = plan.off[at]
    count = np.where(plan.is_alloc[at], 0, plan.off[at + 1] - off)
    ends = np.cumsum(count)
    edge = np.arange(int(ends[-1]) if total else 0) - np.repeat(ends - count - off, count)
    pos = np.repeat(np.arange(total), count)
    alloc = plan.idx[edge]
    use = size[alloc] > 0
    pos, alloc = pos[use], alloc[use]
    # each counted ALLOC used: its start, the position of its first use
    by = np.argsort(alloc, kind="stable")
    head = np.ones(len(by), np.bool_)
    head[1:] = alloc[by[1:]] != alloc[by[:-1]]
    started, began = alloc[by[head]], pos[by[head]]
    first = np.full(total, -1, np.int64)  # per ALLOC node: its start (-1: none)
    first[started] = began
    gone = np.where(freed[at] >= 0, size[freed[at]], 0)  # per position: the bytes its FREE ends
    ended = np.flatnonzero(gone)  # NOTE: a FREE's counted ALLOC has bytes
    last = np.full(total, total, np.int64)  # per ALLOC node: its FREE's position (total: none)
    last[freed[at[ended]]] = ended
    # per position: the live bytes once its node's ALLOCs started
    starts = np.zeros(total + 1, np.int64)
    np.add.at(starts, began, size[started])
    cost = np.cumsum(starts[:total]) - (np.cumsum(gone) - gone)
    peak = int(cost.max()) if total else 0
    if not peak:
        return None
    ender = freed[at[ended]]
    if (first[ender] < 0).any():  # NOTE: as a dict of the starts did
        raise KeyError(int(ender[first[ender] < 0][0]))
    spans = _Spans(
        sorted(zip(began.tolist(), last[started].tolist(), strict=True)),
        sorted(zip(ended.tolist(), first[ender].tolist(), strict=True)),
        np.flatnonzero(cost == peak).tolist(),
    )
    rows = _Rows(plan, pos, alloc, first, gone, cost)
    new = list(order)
    done = -1  # the last position a move of this round rewrote
    for p in spans.tops:
        if p <= done:
            continue
        move = _best_move(plan, at, p, peak, spans, rows)
        if move is None:
            return None
        lo, seq = move
        if lo <= done:  # NOTE: windows of one round never overlap, so positions stay valid
            return None
        new[lo : lo + len(seq)] = seq
        done = lo + len(seq) - 1
    return new


class _Rows:
    """An order's counted uses and FREEs as arrays: the highest live bytes of a window's
    re-sequencing (`top`)."""

    __slots__ = ("at", "alloc", "size", "first", "gone", "base", "low", "seq")

    def __init__(
        self,
        plan: _Plan,
        at: np.ndarray,
        alloc: np.ndarray,
        first: np.ndarray,
        gone: np.ndarray,
        cost: np.ndarray,
    ) -> None:
        self.at = at  # per use (ascending): its position
        self.alloc = alloc  # ... the ALLOC it uses
        self.size = plan.size[alloc]
        self.first = first[alloc]  # ... its start
        self.gone = gone  # per position: the bytes its FREE ends
        self.base = [0, *(cost - gone).tolist()]  # live bytes before each position
        self.low = np.full(len(plan.size), -1, dtype=np.int64)  # window_top's scratch
        self.seq = np.zeros(SPAN, np.int64)  # a window's sequence (`moves_kernel.split`)

    def top(self, seq: np.ndarray, lo: int) -> int:
        """The highest live bytes of the positions `seq` (a re-sequencing of lo..lo+len-1) run
        in their place: a buffer starts at its first user in `seq` unless started before lo
        (the rule's home is the kernel, `moves_kernel.window_top`)."""
        top = moves_kernel.window_top(
            seq, lo, self.at, self.alloc, self.size, self.first, self.gone, self.low
        )
        return self.base[lo] + int(top)


@dataclass(frozen=True, slots=True)
class _Spans:
    """The counted buffers' (start, end) positions in an order, and its peak positions."""

    by_start: list[tuple[int, int]]  # (start, end; the order's length if never freed)
    by_end: list[tuple[int, int]]  # (end, start) of the freed ones
    tops: list[int]  # the positions at the peak


def _best_move(
    plan: _Plan,
    order: np.ndarray,
    p: int,
    peak: int,
    spans: _Spans,
    rows: _Rows,
) -> tuple[int, list[int]] | None:
    """The window move (start, new sequence) that lowers the live bytes at the peak position
    p the most, over the most later peak positions, keeping its window below `peak`; None if
    none does."""
    tops = spans.tops
    lo = bisect_left(spans.by_start, (p - SPAN + 1,))
    hi = bisect_left(spans.by_start, (p,))
    starts = {i for i, j in spans.by_start[lo:hi] if j >= p}  # of buffers live at p
    lo = bisect_left(spans.by_end, (p + 1,))
    hi = bisect_left(spans.by_end, (p + SPAN,))
    ends = set()  # of buffers live at p or at a later peak position
    for j, i in spans.by_end[lo:hi]:
        k = bisect_left(tops, max(i, p))
        if k < len(tops) and tops[k] < j:
            ends.add(j)
    windows = sorted((hi - lo, lo, hi) for lo in starts for hi in ends if hi - lo < SPAN)
    # NOTE: in a topological order a path between two positions stays between them, so a
    # window's dependants of its first node (ancestors of its last) are those of the widest
    # window with the same start (end), cut to it: each worked out once
    far: dict[int, int] = {}  # window start -> its furthest end
    near: dict[int, int] = {}  # window end -> its lowest start
    for _, lo, hi in windows:
        far[lo] = max(far.get(lo, hi), hi)
        near[hi] = min(near.get(hi, lo), lo)
    late = {lo: plan.reach(order[lo : hi + 1], False) for lo, hi in far.items()}
    need = {hi: plan.reach(order[lo : hi + 1], True) for hi, lo in near.items()}
    # (its window's peak, minus its end: a window over more peak positions first, start, and
    # its sequence: the mask and the side of it run first, `moves_kernel.split`)
    best: tuple[int, int, int, np.ndarray, bool] | None = None
    seq = rows.seq
    for _, lo, hi in windows:
        after = late[lo][: hi + 1 - lo]  # delay: c's start's dependants after the rest
        first = need[hi][lo - near[hi] :]  # hoist: the ancestors of d's FREE first
        for mask, front in ((after, False), (first, True)):
            moves_kernel.split(lo, mask, front, seq)
            top = rows.top(seq[: len(mask)], lo)
            if top < peak and (best is None or (top, -hi) < best[:2]):
                best = (top, -hi, lo, mask, front)
    if best is None:
        return None
    _, _, lo, mask, front = best
    moves_kernel.split(lo, mask, front, seq)
    return lo, order[seq[: len(mask)]].tolist()
