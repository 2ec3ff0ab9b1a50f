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

from npucc.backend.schedule.dan.headroom import alloc_sizes
from npucc.ir.tiled import TileGraph, TileNode

SPAN = 1024  # the longest window tried (positions), which bounds a move's cost
# Peak levels lowered: one, the least change that puts the budget below the plan's peak (DAN
# ranks makespan before peak; on SqueezeNet three levels, 594,816 -> 575,488, cost 0.5 % of
# its makespan, one level, -> 590,656, 0.03 %: docs/roofline.md, danpeak2)
ROUNDS = 1


class _Plan:
    """The order's L1+UB events with ALLOCs sunk: per position the live bytes at that node."""

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

    def costs(
        self, seq: Sequence[int], live: int = 0, first: dict[int, int] | None = None, lo: int = 0
    ) -> list[int]:
        """Per node of `seq`, the live bytes once its ALLOCs started (`live`: the bytes before
        `seq`; an ALLOC a with first[a] < lo started before it)."""
        size, freed, is_alloc, preds = self.size, self.freed, self.is_alloc, self.preds
        before = first or {}
        started: set[int] = set()
        out = []
        for v in seq:
            if not is_alloc[v]:
                for a in preds[v]:
                    if size[a] and a not in started:
                        started.add(a)
                        if before.get(a, lo) >= lo:
                            live += size[a]
            out.append(live)
            a = freed[v]
            if a >= 0:
                live -= size[a]
        return out


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
    cost = plan.costs(order)
    peak = max(cost, default=0)
    if not peak:
        return None
    first: dict[int, int] = {}  # counted ALLOC -> the position that starts it
    last: dict[int, int] = {}  # ... -> its FREE's position
    size, freed, preds = plan.size, plan.freed, plan.preds
    for i, v in enumerate(order):
        if not plan.is_alloc[v]:
            for a in preds[v]:
                if size[a] and a not in first:
                    first[a] = i
        a = freed[v]
        if a >= 0:
            last[a] = i
    base = [0] * (len(order) + 1)  # live bytes before each position
    for i, v in enumerate(order):
        a = freed[v]
        base[i + 1] = cost[i] - (size[a] if a >= 0 else 0)
    total = len(order)
    spans = _Spans(
        first,
        sorted((i, last.get(a, total)) for a, i in first.items()),
        sorted((i, first[a]) for a, i in last.items()),
        [p for p, c in enumerate(cost) if c == peak],
    )
    new = list(order)
    done = -1  # the last position a move of this round rewrote
    for p in spans.tops:
        if p <= done:
            continue
        move = _best_move(plan, order, p, peak, spans, base)
        if move is None:
            return None
        lo, seq = move
        if lo <= done:  # NOTE: windows of one round never overlap, so positions stay valid
            return None
        new[lo : lo + len(seq)] = seq
        done = lo + len(seq) - 1
    return new


@dataclass(frozen=True, slots=True)
class _Spans:
    """The counted buffers' (start, end) positions in an order, and its peak positions."""

    first: dict[int, int]  # counted ALLOC -> the position that starts it
    by_start: list[tuple[int, int]]  # (start, end; the order's length if never freed)
    by_end: list[tuple[int, int]]  # (end, start) of the freed ones
    tops: list[int]  # the positions at the peak


def _best_move(
    plan: _Plan,
    order: list[int],
    p: int,
    peak: int,
    spans: _Spans,
    base: list[int],
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
    preds = plan.preds
    # (its window's peak, minus its end: a window over more peak positions first, start, seq)
    best: tuple[int, int, int, list[int]] | None = None
    for _, lo, hi in windows:
        window = order[lo : hi + 1]
        inside = set(window)
        # delay: c's start's dependants after the rest
        late = {window[0]}
        for v in window[1:]:
            if any(u in late for u in preds[v]):
                late.add(v)
        # hoist: the ancestors of d's FREE first
        need = {window[-1]}
        for v in reversed(window):
            if v in need:
                need.update(u for u in preds[v] if u in inside)
        for seq in (
            [v for v in window if v not in late] + [v for v in window if v in late],
            [v for v in window if v in need] + [v for v in window if v not in need],
        ):
            top = max(plan.costs(seq, base[lo], spans.first, lo))
            if top < peak and (best is None or (top, -hi) < best[:2]):
                best = (top, -hi, lo, seq)
    return None if best is None else (best[2], best[3])
