"""memo: layer signatures, and work done once per signature on a graph rebuilt from it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.backend.lower import conv, depthwise
from npucc.backend.lower.builder import MeshBuilder, TileBuilder
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.memo import FORMS, SIGNATURES, frozen, layer_signature, once, signature
from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _graph() -> Graph:
    """Two convs alike up to names (a, b), one of another shape (c), one reading x twice (d)."""
    g = Graph("g")
    rng = np.random.default_rng(0)
    for name, shape in (("x", (1, 8, 6, 6)), ("y", (1, 8, 6, 6)), ("z", (1, 8, 5, 5))):
        g.add_tensor(Tensor(name, shape))
    for name in ("w1", "w2", "w3"):
        g.add_tensor(Tensor(name, (8, 8, 1, 1), data=rng.standard_normal((8, 8, 1, 1))))
    for name, shape in (("o1", (1, 8, 6, 6)), ("o2", (1, 8, 6, 6)), ("o3", (1, 8, 5, 5))):
        g.add_tensor(Tensor(name, shape))
    g.add_tensor(Tensor("o4", (1, 8, 6, 6)))
    g.add_layer(Layer("a", "conv2d", ["x", "w1"], ["o1"], {"pads": [0, 0, 0, 0]}))
    g.add_layer(Layer("b", "conv2d", ["y", "w2"], ["o2"], {"pads": [0, 0, 0, 0]}))
    g.add_layer(Layer("c", "conv2d", ["z", "w3"], ["o3"], {"pads": [0, 0, 0, 0]}))
    g.add_layer(Layer("d", "add", ["x", "x"], ["o4"], {}))
    return g


def _ctx(graph: Graph, reserved: int = 0) -> LowerContext:
    builder = MeshBuilder([TileBuilder(TileGraph("core"), TARGET)])
    return LowerContext(graph, TiledProgram(graph.name, TARGET), builder, TARGET, reserved=reserved)


def test_layers_alike_up_to_names_share_a_signature_and_others_do_not():
    g = _graph()
    a, b, c, d = g.layers
    assert signature(g, a) == signature(g, b)
    assert signature(g, a) != signature(g, c)
    add_of_two = Layer("e", "add", ["x", "y"], ["o4"], {})
    assert signature(g, d) != signature(g, add_of_two)  # x twice is not two tensors
    other = Layer("f", "conv2d", ["x", "w1"], ["o1"], {"pads": [0, 0, 0, 1]})
    assert signature(g, a) != signature(g, other)


def test_layer_signature_is_the_signature_kept_per_graph_and_layer():
    g, other = _graph(), _graph()
    a = g.layers[0]
    ctx = _ctx(g)
    assert layer_signature(ctx, a) == signature(g, a)
    assert layer_signature(ctx, a) is layer_signature(ctx, a)  # worked out once
    shifted = other.tensors["x"]
    other.tensors["x"] = Tensor("x", (1, 8, 7, 7), shifted.dtype)
    elsewhere = LowerContext(other, ctx.program, ctx.builder, TARGET, memo=ctx.memo)
    assert layer_signature(elsewhere, a) == signature(other, a) != signature(g, a)


def test_frozen_tells_attribute_values_apart():
    assert frozen([1, 2]) != frozen((1, 2))
    assert frozen(1) != frozen(1.0) != frozen(True)
    assert frozen({"a": [1.5]}) == frozen({"a": [1.5]})
    assert frozen(np.arange(3)) != frozen(np.arange(3.0))
    assert frozen(0.0) != frozen(-0.0)
    assert frozen(b"a") != frozen("a")
    with pytest.raises(TypeError):
        frozen(object())


def test_work_runs_once_per_signature_and_reservation_on_the_rebuilt_layer():
    g = _graph()
    a, b, c, _ = g.layers
    seen: list[tuple[str, tuple[str, ...], bool]] = []

    def work(ctx: LowerContext, layer: Layer) -> int:
        w = ctx.graph.tensors[layer.inputs[1]]
        seen.append((layer.name, tuple(layer.inputs), bool(np.any(w.data))))
        return ctx.reserved + len(seen)

    ctx = _ctx(g)
    assert once(ctx, a, "k", work) == once(ctx, b, "k", work) == 1
    assert seen == [("scratch", ("t0", "t1"), False)]  # names and weights left out
    assert once(ctx, c, "k", work) == 2
    assert once(ctx, a, "other", work) == 3
    shifted = LowerContext(g, ctx.program, ctx.builder, TARGET, reserved=64, memo=ctx.memo)
    assert once(shifted, a, "k", work) == 64 + 4
    assert len(ctx.builder.builders[0].graph.nodes) == 0  # nothing reached the context's core


def test_an_error_is_raised_again_naming_the_layer_itself():
    g = _graph()
    a = g.layers[0]

    def work(ctx: LowerContext, layer: Layer) -> int:
        raise NpuccError(f"layer {layer.name!r} does not fit")

    ctx = _ctx(g)
    with pytest.raises(NpuccError, match="layer 'a'"):
        once(ctx, a, "k", work)
    # only the builders' shared forms and the layers' signatures
    assert [key for key in ctx.memo if key not in (FORMS, SIGNATURES)] == []


def _two_depthwise_convs():
    """Two depthwise convs (each with its relu) alike up to names and weights."""
    rng = np.random.default_rng(1)
    w1, w2 = (rng.standard_normal((32, 1, 3, 3)).astype(np.float32) for _ in range(2))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], group=32, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["h2"], group=32, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 28, 28))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 32, 28, 28))],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_compile_reuses_trials_and_emits_what_it_emits_without_the_memo(monkeypatch):
    """The second conv's cost trials come from the first's; the program is the same as with
    every trial run afresh."""
    trials: list[int] = []
    real = depthwise._trial

    def counted(*args):
        trials.append(1)
        return real(*args)

    monkeypatch.setattr(depthwise, "_trial", counted)
    model = _two_depthwise_convs()
    kept = npucc.compile(model)
    with_memo = len(trials)

    def afresh(ctx, layer, key, work):
        ctx.memo.clear()
        return once(ctx, layer, key, work)

    monkeypatch.setattr(depthwise, "once", afresh)
    monkeypatch.setattr(conv, "once", afresh)
    trials.clear()
    fresh = npucc.compile(model)
    assert 0 < with_memo < len(trials)
    assert (kept.stream, bytes(kept.image)) == (fresh.stream, bytes(fresh.image))
