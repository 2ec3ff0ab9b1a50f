"""A scheduled program (per core a schedule and its replay) and the timing of the whole mesh.

The mesh timing joins the per-core schedules by cross-core edges and the DDR channel.

Each core's replay fixes its order and its edges (original, spill, address reuse); on a mesh,
cross-core edges (a core waiting for another core's DDR writes) shift whole cores in time. The
same rules as the interpreter (the one list timer, `npucc.target.timing.TimingDag`): each pipe
in schedule order, a node starts at the latest finish among its predecessors, plus the flag's
NoC latency when the predecessor is on another core, and DDR transfers take turns on the
mesh's shared DDR channel in the interpreter's order (start time; then pipe-less nodes, then
pipes by core and pipe).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from npucc.ir.isa import PIPES
from npucc.ir.isa_cost import ddr_bytes
from npucc.ir.program import TiledProgram
from npucc.ir.replay import Replay
from npucc.ir.schedule import Schedule
from npucc.ir.tiled import TileGraph, TileNode
from npucc.ir.tiled_text import scheduled_to_text
from npucc.target import Target
from npucc.target.cost import shared_ddr_bandwidth, sync_cycles
from npucc.target.timing import TimingDag


@dataclass(slots=True)
class ScheduledProgram:
    """A TiledProgram with one schedule and its replay per core."""

    program: TiledProgram
    schedules: list[tuple[Schedule, Replay]]  # per core, in program.cores order

    @property
    def makespan(self) -> int:
        """Predicted makespan over all cores, cross-core waits included."""
        return mesh_makespan(self.program, [r for _, r in self.schedules])

    def verify(self) -> None:
        """Every core has exactly one schedule covering all its nodes."""
        self.program.verify()
        if len(self.schedules) != len(self.program.cores):
            raise ValueError("one schedule per core expected")
        for core, (schedule, replay) in zip(self.program.cores, self.schedules, strict=True):
            if len(replay.order) != len(core.graph) + 2 * len(schedule.spills):
                raise ValueError(f"core {core.row},{core.col}: schedule does not cover the DAG")

    def to_text(self) -> str:
        """The scheduled text form (see npucc.ir.tiled_text); it parses back."""
        return scheduled_to_text(self)


def mesh_timing_dag(
    program: TiledProgram,
    replays: Sequence[Replay],
    nbytes: Sequence[Sequence[int]] | None = None,
) -> tuple[TimingDag, list[int]]:
    """The whole mesh's timing DAG and each core's first node in it: every core's nodes (core c's
    replay node v is `base[c] + v`) in their pipes' schedule order with their edges, and the
    cross-core edges with their flags' NoC latencies. `nbytes`: each core's `core_ddr_bytes`,
    if the caller has them."""
    target = program.target
    dag = TimingDag()
    base: list[int] = []  # first dag node of each core
    for c, r in enumerate(replays):
        keys: dict[str | None, tuple[int, int] | None] = {p: (c, i) for i, p in enumerate(PIPES)}
        keys[None] = None
        moved = core_ddr_bytes(target, r) if nbytes is None else nbytes[c]
        off = dag.nodes(r.cycles, [keys[p] for p in r.pipes], moved)
        base.append(off)
        dag.in_pipe_order([off + v for v in r.order])
        graph = r.graph
        dag.block(off, graph.succs, [len(p) for p in graph.preds])
        for u, v in (*r.spill_edges, *r.reuse_edges):
            dag.edge(off + u, off + v)
    coords = [(core.row, core.col) for core in program.cores]
    for src_core, src, dst_core, dst in program.cross_edges:
        latency = sync_cycles(target, coords[src_core], coords[dst_core])
        dag.edge(base[src_core] + src, base[dst_core] + dst, latency)
    return dag, base


def mesh_makespan(
    program: TiledProgram,
    replays: Sequence[Replay],
    nbytes: Sequence[Sequence[int]] | None = None,
) -> int:
    """The latest finish over all cores once cross-core edges and the DDR channel are
    honoured (`nbytes`: each core's `core_ddr_bytes`, if the caller has them)."""
    target = program.target
    if not program.cross_edges and shared_ddr_bandwidth(target) is None:
        return max((r.makespan for r in replays), default=0)
    dag, _ = mesh_timing_dag(program, replays, nbytes)
    try:
        _, finish = dag.times(target)
    except ValueError:
        raise ValueError("cross-core edges form a cycle with the per-core schedules") from None
    return max(finish, default=0)


def core_ddr_bytes(target: Target, replay: Replay) -> list[int]:
    """The bytes every node of `replay` moves to or from DDR (an instruction's `ddr_bytes`, a
    spill its buffer's whole elements, else 0), in id order."""
    out: list[int] = []
    add = out.append
    buffers = replay.graph.buffers
    for node in replay.nodes:
        ins = node.instr
        if ins is not None:
            add(ddr_bytes(target, ins))
        elif node.op == "SPILL_OUT" or node.op == "SPILL_IN":
            buf = buffers[node.bufs[0]]
            eb = target.tier_bytes(buf.tier)
            add(buf.size // eb * eb)
        else:
            add(0)
    return out


# NOTE: the Replay fields that hold the graph or its objects; `detach` leaves them out and
# `attach` puts the parent's own back (every other field is plain data: ints, strings, lists)
_GRAPH_FIELDS = ("graph", "nodes", "preds")


@dataclass(slots=True)
class Detached:
    """One core's schedule and replay without its graph: what a worker process sends back
    (`detach`), far cheaper to pickle; `attach` joins it to the parent's copy of the graph."""

    schedule: Schedule
    fields: dict[str, Any]  # the replay's fields but _GRAPH_FIELDS
    added: list[TileNode]  # the replay's nodes after the graph's (SPILL_OUT/SPILL_IN)
    tail: list[Sequence[int]]  # the predecessors of the added nodes
    changed: dict[int, Sequence[int]]  # graph node -> its predecessors, where not the graph's


def detach(graph: TileGraph, schedule: Schedule, replay: Replay) -> Detached:
    """`replay` (of `schedule` on `graph`) without the graph's objects."""
    n = len(graph.nodes)
    gpreds, preds = graph.preds, replay.preds
    # NOTE: a replay shares the graph's predecessor list of each node it gave no spill or
    # reuse edge (it replaces the others by tuples): the shared ones are the graph's
    changed = {v: preds[v] for v in range(n) if preds[v] is not gpreds[v]}
    rest = {f.name: getattr(replay, f.name) for f in fields(Replay) if f.name not in _GRAPH_FIELDS}
    return Detached(schedule, rest, replay.nodes[n:], list(preds[n:]), changed)


def attach(graph: TileGraph, detached: Detached) -> tuple[Schedule, Replay]:
    """The schedule and replay `detached` holds, on `graph` (the one it was detached from, or
    a copy of it)."""
    preds: list[Sequence[int]] = [*graph.preds, *detached.tail]
    for v, srcs in detached.changed.items():
        preds[v] = srcs
    nodes = graph.nodes + detached.added
    return detached.schedule, Replay(graph=graph, nodes=nodes, preds=preds, **detached.fields)
