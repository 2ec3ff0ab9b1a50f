"""A 1x1 conv computed in the windows of the depthwise conv that alone reads it (dwfuse.py)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_depthwise import room_readers

import npucc
from npucc.backend.lower import conv, depthwise, dwfuse
from npucc.backend.lower.builder import MeshBuilder, TileBuilder
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.conv_geom import conv_geometry, expand_depthwise
from npucc.backend.lower.dwfuse import fused_depthwise
from npucc.compiler import LEVEL_PASSES, compile_until
from npucc.ir.graph import Layer
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import load_target


def _model(cin=16, c=48, size=14, dw=None, act=True, bias=True, readers=1):
    """x -> 1x1 conv (cin -> c, clip 0..6 if `act`) -> depthwise 3x3 (attrs `dw`) -> clip."""
    rng = np.random.default_rng(1)
    consts = {
        "w1": rng.standard_normal((c, cin, 1, 1)) * 0.3,
        "b1": rng.standard_normal(c),
        "w2": rng.standard_normal((c, 1, 3, 3)) * 0.3,
        "b2": rng.standard_normal(c),
        "lo": np.float32(0.0),
        "hi": np.float32(6.0),
    }
    expand = ["x", "w1", "b1"] if bias else ["x", "w1"]
    nodes = [helper.make_node("Conv", expand, ["e"])]
    e = "e"
    if act:
        nodes.append(helper.make_node("Clip", ["e", "lo", "hi"], ["r"]))
        e = "r"
    attrs = dw if dw is not None else {"pads": [1, 1, 1, 1]}
    nodes.append(helper.make_node("Conv", [e, "w2", "b2"], ["d"], group=c, **attrs))
    nodes.append(helper.make_node("Clip", ["d", "lo", "hi"], ["y"]))
    outs = ["y"]
    if readers > 1:  # the expand's output read by another layer too
        nodes.append(helper.make_node("Relu", [e], ["z"]))
        outs.append("z")
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, cin, size, size))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _always_fused(monkeypatch, cube=0):
    """Fuse wherever it fits (the trial's choice aside), `cube` channels on the cube: the fused
    lowering is what runs."""

    def fuses(ctx, layer):
        d = fused_depthwise(ctx, layer)
        return None if d is None else (d, cube)

    monkeypatch.setattr(conv, "_fuses", fuses)


def _expand_nodes(model):
    """The lowered program's nodes of its first layer (the 1x1 conv)."""
    tiled = compile_until(model, LEVEL_PASSES["tiled"])
    return [v for core in tiled.cores for v in core.graph.nodes if v.layer == 0 and v.pipe]


@pytest.mark.parametrize(
    ("dw", "act", "bias"),
    [
        ({"pads": [1, 1, 1, 1]}, True, True),
        ({"strides": [2, 2], "pads": [0, 0, 1, 1]}, True, True),  # Keras' stride-2 padding
        ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, False, False),
        ({"pads": [0, 1, 2, 1]}, True, False),
    ],
)
def test_the_fused_pair_matches_onnxruntime_and_never_writes_the_expand_output(
    monkeypatch, dw, act, bias
):
    _always_fused(monkeypatch)
    model = _model(dw=dw, act=act, bias=bias)
    x = np.random.default_rng(0).standard_normal((1, 16, 14, 14)).astype(np.float32)
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    program = npucc.compile(model)
    got = program.run({"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    assert " op=mla " in program.stream and "img2col" in program.stream
    assert not _expand_nodes(model)  # its work is the depthwise's: its output never stored


@pytest.mark.parametrize("bias", [True, False])
def test_the_fused_1x1_convs_bias_is_a_cube_mmad_not_a_vector_add(monkeypatch, bias):
    _always_fused(monkeypatch)
    stream = npucc.compile(_model(bias=bias)).stream
    bias_mmads = [line for line in stream.splitlines() if " mmad " in line and " k=1 " in line]
    assert bool(bias_mmads) == bias
    assert " op=add " not in stream  # the depthwise's bias is broadcast by MTE1


def test_planes_too_large_for_a_vector_tile_fuse_in_bands_of_n0_channels(monkeypatch):
    """A 112x112 plane does not fit a vector tile (tiles of one channel's rows): the fused
    pair takes bands of rows of n0 channels instead, and matches onnxruntime."""
    model = _model(c=32, size=112)
    graph = compile_until(model, LEVEL_PASSES["graph"])
    ctx = LowerContext(graph, None, None, load_target("davinci-core"))  # type: ignore[arg-type]
    d = graph.layers[1]
    g = conv_geometry(ctx, d)
    assert depthwise.vector_tiles(ctx, d, g)[0] == 1
    groups, rows = dwfuse.fused_tiles(ctx, d, g)
    assert groups == 16 and 1 <= rows < 112
    _always_fused(monkeypatch)
    x = np.random.default_rng(2).standard_normal((1, 16, 112, 112)).astype(np.float32)
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = npucc.compile(model).run({"x": x})["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    assert not _expand_nodes(model)


@pytest.mark.parametrize(("fused", "alone", "fuses"), [(1031, 1000, True), (1032, 1000, False)])
def test_the_pair_fuses_when_its_trial_is_within_the_cycle_tolerance(
    monkeypatch, fused, alone, fuses
):
    """Fused, the pair moves fewer bytes: like a blocking, it wins within 1/32 of the cycles
    (the trials with a cube share, after it, slower)."""
    flows = itertools.chain([alone, fused], itertools.repeat(2000))
    monkeypatch.setattr(conv, "flow", lambda graph: next(flows))
    assert bool(_expand_nodes(_model())) != fuses


@pytest.mark.parametrize(
    ("cube", "dw", "bias"),
    [
        (16, {"pads": [1, 1, 1, 1]}, True),
        (32, {"pads": [0, 1, 2, 1]}, False),
        (32, {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, True),
        (48, {"pads": [1, 1, 1, 1]}, True),  # every channel
    ],
)
def test_a_fused_cube_share_matches_onnxruntime_without_img2col_for_its_taps(
    monkeypatch, cube, dw, bias
):
    """The share's taps are mmads over its window's rows shifted by the tap (k = n0), not
    img2col: the stream has as many img2cols as without a share (the 1x1 conv's)."""
    _always_fused(monkeypatch, cube)
    model = _model(dw=dw, bias=bias)
    x = np.random.default_rng(3).standard_normal((1, 16, 14, 14)).astype(np.float32)
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    program = npucc.compile(model)
    np.testing.assert_allclose(program.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-4)
    _always_fused(monkeypatch, 0)
    plain = npucc.compile(model).stream
    assert _k16(program.stream) - _k16(plain) >= 9 * cube // 16  # a mmad a tap, and block
    assert program.stream.count("img2col") == plain.count("img2col")


def _k16(stream):
    """The stream's mmads of k = 16."""
    return sum(1 for line in stream.splitlines() if " mmad " in line and " k=16 " in line)


def test_the_trial_keeps_the_cube_share_of_least_flow(monkeypatch):
    """alone, fused, 16, 32 and all 48 channels on the cube: the 16's flow is least, so it is
    kept."""
    flows = iter([1000, 990, 900, 950, 960])
    monkeypatch.setattr(conv, "flow", lambda graph: next(flows))
    shares = []
    monkeypatch.setattr(conv, "lower_fused", lambda ctx, e, d, cube=0: shares.append(cube))
    graph = compile_until(_model(), LEVEL_PASSES["graph"])
    ctx = LowerContext(graph, None, None, load_target("davinci-core"))  # type: ignore[arg-type]
    assert dwfuse.cube_shares(ctx, graph.layers[1]) == [16, 32, 48]
    npucc.compile(_model())
    assert shares[-1] == 16


def test_unfused_the_1x1_conv_lowers_on_its_own():
    """The check above can fail: a 1x1 conv whose output another layer reads too."""
    assert _expand_nodes(_model(readers=2))


def test_only_a_sole_depthwise_reader_of_a_plain_1x1_conv_fuses():
    target = load_target("davinci-core")

    def first(model):
        graph = compile_until(model, LEVEL_PASSES["graph"])
        return expand_depthwise(graph, graph.layers[0], target)

    assert first(_model()) is not None
    assert first(_model(readers=2)) is None  # another layer reads the 1x1 conv's output
    assert first(_model(dw={"pads": [1, 1, 1, 1], "dilations": [1, 1]})) is not None
    mesh = load_target("mesh8x8")
    graph = compile_until(_model(), LEVEL_PASSES["graph"])
    assert expand_depthwise(graph, graph.layers[0], mesh) is None  # one core only


def _pair_ctx(reserved: int, memo: dict) -> tuple[LowerContext, Layer, Layer]:
    """A context of `_model()`'s graph under an L1 reservation of `reserved` bytes, and its 1x1
    and depthwise convs."""
    graph = compile_until(_model(), LEVEL_PASSES["graph"])
    target = load_target("davinci-core")
    builder = MeshBuilder([TileBuilder(TileGraph("t"), target)])
    program = TiledProgram("t", target)
    ctx = LowerContext(graph, program, builder, target, reserved=reserved, memo=memo)
    ctx.begin_layer((0,))
    return ctx, graph.layers[0], graph.layers[1]


@pytest.mark.parametrize("share", [0, 16, 48])
def test_the_fused_pair_reads_l1s_room_only_through_its_fused_reads(monkeypatch, share):
    """`lower_fused` reads L1's room only where `dwfuse.fused_reads` does: its trials are kept
    by those, whatever the L1 reservation (the check can fail: test_depthwise's)."""
    ctx, expand, d = _pair_ctx(0, {})
    readers = room_readers(monkeypatch)
    dwfuse.lower_fused(ctx, expand, d, share)
    assert readers and set(readers) <= {"fits_stage", "_holds_weights"}


def test_a_fused_trial_serves_every_reservation_of_the_same_reads(monkeypatch):
    """Two L1 reservations of the same `fused_reads` share one trial of each share (its flow
    the one a trial under the second gives); one that changes them tries again."""
    memo: dict = {}
    tried = []
    real = conv.lower_fused
    monkeypatch.setattr(conv, "lower_fused", lambda *a: tried.append(a) or real(*a))
    ctx, expand, d = _pair_ctx(0, memo)
    first = conv._fused_flow(ctx, expand, d, 16)
    other, _, _ = _pair_ctx(4096, memo)
    assert dwfuse.fused_reads(other, expand, d) == dwfuse.fused_reads(ctx, expand, d)
    assert conv._fused_flow(other, expand, d, 16) == first and len(tried) == 1
    assert conv._fused_flow(_pair_ctx(4096, {})[0], expand, d, 16) == first
    tight, _, _ = _pair_ctx(ctx.target.memory.capacity("L1") - 16 * 1024, memo)
    assert dwfuse.fused_reads(tight, expand, d) != dwfuse.fused_reads(ctx, expand, d)
    conv._fused_flow(tight, expand, d, 16)
    assert len(tried) == 3
