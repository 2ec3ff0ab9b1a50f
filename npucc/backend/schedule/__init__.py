"""Per-core scheduling: the schedule representation, replay rules, validator and baselines.

A `Schedule` is exactly what the trace interface writes (shared/dan-traces.md): an order, an
offset per buffer and a spill plan. `replay` derives everything else (augmented graph with
SPILL_OUT/SPILL_IN nodes, spill and address-reuse edges, start/finish times, metrics) once,
for every scheduler, every benchmark and codegen.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Schedule:
    """Order, layout and spill plan of one core's TileGraph with N nodes."""

    order: list[int]  # node ids in execution order; spill k adds N+2k (OUT) and N+2k+1 (IN)
    offsets: dict[int, int]  # buffer id -> byte offset in its tier at ALLOC
    spills: list[tuple[int, int]] = field(default_factory=list)  # (buffer, new offset), in order
    method: str = ""  # name of the scheduler that produced it
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per stage
