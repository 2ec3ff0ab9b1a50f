"""Stage 3, CPE's refinement 2 (paper 000, Alg. 3, eqs. 34-35): local moves along the critical
chain, each trial re-timed incrementally and kept only when the makespan strictly drops (the
chain and the re-timing: `moves_kernel.Retimer`)."""

from __future__ import annotations

from collections.abc import Sequence

from npucc.backend.schedule.dan import moves_kernel
from npucc.backend.schedule.dan.cpe_kernel import Arrays

WINDOW = 8
MOVE_BUDGET = 4_000_000  # node-visits of re-timing spent on local moves (deterministic)
Preds = Sequence[Sequence[int]]  # per node: its predecessors (or successors) in G2


def local_moves(
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
    best = max(finish, default=0)
    budget = MOVE_BUDGET
    a = arrays
    retimer = moves_kernel.Retimer(  # type: ignore[call-arg]  # a Cython class
        a.pred_off, a.pred_idx, a.succ_off, a.succ_idx, a.queue, a.cycles, len(a.work) - 1
    )
    improved = True
    while improved and budget > 0:
        improved = False
        retimer.start(order, finish)
        tops = [x for x, f in enumerate(finish) if f == best]  # a faster trial moves them all
        last = max(retimer.position(x) for x in tops) if tops else -1
        chain = retimer.chain()
        on_chain = set(chain)
        for v in chain:
            p = retimer.position(v)
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
