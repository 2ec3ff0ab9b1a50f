"""Timing of a whole mesh: per-core schedules joined by cross-core edges.

Each core's replay fixes its order and its edges (original, spill, address reuse); on a mesh,
cross-core edges (a core waiting for another core's DDR writes) shift whole cores in time. The
same rules as the interpreter: each pipe in schedule order, a node starts at the latest finish
among its predecessors, plus the flag's NoC latency when the predecessor is on another core.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from npucc.backend.lower.program import TiledProgram
from npucc.backend.schedule.replay import Replay
from npucc.target.cost import sync_cycles


def mesh_makespan(program: TiledProgram, replays: Sequence[Replay]) -> int:
    """The latest finish over all cores once cross-core edges are honoured."""
    if not program.cross_edges:
        return max((r.makespan for r in replays), default=0)
    base = [0]
    for r in replays:
        base.append(base[-1] + len(r.nodes))
    total = base[-1]
    succs: list[list[tuple[int, int]]] = [[] for _ in range(total)]
    indegree = [0] * total
    cycles = [0] * total

    def link(u: int, v: int, latency: int) -> None:
        succs[u].append((v, latency))
        indegree[v] += 1

    for c, r in enumerate(replays):
        off = base[c]
        last_on_pipe: dict[str, int] = {}
        for v in r.order:
            node = r.nodes[v]
            cycles[off + v] = node.cycles
            if node.pipe is not None:
                if node.pipe in last_on_pipe:
                    link(off + last_on_pipe[node.pipe], off + v, 0)
                last_on_pipe[node.pipe] = v
        for u, v in r.edges():
            link(off + u, off + v, 0)
    coords = [(core.row, core.col) for core in program.cores]
    for src_core, src, dst_core, dst in program.cross_edges:
        latency = sync_cycles(program.target, coords[src_core], coords[dst_core])
        link(base[src_core] + src, base[dst_core] + dst, latency)
    start = [0] * total
    ready = deque(g for g in range(total) if indegree[g] == 0)
    makespan = 0
    done = 0
    while ready:
        u = ready.popleft()
        done += 1
        finish = start[u] + cycles[u]
        makespan = max(makespan, finish)
        for v, latency in succs[u]:
            start[v] = max(start[v], finish + latency)
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    if done != total:
        raise ValueError("cross-core edges form a cycle with the per-core schedules")
    return makespan
