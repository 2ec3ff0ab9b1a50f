"""A per-core schedule: exactly what the trace interface writes (shared/dan-traces.md).

An order, an offset per buffer and a spill plan; `npucc.ir.replay` derives everything else
(the augmented graph with SPILL_OUT/SPILL_IN nodes, spill and address-reuse edges, start and
finish times, the metrics) once, for every scheduler, every benchmark and codegen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from npucc.target import Target

if TYPE_CHECKING:
    from npucc.ir.replay import Replay

UNBOUNDED = ("dan-mpas",)  # ordering-only methods: validated by rule 7 instead of capacities


@dataclass(slots=True)
class Schedule:
    """Order, layout and spill plan of one core's TileGraph with N nodes."""

    order: list[int]  # node ids in execution order; spill k adds N+2k (OUT) and N+2k+1 (IN)
    offsets: dict[int, int]  # buffer id -> byte offset in its tier at ALLOC
    spills: list[tuple[int, int]] = field(default_factory=list)  # (buffer, new offset), in order
    method: str = ""  # name of the scheduler that produced it
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per stage
    # NOTE: a replay of the same offsets and spills in an order whose augmented edges this
    # order keeps (CPE's input), from which `replay` derives this order's (`replay(..., like=)`)
    basis: Replay | None = field(default=None, repr=False, compare=False)


def capacities(target: Target) -> dict[str, int]:
    """Bytes of each on-chip tier a per-core schedule may use."""
    return target.memory.on_chip()
