"""Stage 3, CPE's refinement 2 (paper 000, Alg. 3, eqs. 34-35): local moves along the critical
chain, each trial re-timed incrementally and kept only when the makespan strictly drops."""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from npucc.ir.replay import Replay
from npucc.ir.tiled import TileNode

WINDOW = 8
MOVE_BUDGET = 4_000_000  # node-visits of re-timing spent on local moves (deterministic)
Preds = Sequence[Sequence[int]]  # per node: its predecessors (or successors) in G2


class Lanes:
    """An order's pipes for `_retime`: per node its pipe's number (-1: pipe-less) and cycles,
    and per pipe the positions of its nodes in the order (ascending)."""

    __slots__ = ("pipe", "cycles", "at")

    def __init__(self, nodes: list[TileNode], order: list[int]) -> None:
        numbers: dict[str, int] = {}
        self.pipe = [
            -1 if v.pipe is None else numbers.setdefault(v.pipe, len(numbers)) for v in nodes
        ]
        self.cycles = [v.cycles for v in nodes]
        self.at: list[list[int]] = [[] for _ in numbers]
        pipe = self.pipe
        for i, v in enumerate(order):
            if pipe[v] >= 0:
                self.at[pipe[v]].append(i)


def _retime(
    lanes: Lanes,
    preds: Preds,
    succs: Preds,
    order: list[int],
    pos: dict[int, int],
    finish: list[int],
    move: tuple[int, int],
    beat: int = 1 << 62,
    last: int = -1,
) -> tuple[dict[int, int], int] | None:
    """Finish times under rule 5 of `order` (timed `finish`, positions `pos`, its `lanes`)
    with the node at position p moved to position q, `move` = (q, p): those that differ from
    `finish` (node -> finish), and the latest finish re-timed; None once the moved order's
    makespan is proven not below `beat`: a re-timed finish reaches it, or the node at
    position `last` (finishing at `beat`) can no longer finish earlier.

    NOTE: past p the order is the old one, so a node there finishes as in the old timing
    unless its pipe is free at another time than in the old timing or a predecessor's finish
    moved: only those nodes are re-timed (`events`: the successors of the moved finishes;
    `after`: per pipe whose free time differs, its next position), in order, and re-timing
    stops once there are none. Likewise (rule 5 is monotone) once no pipe is free earlier
    than in the old timing and no node that finishes earlier has a successor still to come,
    no later finish is earlier than the old one.

    NOTE: the re-timed finishes are written into `finish` itself (each node is re-timed once,
    after its old finish is read) and the old ones put back before returning.
    """
    q, p = move
    pipe_of, cycles, at = lanes.pipe, lanes.cycles, lanes.at
    if last >= 0:
        # NOTE: the moved node cannot start later; if it finishes as before, no node finishes
        # earlier (rule 5 is monotone: each node now waits for the same nodes or later ones)
        v, t = order[p], 0
        for u in preds[v]:
            if finish[u] > t:
                t = finish[u]
        x = pipe_of[v]
        if x >= 0:
            k = bisect_left(at[x], q)
            free = finish[order[at[x][k - 1]]] if k else 0
            t = (t if t > free else free) + cycles[v]
        if t == finish[v]:
            return None
    old_finish = finish
    moved: list[int] = []  # the nodes whose finish differs, in re-timing order
    olds: list[int] = []  # ... their old finishes
    # each pipe is free at its last finish before q (0: none before q)
    pipe_free = [0] * len(at)
    for x, lane in enumerate(at):
        k = bisect_left(lane, q)
        if k:
            pipe_free[x] = finish[order[lane[k - 1]]]
    old_free = pipe_free[:]  # the old timing's pipes, from position p + 1 on
    for i in range(q, p + 1):
        x = pipe_of[order[i]]
        if x >= 0:
            old_free[x] = old_finish[order[i]]
    events: list[int] = []  # a heap of positions past p (repeats allowed)
    early = -1  # the last position of a successor of a node that finishes earlier
    top = 0
    heappush, heappop = heapq.heappush, heapq.heappop
    # the moved span: the node at p, then those at q .. p - 1
    for i in range(q, p + 1):
        v = order[p] if i == q else order[i - 1]
        t = 0
        for u in preds[v]:
            if finish[u] > t:
                t = finish[u]
        x = pipe_of[v]
        if x >= 0:
            free = pipe_free[x]
            t = pipe_free[x] = (t if t > free else free) + cycles[v]
        was = old_finish[v]
        if t != was:
            for w in succs[v]:
                k = pos[w]
                if k > p:
                    heappush(events, k)
                    if t < was and k > early:
                        early = k
            moved.append(v)
            olds.append(was)
            finish[v] = t
        if t > top:
            if t >= beat:
                _restore(finish, moved, olds)
                return None
            top = t
    never = len(order)
    after = [never] * len(at)  # per pipe free at another time: its next position past p
    nxt = [0] * len(at)  # ... and that position's index in its lane
    ahead = 0  # pipes free earlier than in the old timing
    for x, lane in enumerate(at):
        if pipe_free[x] != old_free[x]:
            ahead += pipe_free[x] < old_free[x]
            k = nxt[x] = bisect_right(lane, p)
            if k < len(lane):
                after[x] = lane[k]
    while True:
        i = min(after)
        if events and events[0] <= i:
            i = events[0]
            while events and events[0] == i:
                heappop(events)
        if i == never:
            break
        if not ahead and early < i <= last:
            _restore(finish, moved, olds)
            return None
        v = order[i]
        t = 0
        for u in preds[v]:
            if finish[u] > t:
                t = finish[u]
        was = old_finish[v]
        x = pipe_of[v]
        if x >= 0:
            lane = at[x]
            if after[x] == i:  # NOTE: its pipe's free time differs
                free = pipe_free[x]
                k = nxt[x]
                ahead -= free < old_free[x]
            else:  # NOTE: as in the old timing: the pipe's last finish, unchanged
                k = bisect_left(lane, i)
                free = finish[order[lane[k - 1]]] if k and lane[k - 1] > p else pipe_free[x]
            t = pipe_free[x] = (t if t > free else free) + cycles[v]
            old_free[x] = was
            if t != was:
                ahead += t < was
                k = nxt[x] = k + 1
                after[x] = lane[k] if k < len(lane) else never
            else:
                after[x] = never
        if t != was:
            for w in succs[v]:
                k = pos[w]
                heappush(events, k)
                if t < was and k > early:
                    early = k
            moved.append(v)
            olds.append(was)
            finish[v] = t
        if t > top:
            if t >= beat:
                _restore(finish, moved, olds)
                return None
            top = t
    changes = {v: finish[v] for v in moved}
    _restore(finish, moved, olds)
    return changes, top


