"""Hard trace workloads: blocked matmul, conv, flash attention with working sets many times L1.

The six `dan_workloads` fit their capacities once reordered, so they hardly spill. Recorded
traces do not: a lowering that assumed a larger L1 loads a stationary operand once and reuses
it across distant nodes, and every pipe's queue is recorded in issue order (the hardware runs
each pipe in order, the trace keeps that order as flag edges). These generators build such
DAGs with the same TileBuilder and cost model as `dan_workloads`, then chain every pipe's nodes
in emission order (`chain_pipes`), so the live working set is forced: no order fits it.
- HardMatmul: C = A B with all of B loaded up front and kept for every row block of A.
- HardConv: implicit-GEMM 3x3 conv, all weights stationary, input rows in a sliding window of
  three (each input row tile is used by three output rows).
- HardFlashAttention: every K and V tile loaded once and reused by every query block.
Deterministic: no randomness, the shape parameters fix the graph.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from npucc.ir.isa import Mmad
from npucc.ir.tiled import TileGraph
from npucc.tools.dan_workloads import TILE, T, _builder, _drain, _load, _move, attention_query


def chain_pipes(graph: TileGraph) -> TileGraph:
    """Add an edge from each pipe node to the next node of the same pipe in id order."""
    last: dict[str, int] = {}
    for node in graph.nodes:
        if node.pipe is None:
            continue
        prev = last.get(node.pipe)
        if prev is not None and node.id not in graph.succs[prev]:
            graph.add_edge(prev, node.id)
        last[node.pipe] = node.id
    return graph


def hard_matmul(name: str, mb: int, nb: int, kb: int) -> TileGraph:
    """C[mb, nb] = A[mb, kb] B[kb, nb] in tiles; B (kb*nb tiles) stays in L1 for every row."""
    bld = _builder(name)
    b = [[_load(bld, "L1", "B", (k * nb + j) * TILE, "b") for j in range(nb)] for k in range(kb)]
    for i in range(mb):
        panel = [_load(bld, "L1", "A", (i * kb + k) * TILE, "a") for k in range(kb)]
        for j in range(nb):
            acc = bld.alloc("L0C", TILE, "acc")
            for k in range(kb):
                a0 = _move(bld, panel[k], "L0A", "a0")
                b0 = _move(bld, b[k][j], "L0B", "b0")
                bld.emit(Mmad(acc, a0, b0, T, T, T, 1 if k else 0))
                bld.free(a0)
                bld.free(b0)
                if i == mb - 1:
                    bld.free(b[k][j])
            _drain(bld, acc, "C", (i * nb + j) * TILE, False)
        for buf in panel:
            bld.free(buf)
    return chain_pipes(bld.graph)


def hard_conv(name: str, rows: int, cinb: int, coutb: int) -> TileGraph:
    """3x3 conv over `rows` output rows: weights (coutb*3*cinb tiles) stationary, 3-row window."""
    bld = _builder(name)
    w = [
        [
            [_load(bld, "L1", "W", ((o * 3 + r) * cinb + c) * TILE, "w") for c in range(cinb)]
            for r in range(3)
        ]
        for o in range(coutb)
    ]
    x: dict[int, list] = {}  # input row (padded index) -> its cinb tiles
    for y in range(rows + 2):
        if y < 2:
            x[y] = [_load(bld, "L1", "X", (y * cinb + c) * TILE, "x") for c in range(cinb)]
    for y in range(rows):
        x[y + 2] = [_load(bld, "L1", "X", ((y + 2) * cinb + c) * TILE, "x") for c in range(cinb)]
        for o in range(coutb):
            acc = bld.alloc("L0C", TILE, "acc")
            for r in range(3):
                for c in range(cinb):
                    a0 = _move(bld, x[y + r][c], "L0A", "x0")
                    b0 = _move(bld, w[o][r][c], "L0B", "w0")
                    bld.emit(Mmad(acc, a0, b0, T, T, T, 1 if r or c else 0))
                    bld.free(a0)
                    bld.free(b0)
                    if y == rows - 1:
                        bld.free(w[o][r][c])
            _drain(bld, acc, "Y", (y * coutb + o) * TILE, True)
        for buf in x.pop(y):
            bld.free(buf)
    for row in x.values():
        for buf in row:
            bld.free(buf)
    return chain_pipes(bld.graph)


def hard_attention(name: str, qb: int, kvb: int) -> TileGraph:
    """Flash attention, qb query blocks over kvb key/value blocks loaded once (2*kvb tiles)."""
    bld = _builder(name)
    keys = [_load(bld, "L1", "K", j * TILE, "k") for j in range(kvb)]
    vals = [_load(bld, "L1", "V", j * TILE, "v") for j in range(kvb)]
    for q in range(qb):
        ql1 = _load(bld, "L1", "Q", q * TILE, "q")
        attention_query(bld, q, ql1, keys, vals, release=q == qb - 1)
    return chain_pipes(bld.graph)


HARD_WORKLOADS: dict[str, Callable[[], TileGraph]] = {
    "HardMatmul_Case0": lambda: hard_matmul("HardMatmul_Case0", 4, 4, 6),
    "HardMatmul_Case1": lambda: hard_matmul("HardMatmul_Case1", 48, 8, 8),
    "HardConv_Case0": lambda: hard_conv("HardConv_Case0", 6, 2, 3),
    "HardConv_Case1": lambda: hard_conv("HardConv_Case1", 32, 4, 4),
    "HardFlashAttention_Case0": lambda: hard_attention("HardFlashAttention_Case0", 4, 12),
    "HardFlashAttention_Case1": lambda: hard_attention("HardFlashAttention_Case1", 96, 24),
}


def small_instance(seed: int, chained: bool = False) -> tuple[TileGraph, dict[str, int]]:
    """A random small trace DAG under memory pressure and its capacities (bound tests).

    3-4 L1/UB buffers of 64 or 128 B (some loaded by COPY_IN, so their spills are clean),
    5-6 pipe nodes using one or two buffers each, random extra edges, ids topological: ALLOCs
    first, FREEs last. Capacities are 128 or 192 B per tier, below the buffers' total.
    """
    rng = random.Random(seed)
    g = TileGraph(f"small{seed}")
    nbuf = rng.randint(3, 4)
    bufs = [
        g.add_buffer(rng.choice((64, 128)), rng.choice(("L1", "L1", "UB"))) for _ in range(nbuf)
    ]
    for b in bufs:
        g.add_node("ALLOC", None, 0, (b.id,))
    users: list[list[int]] = [[] for _ in bufs]
    pipes = ("MTE2", "CUBE", "VECTOR", "MTE1")
    ops: list[int] = []
    for k in range(rng.randint(5, 6)):
        if k < nbuf and rng.random() < 0.6:
            use: tuple[int, ...] = (k,)
            op, pipe = "COPY_IN", "MTE2"
        else:
            use = tuple(sorted(rng.sample(range(nbuf), rng.randint(1, 2))))
            op, pipe = "OP", rng.choice(pipes)
        v = g.add_node(op, pipe, rng.randint(10, 400), use).id
        for x in use:
            for u in (g.alloc_of[x], *users[x][-1:]):
                if u not in g.preds[v]:
                    g.add_edge(u, v)
            users[x].append(v)
        for u in ops:
            if rng.random() < 0.2 and u not in g.preds[v]:
                g.add_edge(u, v)
        ops.append(v)
    for b in bufs:
        f = g.add_node("FREE", None, 0, (b.id,)).id
        for u in users[b.id] or [g.alloc_of[b.id]]:
            g.add_edge(u, f)
    if chained:
        chain_pipes(g)
    capacity = {"L1": rng.choice((128, 192)), "UB": rng.choice((128, 192))}
    capacity.update({t: 1 << 20 for t in ("L0A", "L0B", "L0C")})
    for b in bufs:  # every node's own buffers must fit
        capacity[b.tier] = max(capacity[b.tier], b.size)
    for v in ops:
        for tier in ("L1", "UB"):
            need = sum(bufs[b].size for b in g.nodes[v].bufs if bufs[b].tier == tier)
            capacity[tier] = max(capacity[tier], need)
    return g, capacity
