"""The graph of a trial lowering: of each node only what the trial's cost reads.

A lowering tried on a fresh context (`memo.fresh`: a depthwise conv's cube shares, a fused
expand and depthwise pair) reaches no output; what is read of it is its `flow` and each pipe's
busy cycles. Its builder (TileBuilder, the same edges as any lowering) appends to a TrialGraph,
which keeps each node's pipe, cycles and predecessors: no node objects, no successor lists
(MobileNet v2 tries ~140 k nodes a compile).
"""

from __future__ import annotations

from collections.abc import Iterable

from npucc.ir.isa import Instr
from npucc.ir.tiled import Buffer


class TrialGraph:
    """TileGraph's building methods (`add_buffer`, `add`, `add_edge(s)`, `alloc_of`) keeping
    each node's pipe, cycles and predecessors only."""

    __slots__ = ("name", "buffers", "pipes", "cycles", "preds", "alloc_of")

    def __init__(self, name: str = "trial") -> None:
        self.name = name
        self.buffers: list[Buffer] = []
        self.pipes: list[str | None] = []
        self.cycles: list[int] = []
        self.preds: list[list[int]] = []
        self.alloc_of: dict[int, int] = {}  # buffer id -> its ALLOC node id

    def add_buffer(self, size: int, tier: str, name: str = "") -> Buffer:
        """Create a buffer (TileGraph.add_buffer)."""
        buf = Buffer(len(self.buffers), size, tier, name)
        self.buffers.append(buf)
        return buf

    def add(
        self,
        op: str,
        pipe: str | None,
        cycles: int,
        bufs: tuple[int, ...],
        instr: Instr | None = None,
        layer: int = -1,
    ) -> int:
        """Append a node (TileGraph.add: an ALLOC registers as its buffer's); its id."""
        v = len(self.cycles)
        self.pipes.append(pipe)
        self.cycles.append(cycles)
        self.preds.append([])
        if op == "ALLOC":
            self.alloc_of[bufs[0]] = v
        return v

    def add_edge(self, src: int, dst: int) -> None:
        """Add precedence src -> dst (self-edges are ignored)."""
        if src != dst:
            self.preds[dst].append(src)

    def add_edges(self, srcs: Iterable[int], dst: int) -> None:
        """Add precedence src -> dst from each of `srcs` (self-edges are ignored)."""
        into = self.preds[dst]
        for src in srcs:
            if src != dst:
                into.append(src)

    def timing_columns(self) -> tuple[list[int], list[str | None]]:
        """Each node's cycles and pipe, in id order (TileGraph.timing_columns)."""
        return self.cycles, self.pipes

    def busy(self) -> int:
        """The busiest pipe's cycles."""
        busy: dict[str, int] = {}
        for pipe, cycles in zip(self.pipes, self.cycles, strict=True):
            if pipe is not None:
                busy[pipe] = busy.get(pipe, 0) + cycles
        return max(busy.values(), default=0)
