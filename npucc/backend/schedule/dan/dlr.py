"""Stage 2, DLR (paper 000, Alg. 2, eqs. 22-31): best-fit linear repackaging with tier-aware spills.

One linear scan over the Stage-1 order keeps a sorted, merged free-segment list per tier and
places each buffer best-fit at its ALLOC. Only when nothing fits does it evict, from the same
tier: L0 tiers flush a buffer with no future use, else the one used farthest ahead; L1/UB evict
the buffer with the largest reuse distance per unit of spill cost,
score = d(b, k) / (lambda_byte * T + lambda_cyc * S + eps). With `prefetch` a SPILL_IN is placed
as early as its new addresses are free (LinearScan), else just before the buffer's next use.
"""

from __future__ import annotations

import numpy as np

from npucc.backend.schedule.scan import LinearScan
from npucc.ir.replay import L0_TIERS, clean_buffers
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph
from npucc.target.cost import SpillModel

LAMBDA_BYTE = 1.0
LAMBDA_CYC = 1.0
EPS = 1.0


class DlrVictim:
    """The DLR eviction rule (eqs. 25-31; its home: scan_kernel.Core.dlr_victim) as a LinearScan
    victim policy."""

    __slots__ = ("cost", "traffic")

    def __init__(self, graph: TileGraph, spill_model: SpillModel) -> None:
        clean = clean_buffers(graph)
        cost: list[float] = []  # lambda_byte * T + lambda_cyc * S + eps, per buffer
        self.traffic: list[int] = []  # T: extra DDR bytes of one spill, per buffer
        # NOTE: a spill's figures depend on (tier, size, clean) alone, few distinct triples
        known: dict[tuple[str, int, bool], tuple[int, float]] = {}
        for buf in graph.buffers:
            c = clean[buf.id]
            got = known.get((buf.tier, buf.size, c))
            if got is None:
                traffic = spill_model.traffic(buf.size, c)
                cycles = spill_model.out_cycles(buf.tier, buf.size, c) + spill_model.in_cycles(
                    buf.tier, buf.size, c
                )
                got = known[buf.tier, buf.size, c] = (
                    traffic,
                    LAMBDA_BYTE * traffic + LAMBDA_CYC * cycles + EPS,
                )
            self.traffic.append(got[0])
            cost.append(got[1])
        self.cost = np.array(cost, np.float64)

    def __call__(self, scan: LinearScan, candidates: list[int], k: int) -> int:
        """Pick the buffer to evict among `candidates` at Stage-1 position k."""
        l0 = scan.graph.buffers[candidates[0]].tier in L0_TIERS
        return scan.core.dlr_victim(candidates, k, self.cost, l0)


def dlr(
    graph: TileGraph,
    order: list[int],
    capacity: dict[str, int],
    spill_model: SpillModel,
    alignment: int = 1,
    placement: str = "cold",
    prefetch: bool = False,
    limit: tuple[int, int] | None = None,
    ahead: int = 0,
) -> Schedule:
    """Offsets and spill plan for a Stage-1 order (the Stage-2 schedule).

    With `limit` = (extra DDR, spills), a plan that needs more (compared in that order) raises
    `TooManySpills` as soon as it does. With `ahead`, a spilled buffer is reloaded `ahead`
    positions before its next use where that evicts only buffers used later (LinearScan).
    """
    victim = DlrVictim(graph, spill_model)
    scan = LinearScan(
        graph, order, capacity, alignment, placement, prefetch, limit, ahead, victim.traffic
    )
    return scan.run(victim)
