"""A lowering resumed from another's mark is the whole lowering, node for node."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc.backend.lower as lower
from npucc.backend.lower.cascade import Cascades, band_graph
from npucc.backend.lower.context import flow
from npucc.backend.lower.overlap import overlapped
from npucc.backend.lower.resume import (
    Resume,
    Splice,
    SpliceMiss,
    Timed,
    _canonical,
    _layer_decisions,
    _renumbered,
    detach,
    same_prefix,
    shed,
    skeleton,
)
from npucc.backend.lower.work import layer_work
from npucc.compiler import compile_until
from npucc.ir.program import TiledProgram
from npucc.passes import CompileContext
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _model() -> onnx.ModelProto:
    """conv, conv, max pool, conv, max pool: two conv -> pool links whose conv output is too
    large to stay in L1 (cascade trials' links)."""
    rng = np.random.default_rng(0)
    consts = {"a": (32, 8, 3, 3), "b": (32, 32, 3, 3), "c": (80, 32, 3, 3)}
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
        for n, s in consts.items()
    ]
    nodes = [
        helper.make_node("Conv", ["x", "a"], ["t0"], pads=[1] * 4),
        helper.make_node("Conv", ["t0", "b"], ["t1"], pads=[1] * 4),
        helper.make_node("MaxPool", ["t1"], ["t2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["t2", "c"], ["t3"], pads=[1] * 4),
        helper.make_node("MaxPool", ["t3"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "vggish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 80, 16, 16])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


GRAPH = compile_until(_model(), "prune-unused", TARGET)


def _lower(chains, resume: Resume | None = None) -> TiledProgram:
    ctx = CompileContext(TARGET)
    cascades = band_graph(GRAPH, chains, TARGET)
    return lower._lower_cascaded(ctx, None, cascades, layer_work(GRAPH), {}, resume)


def _same(a: TiledProgram, b: TiledProgram) -> None:
    ga, gb = a.cores[0].graph, b.cores[0].graph
    assert [(v.op, v.pipe, v.cycles, v.bufs, v.layer, v.instr) for v in ga.nodes] == [
        (v.op, v.pipe, v.cycles, v.bufs, v.layer, v.instr) for v in gb.nodes
    ]
    assert ga.succs == gb.succs and ga.preds == gb.preds
    assert (ga.alloc_of, ga.free_of) == (gb.alloc_of, gb.free_of)
    assert [(x.size, x.tier) for x in ga.buffers] == [(x.size, x.tier) for x in gb.buffers]
    assert list(a.tensors) == list(b.tensors) and a.io == b.io


def test_a_trial_resumed_before_the_layer_feeding_its_conv_is_the_whole_lowering():
    first = {1: (3, 2, False)}
    recorded = Resume(frozenset({2}))
    kept = _lower(first, recorded)
    mark = recorded.made[2]
    assert mark.index > 0 and mark.nodes[0] > 0
    trial = {**first, 3: (5, 2, False)}
    resumed = _lower(trial, Resume(frozenset(), mark))
    _same(resumed, _lower(trial))
    # it started from the mark: the prefix's nodes are the kept program's
    assert resumed.cores[0].graph.nodes[0] is kept.cores[0].graph.nodes[0]
    assert len(kept.cores[0].graph.succs[mark.nodes[0] - 1]) >= len(
        resumed.cores[0].graph.succs[mark.nodes[0] - 1]
    )
    _same(kept, _lower(first))  # the kept program is untouched by the resumed one
    mark.detach()  # the prefix alone: the recording lowering may go
    assert len(mark.graphs[0].nodes) == mark.nodes[0]
    _same(_lower(trial, Resume(frozenset(), mark)), resumed)


EVERY = frozenset(range(5))  # a mark before every source layer


def test_shed_detaches_the_marks_on_a_graph_the_kept_program_left_onto_one_prefix():
    first = {1: (3, 2, False)}
    recorded = Resume(EVERY)
    old = _lower(first, recorded)
    early, late = recorded.made[1], recorded.made[3]
    trial = {**first, 3: (5, 2, False)}
    kept = _lower(trial, Resume(EVERY, early))  # continues `old` up to source layer 1 only
    made = {1: early, 3: late}
    shed(made, kept)
    # both on one prefix of `old`, up to the later mark's nodes: `old`'s tail may go
    assert early.graphs[0] is late.graphs[0] is not old.cores[0].graph
    assert len(late.graphs[0].nodes) == late.nodes[0]
    assert late.graphs[0].nodes[0] is old.cores[0].graph.nodes[0]
    _same(_lower(trial, Resume(frozenset(), late)), _lower(trial))
    _same(_lower(trial, Resume(frozenset(), early)), kept)
    again = Resume(EVERY, early)
    resumed = _lower(trial, again)
    on = {1: again.made[1], 4: again.made[4]}
    graphs = [m.graphs[0] for m in on.values()]
    shed(on, resumed)  # marks on the kept program's own graph stay on it
    assert [m.graphs[0] for m in on.values()] == graphs == [resumed.cores[0].graph] * 2


def test_a_mark_whose_layers_before_it_lower_otherwise_is_not_used():
    recorded = Resume(frozenset({2}))
    kept = _lower({1: (3, 2, False)}, recorded)
    mark = recorded.made[2]
    other = {1: (3, 4, False), 3: (5, 2, False)}  # the first chain in bands of 4 rows
    resume = Resume(frozenset({2}), mark)
    program = _lower(other, resume)
    assert not same_prefix(mark.decisions, resume.made[2].decisions, mark.index)
    _same(program, _lower(other))
    assert program.cores[0].graph.nodes[0] is not kept.cores[0].graph.nodes[0]


def _timed(kept: TiledProgram, recorded: Resume) -> Timed:
    return Timed(kept.cores[0].graph, [m.nodes[0] for m in recorded.made.values()])


def test_a_graph_run_in_cuts_is_its_flow():
    recorded = Resume(EVERY)
    kept = _lower({}, recorded)
    timed = _timed(kept, recorded)
    assert timed.span == flow(kept.cores[0].graph) and len(timed.free) == 5
    # a trial resumed from a mark is priced from the kept run's finish times up to it
    trial = {1: (3, 2, False)}
    resumed = _lower(trial, Resume(frozenset(), recorded.made[1]))
    assert Splice(recorded.made, timed, 1).flow(resumed.cores[0].graph) == flow(
        _lower(trial).cores[0].graph
    )


def test_a_trial_meeting_the_kept_state_is_priced_as_its_whole_lowering():
    recorded = Resume(EVERY)
    kept = _lower({}, recorded)
    graph = kept.cores[0].graph
    trial = {1: (3, 2, False)}
    splice = Splice(recorded.made, _timed(kept, recorded), 1)
    resume = Resume(EVERY, recorded.made[0], splice=splice)
    partial = _lower(trial, resume)
    assert splice.met is not None  # it met the kept state after its chain, before layer 4
    mark, renamed, _ = splice.met
    whole = _lower(trial)
    assert mark is recorded.made[4]
    assert len(partial.cores[0].graph.nodes) < len(whole.cores[0].graph.nodes)
    assert splice.flow(partial.cores[0].graph) == flow(whole.cores[0].graph)
    # the kept tail, renamed, is the trial's: same work per node after the met marks
    tail = whole.cores[0].graph.nodes[len(partial.cores[0].graph.nodes) :]
    kept_tail = graph.nodes[mark.nodes[0] :]
    assert [(v.op, v.cycles) for v in tail] == [(v.op, v.cycles) for v in kept_tail]
    assert all(old < mark.nodes[0] for old in renamed)
    # the trial goes on from where it stopped: its whole lowering
    _same(_lower(trial, Resume(frozenset(), splice.met[2])), whole)


def test_an_earlier_kept_graphs_marks_are_met_only_from_its_tail_on():
    recorded = Resume(EVERY)
    kept = _lower({}, recorded)
    trial = {1: (3, 2, False)}
    # an unfinished kept program (its own graph, up to its meet) whose state before layer 4
    # is the earlier kept graph's mark there (npucc.backend.lower `_Kept.tails`)
    unfinished = _lower(trial, Resume(EVERY, recorded.made[0], splice=Splice(
        recorded.made, _timed(kept, recorded), 1)))  # fmt: skip
    timed = Timed(unfinished.cores[0].graph, [])
    graph = kept.cores[0].graph
    marks = {4: recorded.made[4]}
    met = []
    for tails in ((), ((graph, 5),), ((graph, 4),)):
        splice = Splice(marks, timed, 1, tails)
        _lower(trial, Resume(EVERY, recorded.made[0], splice=splice))
        met.append(splice.met is not None)
    assert met == [False, False, True]


def test_a_trial_whose_later_layers_lower_otherwise_meets_no_kept_state():
    recorded = Resume(EVERY)
    kept = _lower({}, recorded)
    trial = {1: (3, 2, False), 3: (5, 2, False)}  # the second link cascaded too
    splice = Splice(recorded.made, _timed(kept, recorded), 1)
    program = _lower(trial, Resume(EVERY, recorded.made[0], splice=splice))
    assert splice.met is None and splice.tried  # compared, never met
    _same(program, _lower(trial))


def test_a_spliced_tail_reading_an_unmapped_node_fails():
    recorded = Resume(EVERY)
    kept = _lower({}, recorded)
    splice = Splice(recorded.made, _timed(kept, recorded), 1)
    partial = _lower({1: (3, 2, False)}, Resume(EVERY, recorded.made[0], splice=splice))
    assert splice.met is not None
    mark, renamed, _ = splice.met
    splice.met = mark, {}, splice.met[2]  # the tail's reads of earlier nodes unmapped
    with pytest.raises(SpliceMiss, match="does not map"):
        splice.flow(partial.cores[0].graph)


def _overlapped(tried: list[tuple[int, list[int]]]) -> TiledProgram:
    """`overlapped` from the lowering without chains (its marks kept) over `tried`."""
    recorded = Resume(EVERY)
    kept = _lower({}, recorded)
    ctx, work, memo = CompileContext(TARGET), layer_work(GRAPH), {}

    def lowered(cascades: Cascades, resume: Resume) -> TiledProgram:
        return lower._lower_cascaded(ctx, None, cascades, work, memo, resume)

    return overlapped(lowered, GRAPH, TARGET, ({}, recorded.made), kept, tried)


def test_a_trial_whose_splice_misses_is_lowered_whole(monkeypatch):
    spliced = Splice.flow
    misses = []

    def missing(self, trial):  # a met splice whose tail reads an unmapped node
        if self.met is not None:
            misses.append(self.after)
            raise SpliceMiss("a spliced tail reads a node its mark does not map")
        return spliced(self, trial)

    expected = _overlapped([(1, [2])])
    monkeypatch.setattr(Splice, "flow", missing)
    _same(_overlapped([(1, [2])]), expected)
    assert misses == [1]  # the trial met the kept state, missed, and was lowered whole


def test_a_marks_canonical_state_and_its_layers_decisions_are_worked_out_once_and_kept():
    recorded = Resume(EVERY)
    _lower({1: (3, 2, False)}, recorded)
    marks = list(recorded.made.values())
    found = [_canonical(m) for m in marks]
    assert any(f is not None for f in found)
    assert all(m.canon == (f,) for m, f in zip(marks, found, strict=True))
    # what a mark's graphs become (a prefix: shed, detach; a skeleton) reads as it was
    detach(marks[:2])
    bare = [replace(m, graphs=[skeleton(m.graphs[0])], canon=None) for m in marks]
    assert [_canonical(m) for m in bare] == found
    assert [_renumbered(m) for m in marks] == found
    # a layer's decisions as a fresh copy of the decisions works them out
    d = marks[-1].decisions
    assert d.keys  # filled by `_canonical`
    fresh = replace(d, keys={})
    assert all(
        _layer_decisions(d, i, {}) == _layer_decisions(fresh, i, {}) for i in range(len(d.origin))
    )
