"""k-way partitioning of a layer hypergraph with KaHyPar (km1 objective, fixed seed)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import kahypar
import numpy as np

from npucc.backend.hypercut.hypergraph import Hypergraph

CONFIG = "kahypar_km1.ini"
EDGE_SCALE = 1024  # hyperedge weights in KiB (KaHyPar weights are 32-bit integers)
WORK_LEVELS = 10_000  # vertex weights are compute scaled to this total


def k_range(num_vertices: int, k_max: int = 6) -> range:
    """Admissible part counts: 2..min(N, k_max) (so k <= N below 8 vertices)."""
    return range(2, min(num_vertices, k_max) + 1)


def partition(
    hg: Hypergraph, k: int, epsilon: float = 0.1, seed: int = 0, memo: dict | None = None
) -> list[int]:
    """Block id of every vertex; km1-minimal under an epsilon compute balance; deterministic.

    `memo` (owned by the caller) keeps KaHyPar's answer per relabelled input, so identical
    sub-hypergraphs (repeated blocks of a network) are partitioned once.
    """
    n = hg.num_vertices
    if not 2 <= k <= n:
        raise ValueError(f"k={k} outside [2, {n}]")
    if hg.num_edges == 0 or n == k:
        return [v * k // n for v in range(n)]
    offsets, pins = hg.pins()
    edge_w = [max(1, int(b) // EDGE_SCALE) for b in hg.edge_bytes]
    total = float(hg.vertex_work.sum()) or 1.0
    cap = WORK_LEVELS // k  # no vertex may outweigh a block, or KaHyPar cannot balance
    node_w = [int(min(cap, max(1, round(w / total * WORK_LEVELS)))) for w in hg.vertex_work]
    if memo is None:
        return _kahypar(n, k, epsilon, seed, offsets, pins, edge_w, node_w)
    key = (n, k, epsilon, seed, tuple(offsets), tuple(pins), tuple(edge_w), tuple(node_w))
    if key not in memo:
        memo[key] = _kahypar(n, k, epsilon, seed, offsets, pins, edge_w, node_w)
    return list(memo[key])


def _kahypar(
    n: int,
    k: int,
    epsilon: float,
    seed: int,
    offsets: list[int],
    pins: list[int],
    edge_w: list[int],
    node_w: list[int],
) -> list[int]:
    """One KaHyPar call; blocks renumbered by first vertex so equal partitions compare equal."""
    graph = kahypar.Hypergraph(n, len(edge_w), offsets, pins, k, edge_w, node_w)
    ctx = kahypar.Context()  # a context keeps its last block weights: one per call
    ctx.loadINIconfiguration(_config())
    ctx.setK(k)
    ctx.setEpsilon(epsilon)
    ctx.setSeed(seed)
    ctx.suppressOutput(True)
    kahypar.partition(graph, ctx)
    blocks = [graph.blockID(v) for v in range(n)]
    order = {b: i for i, b in enumerate(dict.fromkeys(blocks))}
    return [order[b] for b in blocks]


@cache
def _config() -> str:
    """Path of the INI file (the package lies on the file system)."""
    return str(resources.files(__package__) / CONFIG)


def km1(hg: Hypergraph, assign: list[int]) -> float:
    """Connectivity objective: sum over hyperedges of (lambda(e) - 1) * bytes."""
    total = 0.0
    parts = np.asarray(assign)
    for e in range(hg.num_edges):
        lam = len(set(parts[np.flatnonzero(hg.incidence[:, e])].tolist()))
        total += (lam - 1) * float(hg.edge_bytes[e])
    return total
