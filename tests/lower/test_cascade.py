"""Cascading: conv chains run band by band, intermediates in L1, checked by onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
import npucc.backend.lower as lower
import npucc.backend.lower.overlap as overlap
from npucc.backend.lower.cascade import (
    TRIAL_ROWS,
    WIDE_SHARE,
    band_graph,
    busiest_pipes,
    plan_chains,
    trials,
)
from npucc.backend.lower.resume import Resume, Splice
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.compiler import compile_until
from npucc.ir.isa import Copy, DdrRef
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _model(nodes, consts, x, y) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
        for n, s in consts.items()
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inverted_residual(stride: int, h: int = 61, w: int = 59) -> onnx.ModelProto:
    """MobileNet v2's block: expand 1x1 (16 -> 96, relu6), depthwise 3x3 (pad 1, `stride`,
    relu6), project 1x1 (96 -> 16), + x when the stride is 1."""
    lo = helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0])
    hi = helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])
    nodes = [
        helper.make_node("Constant", [], ["c0"], value=lo),
        helper.make_node("Constant", [], ["c6"], value=hi),
        helper.make_node("Conv", ["x", "e", "eb"], ["a"]),
        helper.make_node("Clip", ["a", "c0", "c6"], ["a6"]),
        helper.make_node(
            "Conv", ["a6", "d", "db"], ["b"], group=96, pads=[1, 1, 1, 1], strides=[stride] * 2
        ),
        helper.make_node("Clip", ["b", "c0", "c6"], ["b6"]),
        helper.make_node("Conv", ["b6", "p", "pb"], ["z" if stride == 1 else "y"]),
    ]
    if stride == 1:
        nodes.append(helper.make_node("Add", ["z", "x"], ["y"]))
    consts = {"e": (96, 16, 1, 1), "eb": (96,), "d": (96, 1, 3, 3), "db": (96,)}
    consts |= {"p": (16, 96, 1, 1), "pb": (16,)}
    oh, ow = -(-h // stride), -(-w // stride)
    return _model(nodes, consts, [1, 16, h, w], [1, 16, oh, ow])


def _bottleneck(h: int = 49, w: int = 47) -> onnx.ModelProto:
    """ResNet's bottleneck: 1x1 (64 -> 32, relu), 3x3 (pad 1, relu), 1x1 (32 -> 64) + x, relu."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "w2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("Conv", ["br", "w3"], ["c"]),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    consts = {"w1": (32, 64, 1, 1), "w2": (32, 32, 3, 3), "w3": (64, 32, 1, 1)}
    return _model(nodes, consts, [1, 64, h, w], [1, 64, h, w])


