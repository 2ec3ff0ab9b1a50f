"""The `original` baseline scheduler (lowering order, first-fit, LRU spills) and lower bounds."""

from __future__ import annotations

import time

from npucc.backend.schedule.scan import LinearScan, lru_victim, topo_order
from npucc.ir.residency import PEAK_TIERS
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph
from npucc.target.cost import SpillModel


def original(
    graph: TileGraph, capacity: dict[str, int], spill_model: SpillModel, alignment: int = 1
) -> Schedule:
    """Keep the node order (smallest ready id first), first-fit placement, spill LRU buffers."""
    del spill_model  # LRU ignores spill costs
    t0 = time.perf_counter()
    order = topo_order(graph)
    schedule = LinearScan(graph, order, capacity, alignment).run(lru_victim)
    schedule.method = "original"
    schedule.seconds = {"original": time.perf_counter() - t0}
    return schedule


def pipe_cycles(graph: TileGraph) -> dict[str, int]:
    """Total cycles of the graph's nodes on each pipe (the busiest-pipe bound's terms)."""
    pipes: dict[str, int] = {}
    for node in graph.nodes:
        if node.pipe is not None:
            pipes[node.pipe] = pipes.get(node.pipe, 0) + node.cycles
    return pipes


def bounds(graph: TileGraph) -> dict[str, int]:
    """Lower bounds: makespan >= max(longest path, busiest pipe); peak >= largest node use set."""
    nodes = graph.nodes
    finish = [0] * len(nodes)
    for v in topo_order(graph):
        node = nodes[v]
        cycles = node.cycles if node.pipe is not None else 0
        finish[v] = max((finish[u] for u in graph.preds[v]), default=0) + cycles
    peak = 0
    for node in nodes:
        peak = max(
            peak,
            sum(graph.buffers[b].size for b in node.bufs if graph.buffers[b].tier in PEAK_TIERS),
        )
    busiest = max(pipe_cycles(graph).values(), default=0)
    return {"peak": peak, "makespan": max(max(finish, default=0), busiest)}
