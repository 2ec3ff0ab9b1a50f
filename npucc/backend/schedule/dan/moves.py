"""Stage 3, CPE's refinement 2 (paper 000, Alg. 3, eqs. 34-35): local moves along the critical
chain, each trial re-timed incrementally and kept only when the makespan strictly drops."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from npucc.backend.schedule.dan import moves_kernel
from npucc.backend.schedule.dan.cpe_kernel import Arrays
from npucc.ir.replay import Replay
from npucc.ir.tiled import TileNode

WINDOW = 8
MOVE_BUDGET = 4_000_000  # node-visits of re-timing spent on local moves (deterministic)
Preds = Sequence[Sequence[int]]  # per node: its predecessors (or successors) in G2


class Lanes:
    """An order's pipes for `critical_chain`: per node its pipe's number (-1: pipe-less) and cycles,
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
    arrays: Arrays,
    group: list[int],
    order: list[int],
    finish: list[int],
    window: int = WINDOW,
) -> list[int]:
    """Refinement 2 (Alg. 3): move critical-chain nodes earlier within the window (`finish`:
    the order's timing; `arrays`: G2's, `cpe.Tables.arrays`), each trial re-timed by
    `moves_kernel.Retimer`."""
    nodes = r.nodes
    best = max(finish, default=0)
    budget = MOVE_BUDGET
    a = arrays
    retimer = moves_kernel.Retimer(  # type: ignore[call-arg]  # a Cython class
        a.pred_off, a.pred_idx, a.succ_off, a.succ_idx, a.queue, a.cycles, len(a.work) - 1
    )
    improved = True
    while improved and budget > 0:
        improved = False
        pos = {v: i for i, v in enumerate(order)}
        lanes = Lanes(nodes, order)
        retimer.start(order, finish)
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
                if retimer.retime(q, p, best, last) < 0:
                    continue
                changes = retimer.changes()
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
