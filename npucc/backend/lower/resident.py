"""Which layer outputs stay in L1 between layers on one core (resident tensors).

A resident tensor is an L1 buffer of the core's DAG: allocated when its producer's lowering
starts, written by the producer's stores (UB/L0C -> L1 instead of -> DDR), read by its
consumers' loads (L1 -> UB/L0, or in place: a conv's img2col, a matmul's A block) and freed
after its last consumer; it never touches DDR unless the scheduler spills it.

The choice is greedy by DDR bytes saved per byte-layer of L1 held: a candidate saves its
write and one read per consumer; it is kept when, at every layer of its lifetime, the resident
bytes stay within 1/RESIDENT_SHARE of L1 (the rest is the layers' tile share). A candidate is a
tensor every consumer reads through an input its lowering declares readable on chip
(`lowering(..., onchip=...)`), produced by a layer that is neither a view nor a host segment,
and neither a graph input nor output nor a constant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npucc.backend.lower.context import LOWERINGS, ONCHIP_READS
from npucc.backend.lower.conv_geom import epilogue_pool, expand_depthwise, second_image
from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import HOST_OP, VIEW_OPS
from npucc.target import Target

# resident tensors hold at most 1/RESIDENT_SHARE of L1 at any layer. NOTE: measured on the
# bench/roofline.py models, half of L1 saves more DDR bytes but starves the weight blocks of
# weight-heavy layers (smaller K blocks, less prefetch overlap: ResNet-50 3.95 -> 4.10 M
# cycles); a quarter improves every model's makespan and DRAM bytes (docs/roofline.md)
RESIDENT_SHARE = 4


@dataclass(frozen=True, slots=True)
class Residency:
    """The resident tensors (by graph name of their DDR tensor) with their lifetimes."""

    first: dict[str, int]  # tensor -> index of the layer that produces it
    last: dict[str, int]  # tensor -> index of its last consumer
    nbytes: dict[str, int]  # tensor -> L1 bytes of its buffer (alignment padded)

    def live_bytes(self, index: int) -> int:
        """L1 bytes held by resident tensors while layer `index` is lowered."""
        return sum(b for t, b in self.nbytes.items() if self.first[t] <= index <= self.last[t])

    def born(self, index: int) -> list[str]:
        """The tensors layer `index` produces into L1."""
        return [t for t, i in self.first.items() if i == index]

    def dead(self, index: int) -> list[str]:
        """The tensors whose last consumer is layer `index`."""
        return [t for t, i in self.last.items() if i == index]


NONE = Residency({}, {}, {})


def _readable(layer: Layer, index: int) -> bool:
    """Whether the lowering of `layer` reads its input `index` from an L1 buffer. NOTE: a
    conv with a second image (fuse-shortcut) loads both into each of its X blocks from DDR:
    neither is read in place."""
    if layer.op not in LOWERINGS or second_image(layer):
        return False
    inputs = ONCHIP_READS.get(layer.op, ())
    return inputs is None or index in inputs


def choose_resident(
    graph: Graph,
    target: Target,
    exclude: frozenset[str] = frozenset(),
    pinned: frozenset[str] = frozenset(),
) -> Residency:
    """The layer outputs kept in L1 between layers (none on a mesh, whose handoff is the NoC's),
    none of `exclude` (tensors that stay in DDR), every one of `pinned` (a cascade's band
    intermediates, within its own budget) first."""
    if target.cores != 1:
        return NONE
    base: dict[str, str] = {}  # view output -> the tensor it aliases
    producer: dict[str, int] = {}
    readers: dict[str, list[tuple[int, int]]] = {}  # base tensor -> (layer, input index)
    for i, layer in enumerate(graph.layers):
        if layer.op in VIEW_OPS:
            base[layer.outputs[0]] = base.get(layer.inputs[0], layer.inputs[0])
            continue
        for j, name in enumerate(layer.inputs):
            if name:
                readers.setdefault(base.get(name, name), []).append((i, j))
        if layer.op != HOST_OP:
            for name in layer.outputs:
                producer[name] = i
    excluded = set(graph.inputs) | {base.get(t, t) for t in graph.outputs} | exclude
    at = {layer.name: i for i, layer in enumerate(graph.layers)}
    for i, layer in enumerate(graph.layers):
        dw = expand_depthwise(graph, layer, target)
        if dw is not None:  # the depthwise may compute the conv's output, reading its input
            excluded.add(layer.outputs[0])
            x = layer.inputs[0]
            readers.setdefault(base.get(x, x), []).append((at[dw.name], 0))
        pool = epilogue_pool(graph, layer, target)
        if pool is not None:  # the conv's epilogue may write the pool's output: not its own
            excluded.add(layer.outputs[0])
            producer[pool.outputs[0]] = i
    align = target.memory.alignment
    eb = target.tier_bytes("L1")
    budget = target.memory.capacity("L1") // RESIDENT_SHARE
    scored = []
    for name, p in producer.items():
        uses = readers.get(name, [])
        if name in excluded or not uses or graph.is_const(name):
            continue
        if not all(_readable(graph.layers[i], j) for i, j in uses):
            continue
        nbytes = -(-math.prod(graph.tensors[name].shape) * eb // align) * align
        last = max(i for i, _ in uses)
        if nbytes > budget and name not in pinned:
            continue
        saved = nbytes * (1 + len(uses))
        # NOTE: pinned first, then most saved bytes per byte-layer; ties by production order
        # (deterministic)
        rank = (name not in pinned, -saved / (nbytes * (last - p + 1)))
        scored.append((rank, p, name, last, nbytes))
    live = [0] * len(graph.layers)
    first, last_of, sizes = {}, {}, {}
    for _, p, name, last, nbytes in sorted(scored):
        over = any(live[i] + nbytes > budget for i in range(p, last + 1))
        if over and name not in pinned:
            continue
        for i in range(p, last + 1):
            live[i] += nbytes
        first[name], last_of[name], sizes[name] = p, last, nbytes
    return Residency(first, last_of, sizes)