def _restore(finish: list[int], moved: list[int], olds: list[int]) -> None:
    """Put the old finishes `olds` of the nodes `moved` back into `finish`."""
    for v, t in zip(moved, olds, strict=True):
        finish[v] = t


def critical_chain(
    lanes: Lanes, preds: Preds, order: list[int], pos: dict[int, int], finish: list[int]
) -> list[int]:
    """Eq. 34: walk back from the last finisher through the binding edge or pipe predecessor
    (`lanes`, `pos`: the order's pipes and positions)."""
    if not finish:  # an empty DAG (a core with no work) has no chain
        return []
    pipe, cycles, at = lanes.pipe, lanes.cycles, lanes.at
    v = finish.index(max(finish))  # NOTE: the last finisher of least id
    chain = [v]
    while True:
        x = pipe[v]
        start = finish[v] - (cycles[v] if x >= 0 else 0)
        nxt = -1
        if start > 0:
            for u in preds[v]:
                if finish[u] == start:
                    nxt = u
                    break
        if nxt < 0 and x >= 0 and start > 0:
            k = bisect_left(at[x], pos[v])  # NOTE: its pipe predecessor is at at[x][k - 1]
            if k and finish[order[at[x][k - 1]]] == start:
                nxt = order[at[x][k - 1]]
        if nxt < 0:
            return chain[::-1]
        chain.append(nxt)
        v = nxt


def local_moves(
    r: Replay,
    preds: Preds,
    succs: Preds,
    group: list[int],
    order: list[int],
    finish: list[int],
    window: int = WINDOW,
) -> list[int]:
    """Refinement 2 (Alg. 3): move critical-chain nodes earlier within the window (`finish`:
    the order's timing)."""
    nodes = r.nodes
    best = max(finish, default=0)
    budget = MOVE_BUDGET
    improved = True
    while improved and budget > 0:
        improved = False
        pos = {v: i for i, v in enumerate(order)}
        lanes = Lanes(nodes, order)
        tops = [x for x, f in enumerate(finish) if f == best]  # a faster trial moves them all
        last = max(pos[x] for x in tops) if tops else -1
        chain = critical_chain(lanes, preds, order, pos, finish)
        on_chain = set(chain)
        for v in chain:
            p = pos[v]
            pset = set(preds[v])
            for q in range(p - 1, max(p - window, 0) - 1, -1):
                u = order[q]
                if u in pset or (group[v] >= 0 and group[u] == group[v]):
                    break
                if u in on_chain:
                    continue
                if budget <= 0:
                    return order
                budget -= len(order) - q
                moved = _retime(lanes, preds, succs, order, pos, finish, (q, p), best, last)
                if moved is None:
                    continue
                changes = moved[0]
                if all(changes.get(x, best) < best for x in tops):  # NOTE: tops finish at best
                    order = order[:q] + [v] + order[q:p] + order[p + 1 :]
                    finish = finish[:]
                    for x, t in changes.items():
                        finish[x] = t
                    best, improved = max(finish), True
                    break
            if improved:
                break
    return order
