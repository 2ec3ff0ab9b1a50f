"""Sub-batch loops of complete time plans: the sub-batch counts tried and the greedy pass that
tunes a plan's loops (HyperCut's last stage and SET's layer-sequential construction)."""

from __future__ import annotations

from collections.abc import Callable

from npucc.ir.plan import Cost, Step

Plan = tuple[Step, ...]


def batch_splits(batch: int, limit: int = 64) -> list[int]:
    """Sub-batch counts tried when a step starts pipelining: powers of two dividing the batch."""
    out, n = [], 1
    while n <= min(batch, limit):
        if batch % n == 0:
            out.append(n)
        n *= 2
    return out


def tune_loops(
    plan: Plan,
    edp: Callable[[Plan], float],
    splits: list[int],
    loop_costs: Callable[[Plan, int, int], list[Cost]] | None = None,
) -> Plan:
    """Greedy last pass over sub-batch loops: change a loop's sub-batch count, join a step
    to the previous loop or split it off, while the EDP improves.

    With `loop_costs` (the costs of the steps of loop a..b-1 of a plan, as `edp` prices
    them) a move re-prices only the loops it changes; the moves, EDPs and result are the same.
    """
    if loop_costs is not None:
        return _tune_by_loops(plan, loop_costs, splits)
    current, improved = edp(plan), True
    while improved:
        improved = False
        for s in range(len(plan)):
            for _, _, child in _loop_moves(plan, s, splits):
                value = edp(child)
                if value < current:
                    plan, current, improved = child, value, True
    return plan


def _tune_by_loops(
    plan: Plan, loop_costs: Callable[[Plan, int, int], list[Cost]], splits: list[int]
) -> Plan:
    """`tune_loops` pricing a move from its parent's step costs and its changed loops."""
    energy, latency = _figures(plan, loop_costs, 0, len(plan))
    current, improved = sum(energy) * sum(latency), True
    while improved:
        improved = False
        for s in range(len(plan)):
            base, base_e, base_l = plan, energy, latency
            for x, y, child in _loop_moves(base, s, splits):
                e, lat = _figures(child, loop_costs, x, y)
                e, lat = base_e[:x] + e + base_e[y:], base_l[:x] + lat + base_l[y:]
                value = sum(e) * sum(lat)
                if value < current:
                    plan, energy, latency, current, improved = child, e, lat, value, True
    return plan


def _figures(
    plan: Plan, loop_costs: Callable[[Plan, int, int], list[Cost]], x: int, y: int
) -> tuple[list[float], list[float]]:
    """Energy and latency of steps x..y-1 (whole loops)."""
    energy: list[float] = []
    latency: list[float] = []
    a = x
    while a < y:
        b = a + 1
        while b < y and plan[b].loop:
            b += 1
        for cost in loop_costs(plan, a, b):
            energy.append(cost.energy_pj)
            latency.append(cost.latency_cycles)
        a = b
    return energy, latency


def _loop_moves(plan: Plan, s: int, splits: list[int]) -> list[tuple[int, int, Plan]]:
    """Plans one loop move away at step s, each with the steps lo..hi-1 it changes (whole
    loops in both plans)."""
    lid = loop_start(plan, s)
    end = s + 1
    while end < len(plan) and plan[end].loop:
        end += 1
    out = [
        (lid, end, _with_nsub(plan, lid, end, n)) for n in splits if n != plan[s].nsub and lid == s
    ]
    if s and not plan[s].loop:  # join the previous loop, with any sub-batch count
        joined = plan[:s] + (Step(plan[s].groups, plan[s].nsub, True),) + plan[s + 1 :]
        lo = loop_start(plan, s - 1)
        out += [(lo, end, _with_nsub(joined, lo, end, n)) for n in splits]
    elif plan[s].loop:
        out.append((lid, end, plan[:s] + (Step(plan[s].groups, plan[s].nsub),) + plan[s + 1 :]))
    return out


def loop_start(plan: Plan, s: int) -> int:
    """First step of the sub-batch loop that step s belongs to."""
    while s and plan[s].loop:
        s -= 1
    return s


def _with_nsub(plan: Plan, start: int, end: int, nsub: int) -> Plan:
    """Steps start..end-1 take `nsub` sub-batches."""
    mid = tuple(
        step if step.nsub == nsub else Step(step.groups, nsub, step.loop)
        for step in plan[start:end]
    )
    return plan[:start] + mid + plan[end:]
