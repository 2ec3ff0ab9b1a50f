"""k-way partitioning of a layer hypergraph with KaHyPar (km1 objective, fixed seed); tiny
hypergraphs are partitioned exactly instead (cheaper than KaHyPar's set-up, never worse)."""

from __future__ import annotations

import math
from functools import cache
from importlib import resources
from typing import NamedTuple

import kahypar
import numpy as np

from npucc.backend.hypercut.hypergraph import Hypergraph

CONFIG = "kahypar_km1.ini"
EDGE_SCALE = 1024  # hyperedge weights in KiB (KaHyPar weights are 32-bit integers)
WORK_LEVELS = 10_000  # vertex weights are compute scaled to this total
EXACT_VERTICES = 7  # up to this many vertices every partition is tried (<= 876 of them)


def k_range(num_vertices: int, k_max: int = 6) -> range:
    """Admissible part counts: 2..min(N, k_max) (so k <= N below 8 vertices)."""
    return range(2, min(num_vertices, k_max) + 1)


def partition(
    hg: Hypergraph, k: int, epsilon: float = 0.1, seed: int = 0, memo: dict | None = None
) -> list[int]:
    """Block id of every vertex; km1-minimal under an epsilon compute balance; deterministic.

    Up to EXACT_VERTICES vertices every partition is tried (`_exact`), else KaHyPar answers.
    `memo` (owned by the caller) keeps the answer per relabelled input, so identical
    sub-hypergraphs (repeated blocks of a network) are partitioned once.
    """
    n = hg.num_vertices
    if not 2 <= k <= n:
        raise ValueError(f"k={k} outside [2, {n}]")
    if hg.num_edges == 0 or n == k:
        return [v * k // n for v in range(n)]
    inp = solver_input(hg, k)
    solve = _exact if n <= EXACT_VERTICES else _kahypar
    if memo is None:
        return solve(n, k, epsilon, seed, inp)
    key = (n, k, epsilon, seed, inp)
    if key not in memo:
        memo[key] = solve(n, k, epsilon, seed, inp)
    return list(memo[key])


class SolverInput(NamedTuple):
    """A hypergraph as KaHyPar takes it (tuples, so it also serves as a memo key)."""

    offsets: tuple[int, ...]  # start of each hyperedge's pins
    pins: tuple[int, ...]  # vertices of every hyperedge, concatenated
    edge_w: tuple[int, ...]  # hyperedge weights (KiB)
    node_w: tuple[int, ...]  # vertex weights (compute, scaled to WORK_LEVELS)


def solver_input(hg: Hypergraph, k: int) -> SolverInput:
    """Hyperedge offsets and pins, integer hyperedge and vertex weights, as KaHyPar takes them."""
    offsets, pins = hg.pins()
    edge_w = tuple(max(1, int(b) // EDGE_SCALE) for b in hg.edge_bytes)
    total = float(hg.vertex_work.sum()) or 1.0
    cap = WORK_LEVELS // k  # no vertex may outweigh a block, or KaHyPar cannot balance
    node_w = tuple(int(min(cap, max(1, round(w / total * WORK_LEVELS)))) for w in hg.vertex_work)
    return SolverInput(tuple(offsets), tuple(pins), edge_w, node_w)


def _exact(n: int, k: int, epsilon: float, seed: int, inp: SolverInput) -> list[int]:
    """The partition into 2..k blocks least over KaHyPar's block limit, then of least km1."""
    # ties go to the first in canonical order (blocks numbered by first vertex, as `_kahypar`
    # renumbers them), so the answer is deterministic without `seed`
    offsets, pins, edge_w, node_w = (list(field) for field in inp)
    blocks = _assignments(n, k)
    limit = (1 + epsilon) * math.ceil(sum(node_w) / k)
    weights = np.asarray(node_w, dtype=np.int64)
    loads = np.stack([(blocks == b) @ weights for b in range(k)], axis=1)
    over = np.maximum(loads.max(axis=1) - limit, 0.0)
    bits = np.left_shift(1, blocks)  # one bit per block
    cost = np.zeros(len(blocks), dtype=np.int64)
    for e, w in enumerate(edge_w):
        seen = np.bitwise_or.reduce(bits[:, pins[offsets[e] : offsets[e + 1]]], axis=1)
        cost += (_popcount(seen) - 1) * w
    best = int(np.lexsort((cost, over))[0])  # stable: the first of equals
    return blocks[best].tolist()


@cache
def _assignments(n: int, k: int) -> np.ndarray:
    """All partitions of n vertices into 2..k blocks (restricted growth strings, in order)."""
    rows: list[tuple[int, ...]] = [(0,)]
    for _ in range(n - 1):
        rows = [r + (b,) for r in rows for b in range(min(max(r) + 2, k))]
    return np.array([r for r in rows if max(r) >= 1], dtype=np.int64).reshape(-1, n)


def _popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of small non-negative integers (block masks)."""
    count = np.zeros_like(x)
    while x.any():
        count += x & 1
        x = x >> 1
    return count


def _kahypar(n: int, k: int, epsilon: float, seed: int, inp: SolverInput) -> list[int]:
    """One KaHyPar call; blocks renumbered by first vertex so equal partitions compare equal."""
    offsets, pins, edge_w, node_w = (list(field) for field in inp)
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
