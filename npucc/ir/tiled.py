"""Tiled IR: one operator-level DAG per core, the graph the DAN paper schedules.

Nodes are events with an op, a pipe, a cycle count and the buffers they use; every buffer has a
size, a home tier, exactly one ALLOC and one FREE node. Edges are precedence. A node lowered by
npucc also carries its instruction (`instr`, on BufRef operands), the data semantics codegen and
the interpreter need; nodes imported from a trace have none.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from npucc.ir.isa import Instr

PIPELESS_OPS = ("ALLOC", "FREE", "BARRIER")  # 0 cycles, on no pipe


@dataclass(slots=True)
class Buffer:
    """An on-chip buffer: `size` bytes in tier `tier` for the span ALLOC..FREE."""

    id: int  # 0..B-1 in creation order
    size: int  # bytes
    tier: str  # home tier: L1, UB, L0A, L0B or L0C
    name: str = ""  # what it holds, for dumps and messages


@dataclass(slots=True)
class TileNode:
    """One event of a core's DAG."""

    id: int  # 0..N-1, the node's index in TileGraph.nodes
    op: str  # ALLOC, FREE, BARRIER, COPY_IN, COPY_OUT, MOVE, IMG2COL, MMAD, VEC_*, or a trace op
    pipe: str | None  # MTE1/MTE2/MTE3/CUBE/VECTOR/FIXP; None for pipe-less ops
    cycles: int  # cycles the node occupies its pipe (0 for pipe-less ops)
    bufs: tuple[int, ...]  # buffers read or written (ALLOC/FREE: the one buffer)
    instr: Instr | None = None  # data semantics for codegen; None for trace nodes
    layer: int = -1  # index of the graph layer it was lowered from (-1: none, e.g. a trace)


class TileGraph:
    """A core's DAG with ordered containers; mutate only through the add_* methods.

    NOTE: node ids equal their index in `nodes`, buffer ids their index in `buffers`; `succs`
    and `preds` hold each edge once, in insertion order, so dumps are deterministic.
    """

    __slots__ = ("name", "nodes", "buffers", "succs", "preds", "alloc_of", "free_of")

    def __init__(self, name: str = "core") -> None:
        self.name = name  # trace name or core coordinate, for outputs
        self.nodes: list[TileNode] = []
        self.buffers: list[Buffer] = []
        self.succs: list[list[int]] = []
        self.preds: list[list[int]] = []
        self.alloc_of: dict[int, int] = {}  # buffer id -> its ALLOC node id
        self.free_of: dict[int, int] = {}  # buffer id -> its FREE node id

    def timing_columns(self) -> tuple[list[int], list[str | None]]:
        """Each node's cycles and pipe, in id order (what in-order timing reads)."""
        return [v.cycles for v in self.nodes], [v.pipe for v in self.nodes]

    def add_buffer(self, size: int, tier: str, name: str = "") -> Buffer:
        """Create a buffer (its ALLOC and FREE nodes are added separately)."""
        buf = Buffer(len(self.buffers), size, tier, name)
        self.buffers.append(buf)
        return buf

    def add_alloc(self, size: int, tier: str, name: str, layer: int) -> int:
        """`add_buffer` and its ALLOC node (`add`, stamped `layer`); the buffer's id.
        NOTE: both spelled out here (the builder's every buffer)."""
        b, v = len(self.buffers), len(self.nodes)
        self.buffers.append(Buffer(b, size, tier, name))
        self.nodes.append(TileNode(v, "ALLOC", None, 0, (b,), None, layer))
        self.succs.append([])
        self.preds.append([])
        self.alloc_of[b] = v
        return b

    def add_free(self, buf: int, layer: int, preds: list[int]) -> None:
        """`add` of buffer `buf`'s FREE node (stamped `layer`), then `add_edges(preds, ...)`,
        each of `preds` once already (`append`'s `distinct`)."""
        self.free_of[buf] = self.append("FREE", None, 0, (buf,), None, layer, preds, True)

    def add_node(
        self,
        op: str,
        pipe: str | None,
        cycles: int,
        bufs: tuple[int, ...],
        instr: Instr | None = None,
        layer: int = -1,
    ) -> TileNode:
        """Append a node; ALLOC/FREE nodes register themselves as their buffer's."""
        return self.nodes[self.add(op, pipe, cycles, bufs, instr, layer)]

    def add(
        self,
        op: str,
        pipe: str | None,
        cycles: int,
        bufs: tuple[int, ...],
        instr: Instr | None = None,
        layer: int = -1,
    ) -> int:
        """`add_node`, returning the node's id."""
        v = len(self.nodes)
        self.nodes.append(TileNode(v, op, pipe, cycles, bufs, instr, layer))
        self.succs.append([])
        self.preds.append([])
        if op == "ALLOC":
            self.alloc_of[bufs[0]] = v
        elif op == "FREE":
            self.free_of[bufs[0]] = v
        return v

    def append(
        self,
        op: str,
        pipe: str | None,
        cycles: int,
        bufs: tuple[int, ...],
        instr: Instr | None,
        layer: int,
        preds: list[int],
        distinct: bool = False,
    ) -> int:
        """`add` of a node that is no buffer's ALLOC or FREE, then `add_edges(preds, ...)`;
        its id. NOTE: `preds` becomes the node's predecessor list (the caller's no longer).
        `distinct`: the caller's `preds` hold each node once (its NOTE says why), so no
        repeats are looked for."""
        if not distinct and (len(preds) > 2 or (len(preds) == 2 and preds[0] == preds[1])):
            preds = list(dict.fromkeys(preds))
        v = len(self.nodes)
        self.nodes.append(TileNode(v, op, pipe, cycles, bufs, instr, layer))
        succs = self.succs
        for src in preds:  # NOTE: no self-edge: the node is new
            succs[src].append(v)
        succs.append([])
        self.preds.append(preds)
        return v

    def add_edge(self, src: int, dst: int) -> None:
        """Add precedence src -> dst (callers avoid duplicates; self-edges are ignored)."""
        if src != dst:
            self.succs[src].append(dst)
            self.preds[dst].append(src)

    def add_edges(self, srcs: Sequence[int], dst: int) -> None:
        """Add precedence src -> dst from each of `srcs`, each once (in first-seen order;
        self-edges are ignored)."""
        unique: Iterable[int] = srcs
        if len(srcs) > 2 or (len(srcs) == 2 and srcs[0] == srcs[1]):
            unique = dict.fromkeys(srcs)
        succs, into = self.succs, self.preds[dst]
        for src in unique:
            if src != dst:
                succs[src].append(dst)
                into.append(src)

    def edges(self) -> Iterator[tuple[int, int]]:
        """All edges, grouped by source node in id order."""
        for src, outs in enumerate(self.succs):
            for dst in outs:
                yield src, dst

    def __len__(self) -> int:
        return len(self.nodes)
