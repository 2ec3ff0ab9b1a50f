"""The builder's dependency edges (ALLOC before use, read-after-write, write-after-read, every use
before FREE, accumulation reads its destination) and its refusals of misuse."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from npucc.backend.lower.builder import TileBuilder
from npucc.ir.isa import Copy, DdrRef, Instr, Mmad, VBinary, VFill
from npucc.ir.tiled import TileGraph
from npucc.target import load_target


def _builder() -> TileBuilder:
    return TileBuilder(TileGraph("t"), load_target("davinci-core"))


def test_edges_follow_each_buffers_reads_and_writes() -> None:
    bld = _builder()
    a, b = bld.alloc("UB", 64), bld.alloc("UB", 64)  # nodes 0, 1
    load = bld.emit(Copy(a, DdrRef("x"), (64,), (1,), (1,)))
    first = bld.emit(VBinary("mul", b, a, a, (64,), (1,), (1,), (1,)))  # RAW on a
    again = bld.emit(VBinary("mla", b, a, a, (64,), (1,), (1,), (1,)))  # reads b too
    over = bld.emit(Copy(a, DdrRef("x"), (64,), (1,), (1,)))  # WAR after both readers of a
    bld.free(a)
    bld.free(b)
    g = bld.graph
    assert g.preds[load] == [0]
    assert g.preds[first] == [1, load]  # b's ALLOC, then a's writer (once: a read twice)
    assert g.preds[again] == [first, load]  # the accumulation reads b's last write, a's writer
    assert sorted(g.preds[over]) == [first, again]
    assert g.preds[g.free_of[a.buf]] == [over]  # a's last write, no reader since
    assert g.preds[g.free_of[b.buf]] == [again]
    assert [n.op for n in g.nodes][2:6] == ["COPY_IN", "VEC_MUL", "VEC_MLA", "COPY_IN"]


def test_an_accumulating_mmad_waits_for_the_last_write_of_its_destination() -> None:
    bld = _builder()
    a, b, c = bld.alloc("L0A", 256), bld.alloc("L0B", 256), bld.alloc("L0C", 256)
    one = bld.emit(Mmad(c, a, b, 16, 16, 16, 0))
    two = bld.emit(Mmad(c, a, b, 16, 16, 16, 1))
    assert one in bld.graph.preds[two]
    assert bld.graph.nodes[two].pipe == "CUBE" and bld.graph.nodes[two].cycles > 0


def test_misuse_is_refused() -> None:
    bld = _builder()
    a = bld.alloc("UB", 64)
    bld.free(a)
    with pytest.raises(ValueError, match="after its FREE"):
        bld.emit(Copy(a, DdrRef("x"), (64,), (1,), (1,)))
    b = bld.alloc("UB", 64)
    bld.emit(Copy(DdrRef("y"), b, (64,), (1,), (1,)))  # a write of y, not closed
    with pytest.raises(ValueError, match="read before its writes were closed"):
        bld.emit(Copy(b, DdrRef("y"), (64,), (1,), (1,)))
    bld.hold("z", 64)
    with pytest.raises(AssertionError, match="resident tensor in DDR"):
        bld.emit(VBinary("add", b, DdrRef("z"), b, (64,), (1,), (1,), (1,)))


def test_a_cross_core_barrier_waits_for_each_other_cores_latest_close_only() -> None:
    from npucc.backend.lower.builder import DdrTracker

    target = load_target("davinci-core")
    tracker = DdrTracker()
    cores = [TileBuilder(TileGraph(f"c{i}"), target, i, tracker) for i in range(3)]
    closes = []
    for core in (0, 1, 0):  # two writes of x on core 0 (each closed), one on core 1
        bld = cores[core]
        a = bld.alloc("UB", 64)
        bld.emit(Copy(DdrRef("x"), a, (64,), (1,), (1,)))
        bld.free(a)
        closes.append((core, bld.close_ddr("x")[1]))
    mine = cores[2]
    mine.gate("x", [*closes, *closes])
    a = mine.alloc("UB", 64)
    write = mine.emit(Copy(DdrRef("x"), a, (64,), (1,), (1,)))
    gate = mine.graph.preds[write][-1]
    assert mine.graph.nodes[gate].op == "BARRIER"
    assert tracker.cross_edges == [(0, closes[2][1], 2, gate), (1, closes[1][1], 2, gate)]


def test_emit_local_adds_the_nodes_and_edges_emit_adds(monkeypatch: pytest.MonkeyPatch) -> None:
    # the inner loops' fast path (img2col, L1 -> L0 copies, mmad on this core's buffers):
    # the same graph as `emit`'s operand pass (which `emit` itself skips for such an
    # instruction: `_local` refused here), and `emit` itself for one with a DDR operand
    graphs = []
    for local in (False, True):
        bld = _builder()
        with monkeypatch.context() as patch:
            if not local:
                patch.setattr(TileBuilder, "_local", lambda self, instr: None)
            graphs.append(_emitted(bld, bld.emit_local if local else bld.emit))
    assert graphs[0] == graphs[1]
    bld = _builder()
    a = bld.alloc("L0A", 64)
    bld.free(a)
    with pytest.raises(ValueError, match="after its FREE"):
        bld.emit_local(Copy(a, bld.alloc("L1", 64), (64,), (1,), (1,)))


def _emitted(bld: TileBuilder, emit: Callable[[Instr], int]) -> tuple[list[Any], list[list[int]]]:
    """The nodes and predecessor lists of a small cube and vector lowering through `emit`."""
    x, w = bld.alloc("L1", 512), bld.alloc("L1", 512)
    emit(Copy(x, DdrRef("x"), (512,), (1,), (1,)))  # a DDR side: `emit`'s path
    emit(Copy(w, DdrRef("w"), (512,), (1,), (1,)))
    c = bld.alloc("L0C", 256)
    for k in range(3):
        a, b = bld.alloc("L0A", 256), bld.alloc("L0B", 256)
        emit(Copy(a, x.at(k * 16), (16, 16), (16, 1), (32, 1)))
        emit(Copy(b, w.at(k * 16), (16, 16), (16, 1), (32, 1)))
        emit(Mmad(c, a, b, 16, 16, 16, int(k > 0)))
        u = bld.alloc("UB", 256)
        emit(Copy(u, c, (256,), (1,), (1,)))
        emit(Copy(u, u.at(8), (8,), (1,), (1,)))  # one buffer read and written
        v = bld.alloc("UB", 256)
        emit(VFill(v, (256,), (1,), 0.0))  # no read
        d = (16, 16), (16, 1), (16, 1), (16, 1)
        emit(VBinary("mla", v, u, u.at(16), *d))  # the accumulator read too
        for one, two in ((v, u), (u, v), (u, u), (v, v)):  # operands repeating the dst
            emit(VBinary("add", v, one, two, *d))
        bld.free(v)
        bld.free(u)
        bld.free(a)
        bld.free(b)
    for ref in (x, w, c):
        bld.free(ref)
    g = bld.graph
    return [(n.op, n.pipe, n.cycles, n.bufs, n.instr) for n in g.nodes], g.preds


def _taps(bld: TileBuilder, run: bool, same: bool = True) -> None:
    """Nine taps into one accumulator from a window and weights, as a run (`emit_run`) or one
    by one (`emit_local`); then a write of the window after its readers. `same`: every tap on
    the first's buffers (else the last on another window: not a run)."""
    win, wts, other = bld.alloc("UB", 512), bld.alloc("UB", 64), bld.alloc("UB", 512)
    for ref in (win, wts, other):
        bld.emit(Copy(ref, DdrRef("x"), (64,), (1,), (1,)))
    acc = bld.alloc("UB", 64)
    d = (64,), (1,), (1,), (0,)

    def tap(i: int) -> VBinary:
        src = win if same or i < 8 else other
        return VBinary("mla", acc, src.at(i * 8), wts.at(i), *d)

    if run:
        bld.emit_run(tap, 9)
    else:
        for i in range(9):
            bld.emit_local(tap(i))
    bld.emit(Copy(win, DdrRef("x"), (64,), (1,), (1,)))  # waits for every tap reading it
    bld.emit(VBinary("add", acc, acc, wts, *d))
    for ref in (win, wts, other, acc):
        bld.free(ref)


