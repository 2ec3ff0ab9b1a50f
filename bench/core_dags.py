"""Benchmark: how many of a mesh program's per-core tiled DAGs (and layer pieces) are distinct.

Usage: python bench/core_dags.py MODEL.onnx [--target mesh8x8]

Compiles up to `lower-tiles` and counts the distinct per-core DAGs under two keys: every node's
op, pipe, cycles and buffers (size and tier by buffer id) with every edge, and the same without
the cycles; then the distinct layer pieces (a core's nodes of one layer, buffers and edges
renumbered within the piece, edges leaving it collapsed to -1) and the nodes they hold. A
schedule made once for equal DAGs (the schedule pass's per-core loop) saves at most the
repeated DAGs' share; a piece made once the repeated pieces' (docs/design.md, meshspeed12).
"""

from __future__ import annotations

import argparse
from collections import Counter

from npucc.compiler import compile_until
from npucc.ir.tiled import TileGraph


def dag_key(g: TileGraph, cycles: bool = True) -> tuple:
    """What one core's DAG is made of: nodes (op, pipe, cycles, buffers), buffers, edges."""
    nodes = tuple((n.op, n.pipe, n.cycles if cycles else 0, n.bufs) for n in g.nodes)
    return nodes, tuple((b.size, b.tier) for b in g.buffers), tuple(map(tuple, g.succs))


def piece_keys(g: TileGraph) -> list[tuple[tuple, int]]:
    """Each layer piece of a core's DAG as (its key, its nodes)."""
    by: dict[int, list[int]] = {}
    for n in g.nodes:
        by.setdefault(n.layer, []).append(n.id)
    out = []
    for ids in by.values():
        pos = {v: i for i, v in enumerate(ids)}
        local: dict[int, int] = {}
        key = tuple(
            (
                g.nodes[v].op,
                g.nodes[v].pipe,
                g.nodes[v].cycles,
                tuple(
                    (local.setdefault(b, len(local)), g.buffers[b].size, g.buffers[b].tier)
                    for b in g.nodes[v].bufs
                ),
                tuple(pos.get(s, -1) for s in g.succs[v]),
            )
            for v in ids
        )
        out.append((key, len(ids)))
    return out


def main() -> None:
    """Print the counts for one model and mesh target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--target", default="mesh8x8")
    args = parser.parse_args()
    program = compile_until(args.model, "lower-tiles", target=args.target)
    graphs = [core.graph for core in program.cores]
    for cycles in (True, False):
        counts = Counter(dag_key(g, cycles) for g in graphs)
        label = "with cycles" if cycles else "without cycles"
        print(f"cores {len(graphs)}, distinct DAGs {label}: {len(counts)}")
    pieces: Counter[tuple] = Counter()
    size: dict[tuple, int] = {}
    for g in graphs:
        for key, nodes in piece_keys(g):
            pieces[key] += 1
            size[key] = nodes
    total = sum(size[k] * c for k, c in pieces.items())
    print(
        f"layer pieces {sum(pieces.values())}, distinct {len(pieces)}; nodes {total}, "
        f"in distinct pieces {sum(size.values())}"
    )


if __name__ == "__main__":
    main()
