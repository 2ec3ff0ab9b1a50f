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
from npucc.backend.schedule.dan.headroom import alloc_sizes
from npucc.ir.tiled import TileGraph, TileNode

SPAN = 1024  # the longest window tried (positions), which bounds a move's cost
# Peak levels lowered: one, the least change that puts the budget below the plan's peak (DAN
# ranks makespan before peak; on SqueezeNet three levels, 594,816 -> 575,488, cost 0.5 % of
# its makespan, one level, -> 590,656, 0.03 %: docs/roofline.md, danpeak2)
ROUNDS = 1


class _Plan:
    """Per node of G2 its counted L1+UB ALLOC size, the ALLOC its FREE ends, whether an ALLOC."""

    def __init__(
        self,
        graph: TileGraph,
        nodes: Sequence[TileNode],
        preds: Sequence[Sequence[int]],
    ) -> None:
        total = len(nodes)
        self.preds = preds
        self.size = alloc_sizes(graph, total)  # per ALLOC node: its L1+UB bytes
        self.freed = [-1] * total  # per FREE node: its counted ALLOC
        for b, a in graph.alloc_of.items():
            if self.size[a]:
                self.freed[graph.free_of[b]] = a
        self.is_alloc = [node.op == "ALLOC" for node in nodes]


def lower_peak(
    graph: TileGraph,
    nodes: Sequence[TileNode],
    preds: Sequence[Sequence[int]],
    order: Sequence[int],
    rounds: int = ROUNDS,
) -> list[int]:
    """`order` (a topological order of `preds`) re-sequenced in windows so that its L1+UB peak
    with ALLOCs sunk drops by up to `rounds` levels, as far as the delay and hoist moves reach;
    `order` if they do not."""
    plan = _Plan(graph, nodes, preds)
    best = list(order)
    for _ in range(rounds):
        found = _round(plan, best)
        if found is None:
            break
        best = found
    return best


def _round(plan: _Plan, order: list[int]) -> list[int] | None:
    """`order` with every position at its peak lowered by one move each; None if one is not."""
    first: dict[int, int] = {}  # counted ALLOC -> the position that starts it
    last: dict[int, int] = {}  # ... -> its FREE's position
    uses: list[tuple[int, int]] = []  # (position, counted ALLOC) of each non-ALLOC's use
    cost = []  # per position: the live bytes once its node's ALLOCs started
    live = 0
    size, freed, preds, is_alloc = plan.size, plan.freed, plan.preds, plan.is_alloc
    for i, v in enumerate(order):
        if not is_alloc[v]:
            for a in preds[v]:
                if size[a]:
                    uses.append((i, a))
                    if a not in first:
                        first[a] = i
                        live += size[a]
        cost.append(live)
        a = freed[v]
        if a >= 0:
            last[a] = i
            live -= size[a]
    peak = max(cost, default=0)
    if not peak:
        return None
    total = len(order)
    spans = _Spans(
        sorted((i, last.get(a, total)) for a, i in first.items()),
        sorted((i, first[a]) for a, i in last.items()),
        [p for p, c in enumerate(cost) if c == peak],
    )
    rows = _Rows(plan, order, cost, uses, first)
    new = list(order)
    done = -1  # the last position a move of this round rewrote
    for p in spans.tops:
        if p <= done:
            continue
        move = _best_move(plan, order, p, peak, spans, rows)
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

    __slots__ = ("at", "alloc", "size", "first", "gone", "base", "low")

    def __init__(
        self,
        plan: _Plan,
        order: list[int],
        cost: list[int],
        uses: list[tuple[int, int]],
        first: dict[int, int],
    ) -> None:
        use = np.array(uses, dtype=np.int64).reshape(-1, 2)
        self.at = use[:, 0]  # per use (ascending): its position
        self.alloc = use[:, 1]  # ... the ALLOC it uses
        size = np.array(plan.size, dtype=np.int64)
        self.size = size[self.alloc]
        self.first = np.array([first[a] for _, a in uses], dtype=np.int64)  # ... its start
        freed = np.array(plan.freed, dtype=np.int64)[order]
        self.gone = np.where(freed >= 0, size[freed], 0)  # per position: the bytes its FREE ends
        # live bytes before each position
        self.base = [0, *(live - gone for live, gone in zip(cost, self.gone.tolist(), strict=True))]
        self.low = np.full(len(size), -1, dtype=np.int64)  # window_top's scratch

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
    order: list[int],
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
    preds = plan.preds
    late = {lo: _dependants(order[lo : hi + 1], preds) for lo, hi in far.items()}
    need = {hi: _ancestors(order[lo : hi + 1], preds) for hi, lo in near.items()}
    # (its window's peak, minus its end: a window over more peak positions first, start, seq)
    best: tuple[int, int, int, np.ndarray] | None = None
    for _, lo, hi in windows:
        at = np.arange(lo, hi + 1)
        after = late[lo][: hi + 1 - lo]  # delay: c's start's dependants after the rest
        first = need[hi][lo - near[hi] :]  # hoist: the ancestors of d's FREE first
        for seq in (
            np.concatenate((at[~after], at[after])),
            np.concatenate((at[first], at[~first])),
        ):
            top = rows.top(seq, lo)
            if top < peak and (best is None or (top, -hi) < best[:2]):
                best = (top, -hi, lo, seq)
    return None if best is None else (best[2], [order[i] for i in best[3].tolist()])


def _dependants(window: list[int], preds: Sequence[Sequence[int]]) -> np.ndarray:
    """Per node of `window` (a slice of a topological order): does it depend on the first?"""
    late = {window[0]}
    for v in window[1:]:
        if not late.isdisjoint(preds[v]):
            late.add(v)
    return np.fromiter((v in late for v in window), dtype=bool, count=len(window))


def _ancestors(window: list[int], preds: Sequence[Sequence[int]]) -> np.ndarray:
    """Per node of `window` (a slice of a topological order): does the last depend on it?"""
    need = {window[-1]}  # NOTE: and ancestors before the window, never looked up
    for v in reversed(window):
        if v in need:
            need.update(preds[v])
    return np.fromiter((v in need for v in window), dtype=bool, count=len(window))
