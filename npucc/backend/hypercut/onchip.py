"""Which tensors a mesh plan keeps on chip, and where: the NoC handoff within a step.

A tensor whose producer and every consumer run in the same planned step, that is not a graph
output and fits the on-chip buffer (`[mesh] onchip_buffer` bytes per core) of its producer's
rectangle, is kept on chip: split into equal chunks, chunk i on the i-th core of the producer's
rectangle (row-major). Producer tiles write it and consumer tiles read it over the NoC. Both
the lowering and the execution-faithful estimate call `plan_onchip`, so they agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from npucc.ir.graph import Graph
from npucc.target import Target

VIEW_OPS = ("reshape",)  # aliases of their input's tensor (as the lowering treats them)
NO_NOC_READERS = ("take",)  # ops that may read a tensor with `gather` (DDR only)
CHUNK_ALIGN = 64  # bytes: each home reserves its chunk rounded up to this


@dataclass(frozen=True, slots=True)
class OnChip:
    """Where an on-chip tensor lives: `chunk` elements on each home core in turn."""

    homes: tuple[tuple[int, int], ...]  # (row, col) of the core holding chunk i
    chunk: int  # elements per home (the last home may hold fewer)

    def hops(self, core: tuple[int, int], lo: int, hi: int) -> int:
        """Mesh hops from `core` to the farthest home of elements [lo, hi)."""
        if hi <= lo:
            return 0
        first, last = lo // self.chunk, (hi - 1) // self.chunk
        return max(abs(r - core[0]) + abs(c - core[1]) for r, c in self.homes[first : last + 1])

    def text(self) -> str:
        """`homes=[r,c;r,c] chunk=N` (the stream's and the tiled text's form)."""
        homes = ";".join(f"{r},{c}" for r, c in self.homes)
        return f"homes=[{homes}] chunk={self.chunk}"


def parse_onchip(tokens: Sequence[str]) -> OnChip:
    """Parse `homes=[r,c;...] chunk=N` (ValueError if malformed)."""
    if len(tokens) != 2 or not tokens[0].startswith("homes=[") or not tokens[0].endswith("]"):
        raise ValueError("expected 'homes=[ROW,COL;...] chunk=N'")
    homes = []
    for item in tokens[0][len("homes=[") : -1].split(";"):
        r, _, c = item.partition(",")
        if not r.isdigit() or not c.isdigit():
            raise ValueError(f"bad home '{item[:40]}'")
        homes.append((int(r), int(c)))
    key, _, value = tokens[1].partition("=")
    if key != "chunk" or not value.isdigit() or int(value) == 0:
        raise ValueError("expected chunk=N (N > 0)")
    return OnChip(tuple(homes), int(value))


def chunk_bytes(chunk: int, elem_bytes: int) -> int:
    """Bytes a home reserves for one chunk."""
    return -(-chunk * elem_bytes // CHUNK_ALIGN) * CHUNK_ALIGN


def plan_onchip(
    graph: Graph, cores_of: Sequence[tuple[int, ...] | None], step_of: Sequence[int], target: Target
) -> dict[str, OnChip]:
    """The tensors kept on chip (layer i runs in step `step_of[i]` on the row-major core
    indices `cores_of[i]`; None for a view op). Empty on one core or without a buffer."""
    budget = int(target.mesh.get("onchip_buffer", 0))
    if budget <= 0 or target.cores <= 1:
        return {}
    cols = int(target.mesh["cols"])
    eb = target.elem_bytes
    readers: dict[str, list[int]] = {}
    for j, layer in enumerate(graph.layers):
        for t in layer.inputs:
            if t:
                readers.setdefault(t, []).append(j)
    outputs = set(graph.outputs)

    def consumers(t: str) -> list[int] | None:
        """Non-view layers reading `t` or a view of it (None: a view is a graph output)."""
        found: list[int] = []
        for j in readers.get(t, []):
            layer = graph.layers[j]
            if layer.op in VIEW_OPS:
                if layer.outputs[0] in outputs:
                    return None
                more = consumers(layer.outputs[0])
                if more is None:
                    return None
                found += more
            else:
                found.append(j)
        return found

    free: dict[int, int] = {}
    kept: dict[str, OnChip] = {}
    for i, layer in enumerate(graph.layers):
        cores = cores_of[i]
        if layer.op in VIEW_OPS or cores is None:
            continue
        for t in layer.outputs:
            elems = math.prod(graph.tensors[t].shape)
            found = consumers(t) if t not in outputs else None
            if not found or elems == 0:
                continue
            if any(step_of[j] != step_of[i] or graph.layers[j].op in NO_NOC_READERS for j in found):
                continue
            chunk = -(-elems // len(cores))
            homes = cores[: -(-elems // chunk)]
            need = chunk_bytes(chunk, eb)
            if any(free.get(c, budget) < need for c in homes):
                continue
            for c in homes:
                free[c] = free.get(c, budget) - need
            kept[t] = OnChip(tuple((c // cols, c % cols) for c in homes), chunk)
    return kept