def _stem(pool: str, h: int = 97, w: int = 101) -> onnx.ModelProto:
    """ResNet's stem: conv 7x7 stride 2 (3 -> 32, relu), then a 3x3 stride-2 pool, padded (an
    average pool not counting its padding)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node(
            pool, ["ar"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]
        ),
    ]
    oh, ow = (h + 1) // 2, (w + 1) // 2
    return _model(nodes, {"w": (32, 3, 7, 7)}, [1, 3, h, w], [1, 32, (oh + 1) // 2, (ow + 1) // 2])


def _stem_then(h: int = 97, w: int = 101) -> onnx.ModelProto:
    """`_stem`'s conv and max pool, then two 1x1 convs (32 -> 64, relu; 64 -> 32)."""
    nodes = [
        *_stem("MaxPool", h, w).graph.node[:2],
        helper.make_node(
            "MaxPool", ["ar"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]
        ),
        helper.make_node("Conv", ["m", "p"], ["b"]),
        helper.make_node("Relu", ["b"], ["br"]),
        helper.make_node("Conv", ["br", "q"], ["y"]),
    ]
    consts = {"w": (32, 3, 7, 7), "p": (64, 32, 1, 1), "q": (32, 64, 1, 1)}
    oh, ow = (h + 1) // 2, (w + 1) // 2
    return _model(nodes, consts, [1, 3, h, w], [1, 32, (oh + 1) // 2, (ow + 1) // 2])


def _lrn_branch(h: int = 41, w: int = 43) -> onnx.ModelProto:
    """Inception's stem and join: conv 3x3 (8 -> 64), LRN, max pool 3x3 (stride 1, pad 1),
    conv 1x1 (64 -> 16), concatenated with a 1x1 branch of x (a concat folded in place)."""
    nodes = [
        helper.make_node("Conv", ["x", "e"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("LRN", ["a"], ["n"], size=5, alpha=1e-3, beta=0.75, bias=1.0),
        helper.make_node("MaxPool", ["n"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["m", "p"], ["b"]),
        helper.make_node("Conv", ["x", "q"], ["c"]),
        helper.make_node("Concat", ["b", "c"], ["y"], axis=1),
    ]
    consts = {"e": (64, 8, 3, 3), "p": (16, 64, 1, 1), "q": (16, 8, 1, 1)}
    return _model(nodes, consts, [1, 8, h, w], [1, 32, h, w])


def _conv_lrn(h: int = 61, w: int = 59, k: int = 3) -> onnx.ModelProto:
    """Inception's second stem conv: conv kxk (32 -> 64, padded), then LRN."""
    nodes = [
        helper.make_node("Conv", ["x", "e"], ["a"], pads=[k // 2] * 4),
        helper.make_node("LRN", ["a"], ["y"], size=5, alpha=1e-3, beta=0.75, bias=1.0),
    ]
    return _model(nodes, {"e": (64, 32, k, k)}, [1, 32, h, w], [1, 64, h, w])


def _trials(model: onnx.ModelProto, chains, monkeypatch) -> list[tuple[int, list[int]]]:
    """`trials` of `model` beside `chains`, its base lowered without cascades."""
    with monkeypatch.context() as m:
        m.setattr(lower, "plan_chains", lambda g, t, *wider, **_: {})
        m.setattr(lower, "trials", lambda g, c, t, b: [])
        base = compile_until(model, "lower-tiles", TARGET)
    graph = compile_until(model, "prune-unused", TARGET)
    return trials(graph, chains, TARGET, busiest_pipes(base))


def test_trials_offer_a_cube_bound_conv_into_a_vector_layer_not_already_chained(monkeypatch):
    assert _trials(_conv_lrn(), {}, monkeypatch) == [(0, list(TRIAL_ROWS))]
    assert _trials(_conv_lrn(), {0: (2, 5, False)}, monkeypatch) == []
    # a 1x1 conv of 32 channels is bound on DDR, not the cube: nothing hides its re-fetches
    assert _trials(_conv_lrn(k=1), {}, monkeypatch) == []
    # a conv into a conv runs on one unit: no trial
    assert _trials(_bottleneck(), {}, monkeypatch) == []


def test_a_trial_cascade_kept_for_its_overlap_runs_faster_and_matches_onnxruntime(monkeypatch):
    model = _conv_lrn()
    monkeypatch.setattr(lower, "plan_chains", lambda g, t, *wider, **_: {})
    monkeypatch.setattr(lower, "trials", lambda g, c, t, b: [])
    plain = npucc.compile(model, TARGET).stats["predicted_makespan"]
    monkeypatch.undo()
    monkeypatch.setattr(lower, "plan_chains", lambda g, t, *wider, **_: {})
    tiled = compile_until(model, "lower-tiles", TARGET)
    assert "a.band1" in tiled.tensors  # a computed band by band
    _agrees_with_onnxruntime(model)
    assert npucc.compile(model, TARGET).stats["predicted_makespan"] < plain


def test_a_stride_2_chain_bands_clip_their_padding_at_the_image_edges():
    # NOTE: 47 columns: at 59 the expand -> depthwise pair alone gains more within the
    # cascades' share of L1 (CASCADE_SHARE) than the chain of three
    graph = compile_until(_inverted_residual(2, w=47), "prune-unused", TARGET)
    chains = plan_chains(graph, TARGET)
    ((first, (end, *_)),) = chains.items()
    assert end - first == 3  # expand -> depthwise -> project
    cascades = band_graph(graph, {first: (end, 4, False)}, TARGET)
    bands = [layer for layer in cascades.graph.layers if layer.op == "conv2d"]
    assert len(bands) == 3 * 8  # 31 output rows in bands of 4
    depthwise = [layer for layer in bands if layer.attrs["group"] == 96]
    # the first band pads the image's top row, the last its bottom; inner bands read real rows
    assert [d.attrs["pads"][0] for d in depthwise] == [1, 0, 0, 0, 0, 0, 0, 0]
    assert [d.attrs["pads"][2] for d in depthwise] == [0, 0, 0, 0, 0, 0, 0, 1]
    # band 1 (output rows 4..8) reads expanded rows 7..16: 2 x 4 + 1, from input rows 7..16
    band = graph.tensors | cascades.graph.tensors
    assert band[depthwise[1].inputs[0]].shape == (1, 96, 9, 47)
    assert cascades.views[bands[3].inputs[0]] == ("x", 7)
    # the expand's and the depthwise's bands stay in L1; the project's are rows of y
    assert cascades.bands == {b.outputs[0] for b in bands if b.inputs[1] != "p"}
    assert cascades.views[bands[5].outputs[0]] == ("y", 4)


def _agrees_with_onnxruntime(model: onnx.ModelProto) -> None:
    """Compile `model` for TARGET, run it, compare with onnxruntime; interpreted == predicted."""
    program = npucc.compile(model, TARGET)
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]


@pytest.mark.parametrize(
    "model",
    [
        _inverted_residual(1),
        _inverted_residual(2, w=47),
        _bottleneck(),
        _stem("MaxPool"),
        _stem("AveragePool"),
        _lrn_branch(),
    ],
    ids=["ir1", "ir2", "bn", "stem_max", "stem_avg", "lrn_concat"],
)
def test_a_cascaded_block_matches_onnxruntime_and_its_intermediates_stay_on_chip(
    model, monkeypatch
):
    graph = compile_until(model, "prune-unused", TARGET)
    assert plan_chains(graph, TARGET)
    # every chain cascaded, whether it pays or not
    monkeypatch.setattr(lower, "paying", lambda chains, base, banded: chains)
    _agrees_with_onnxruntime(model)
    # no instruction reaches an intermediate in DDR: of the layer outputs, only y is moved
    tiled = compile_until(model, "lower-tiles", TARGET)
    touched = {
        getattr(node.instr, name).key
        for node in tiled.cores[0].graph.nodes
        if node.instr is not None
        for name in (*node.instr.reads, *node.instr.writes)
        if isinstance(getattr(node.instr, name), DdrRef)
    }
    assert {k for k in touched if tiled.tensors[k].role == "temp"} == {"y"}


def test_weights_held_across_bands_are_loaded_once_and_read_in_place(monkeypatch):
    model = _bottleneck()
    graph = compile_until(model, "prune-unused", TARGET)
    ((first, (end, rows, _)),) = plan_chains(graph, TARGET).items()
    monkeypatch.setattr(
        lower,
        "plan_chains",
        lambda g, t, *wider, **_: {first: (end, rows, True)} if not wider else {},
    )
    monkeypatch.setattr(lower, "paying", lambda chains, base, banded: chains)
    _agrees_with_onnxruntime(model)
    tiled = compile_until(model, "lower-tiles", TARGET)
    loads = [
        node.instr.src.key
        for node in tiled.cores[0].graph.nodes
        if isinstance(node.instr, Copy) and isinstance(node.instr.src, DdrRef)
    ]
    bands = -(-49 // rows)
    assert bands > 1 and all(loads.count(w) == 1 for w in ("w1", "w2", "w3"))


def test_the_wider_share_plans_longer_bands_only_on_layers_no_chain_took():
    graph = compile_until(_inverted_residual(1), "prune-unused", TARGET)
    ((first, (end, rows, hold)),) = plan_chains(graph, TARGET).items()
    ((wide_first, (wide_end, wide, _)),) = plan_chains(graph, TARGET, WIDE_SHARE).items()
    assert (wide_first, wide_end) == (first, end) and wide > rows  # 9 rows against 6
    assert plan_chains(graph, TARGET, WIDE_SHARE, {first: (end, rows, hold)}) == {}
    # a layer taken cuts the run: the chains left are of the layers beside it
    assert [
        (f, e) for f, (e, *_) in plan_chains(graph, TARGET, WIDE_SHARE, {2: (3, 1, False)}).items()
    ] == [(0, 2)]
    assert [
        (f, e) for f, (e, *_) in plan_chains(graph, TARGET, WIDE_SHARE, {0: (1, 1, False)}).items()
    ] == [(1, 3)]


def test_chains_planned_only_within_the_wider_share_are_lowered_and_agree(monkeypatch):
    model = _inverted_residual(1)
    real = lower.plan_chains
    # none planned within a third of L1: the wider pass alone plans the chain
    monkeypatch.setattr(
        lower, "plan_chains", lambda g, t, *wider, **_: real(g, t, *wider) if wider else {}
    )
    monkeypatch.setattr(lower, "paying", lambda chains, before, after: chains)
    tiled = compile_until(model, "lower-tiles", TARGET)
    assert any(".band" in name for name in tiled.tensors)
    _agrees_with_onnxruntime(model)


def test_a_paying_lowering_spliced_onto_the_kept_tail_is_the_whole_lowering(monkeypatch):
    model = _stem_then()
    met: list[bool] = []

    class Watched(Splice):
        def meets(self, source, mark):  # noqa: ANN001, ANN202
            met.append(super().meets(source, mark))
            return met[-1]

    monkeypatch.setattr(lower, "Splice", Watched)
    spliced = npucc.compile(model, TARGET)
    assert any(met)  # the chain's lowering met the program without it after the chain

    class Never(Splice):
        def wants(self, source):  # noqa: ANN001, ANN202
            return False

    monkeypatch.setattr(lower, "Splice", Never)
    monkeypatch.setattr(overlap, "Splice", Never)
    whole = npucc.compile(model, TARGET)
    assert spliced.stream == whole.stream and spliced.image == whole.image
    assert "ar.band1" in compile_until(model, "lower-tiles", TARGET).tensors  # the chain paid


def test_a_kept_lowering_left_unfinished_at_its_meet_settles_to_the_whole_lowering(monkeypatch):
    model = _stem_then()
    pending: list[bool] = []
    settle = lower._Kept.settle

    def watched(self, lowering):  # noqa: ANN001, ANN202
        pending.append(self.rest is not None)
        settle(self, lowering)

    monkeypatch.setattr(lower._Kept, "settle", watched)
    unfinished = npucc.compile(model, TARGET)
    assert any(pending)  # the kept tail was lowered only when read

    class Never(Splice):
        def wants(self, source):  # noqa: ANN001, ANN202
            return False

    monkeypatch.setattr(lower, "Splice", Never)
    monkeypatch.setattr(overlap, "Splice", Never)
    whole = npucc.compile(model, TARGET)
    assert unfinished.stream == whole.stream and unfinished.image == whole.image


def test_chains_priced_under_one_share_are_planned_alike_under_another():
    graph = compile_until(_inverted_residual(1), "prune-unused", TARGET)
    priced: dict = {}
    narrow = plan_chains(graph, TARGET, priced=priced)
    assert narrow == plan_chains(graph, TARGET)
    # the wider share reads the prices made within a third of L1 (those cut short at that
    # third priced again): the longer bands a wider share alone plans
    wide = plan_chains(graph, TARGET, WIDE_SHARE, priced=priced)
    assert wide == plan_chains(graph, TARGET, WIDE_SHARE) != narrow


def _two_blocks() -> onnx.ModelProto:
    """`_inverted_residual(1)`'s block, then `_inverted_residual(2)`'s (a chain each)."""
    one, two = _inverted_residual(1), _inverted_residual(2)
    rename = {"x": "y", "y": "y2", "c0": "c0", "c6": "c6"}
    second = []
    for node in two.graph.node[2:]:  # the constants shared
        node = onnx.NodeProto.FromString(node.SerializeToString())
        node.input[:] = [rename.get(n, f"{n}2") for n in node.input]
        node.output[:] = [rename.get(n, f"{n}2") for n in node.output]
        second.append(node)
    inits = list(one.graph.initializer)
    for t in two.graph.initializer:
        twin = onnx.TensorProto.FromString(t.SerializeToString())
        twin.name = f"{t.name}2"
        inits.append(twin)
    graph = helper.make_graph(
        [*one.graph.node, *second],
        "blocks",
        list(one.graph.input),
        [helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 16, 31, 30])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_lowering_after_a_trial_goes_on_from_the_trials_mark_before_the_chain_it_dropped(
    monkeypatch,
):
    model = _two_blocks()
    # the first chain pays, the later ones do not: the lowering judged next has the first only
    monkeypatch.setattr(lower, "paying", lambda chains, before, after: {0: chains[0]})
    made: list[Resume] = []

    class Watched(Resume):
        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(lower, "Resume", Watched)
    later = npucc.compile(model, TARGET)
    assert lower.plan_chains(compile_until(model, "prune-unused", TARGET), TARGET).keys() == {0, 3}
    assert any(r.began is not None and r.began is r.later for r in made)

    class Never(Resume):
        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            super().__init__(*args, **kwargs)
            self.later = None

    monkeypatch.setattr(lower, "Resume", Never)
    whole = npucc.compile(model, TARGET)
    assert later.stream == whole.stream and later.image == whole.image
    assert "a6.band1" in compile_until(model, "lower-tiles", TARGET).tensors  # the chain kept