def test_a_run_adds_the_nodes_and_edges_of_its_instructions_one_by_one() -> None:
    graphs = []
    for run in (False, True):
        bld = _builder()
        _taps(bld, run)
        g = bld.graph
        nodes = [(n.op, n.pipe, n.cycles, n.bufs, n.instr) for n in g.nodes]
        graphs.append((nodes, g.preds, g.succs))
    assert graphs[0] == graphs[1]
    with pytest.raises(AssertionError, match="other buffers than its first"):
        _taps(_builder(), True, same=False)


def test_a_ddr_load_and_store_wait_as_emit_s_operand_pass_has_them() -> None:
    # a load waits for its import's node (once, though that store read the buffer too) and
    # the buffer's readers; a store after a gate waits for it; a fill (no read) for the
    # buffer's readers
    bld = _builder()
    a = bld.alloc("UB", 64)
    store = bld.emit(Copy(DdrRef("t"), a, (64,), (1,), (1,)))
    bld.close_ddr("t")
    load = bld.emit(Copy(a, DdrRef("t"), (64,), (1,), (1,)))
    assert bld.graph.preds[load] == [store]  # the one writer of what it reads, a reader of a
    fill = bld.emit(VFill(a, (64,), (1,), 0.0))
    assert bld.graph.preds[fill] == [load]
    bld.gate("u", [(0, load)])
    gate = bld.graph.preds[bld.emit(Copy(DdrRef("u"), a, (64,), (1,), (1,)))]
    assert gate[0] == fill and bld.graph.nodes[gate[1]].op == "BARRIER"
