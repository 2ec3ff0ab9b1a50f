"""Flag planning: every precedence edge of a schedule is enforced by pipe order or flags."""

from __future__ import annotations

import networkx as nx

from npucc.backend.lower.builder import TileBuilder
from npucc.backend.schedule.registry import schedule_graph
from npucc.codegen.emit import plan_flags
from npucc.ir.isa import Copy, DdrRef, Mmad
from npucc.ir.isa_cost import TargetSpillModel
from npucc.ir.tiled import TileGraph
from npucc.target import load_target


def _matmul_graph(tiles: int) -> tuple[TileGraph, object]:
    target = load_target("davinci-core")
    graph = TileGraph("t")
    bld = TileBuilder(graph, target)
    for i in range(tiles):
        acc = bld.alloc("L0C", 256)
        for j in range(2):
            a1 = bld.alloc("L1", 256)
            bld.emit(Copy(a1, DdrRef("a", 256 * (2 * i + j)), (256,), (1,), (1,)))
            a0 = bld.alloc("L0A", 256)
            bld.emit(Copy(a0, a1, (256,), (1,), (1,)))
            bld.free(a1)
            b1 = bld.alloc("L1", 256)
            bld.emit(Copy(b1, DdrRef("b", 0), (256,), (1,), (1,)))
            b0 = bld.alloc("L0B", 256)
            bld.emit(Copy(b0, b1, (256,), (1,), (1,)))
            bld.free(b1)
            bld.emit(Mmad(acc, a0, b0, 16, 16, 16, j))
            bld.free(a0)
            bld.free(b0)
        ub = bld.alloc("UB", 256)
        bld.emit(Copy(ub, acc, (256,), (1,), (1,)))
        bld.free(acc)
        bld.emit(Copy(DdrRef("c", 256 * i), ub, (256,), (1,), (1,)))
        bld.free(ub)
    bld.close_ddr("c")
    return graph, target


def _words(flags, verb: str) -> list[tuple[int, str]]:
    """(node, flag number) of each flag word with `verb` on the nodes' line tails."""
    out = []
    for v, tail in enumerate(flags.tails):
        assert tail == "" or tail.startswith(" | ")
        words = tail[3:].split()
        pairs = list(zip(words[::2], words[1::2], strict=True))
        assert all(w in ("wait", "set") for w, _ in pairs)
        out += [(v, flag.split("#")[1]) for w, flag in pairs if w == verb]
    return out


def _happens_before(replay, flags) -> nx.DiGraph:
    """Edges that order nodes in the stream: pipe order and flags."""
    order = nx.DiGraph()
    order.add_nodes_from(replay.order)
    last: dict[str, int] = {}
    for v in replay.order:
        pipe = replay.nodes[v].pipe
        if pipe is not None:
            if pipe in last:
                order.add_edge(last[pipe], v)
            last[pipe] = v
    setters = {flag: u for u, flag in _words(flags, "set")}
    for v, flag in _words(flags, "wait"):
        order.add_edge(setters[flag], v)
    return order


def test_every_edge_is_enforced_and_flags_are_pruned():
    graph, target = _matmul_graph(6)
    capacity = target.memory.on_chip()
    _, replay = schedule_graph(graph, "original", capacity, TargetSpillModel(target), 32)
    flags = plan_flags(replay)
    order = _happens_before(replay, flags)
    edges = list(replay.edges())
    for u, v in edges:
        assert nx.has_path(order, u, v), f"edge {u}->{v} not enforced"
    pipe = [node.pipe for node in replay.nodes]
    cross = sum(1 for u, v in edges if pipe[u] is None or pipe[u] != pipe[v])
    assert flags.count < cross  # implied edges were dropped


def test_flags_are_unique_and_paired():
    graph, target = _matmul_graph(3)
    capacity = target.memory.on_chip()
    _, replay = schedule_graph(graph, "original", capacity, TargetSpillModel(target), 32)
    flags = plan_flags(replay)
    set_ids = [flag for _, flag in _words(flags, "set")]
    wait_ids = [flag for _, flag in _words(flags, "wait")]
    assert sorted(set_ids) == sorted(wait_ids)
    assert len(set(set_ids)) == len(set_ids) == flags.count


def test_two_predecessors_go_latest_first_as_more_do():
    # a node's two predecessors are ordered by one comparison, more by a sort: a repeat of one
    # of the two (a third entry) must plan the same flags, in either edge order
    graph, target = _matmul_graph(6)
    capacity = target.memory.on_chip()
    _, replay = schedule_graph(graph, "original", capacity, TargetSpillModel(target), 32)
    want = plan_flags(replay)
    two = [v for v, near in enumerate(replay.preds) if len(near) == 2]
    assert two
    preds = list(replay.preds)
    for v in two:
        a, b = preds[v]
        replay.preds[v] = [b, a]
    assert plan_flags(replay) == want
    for v in two:
        a, b = preds[v]
        replay.preds[v] = [a, b, a]
    assert plan_flags(replay) == want
    assert len(_words(want, "wait")) == want.count
