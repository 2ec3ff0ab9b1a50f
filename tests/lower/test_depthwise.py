"""Depthwise and low-reuse grouped convs: the vector lowering, its cost choice, and the weights."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_breadth_ops import run

import npucc
from npucc.backend.lower import depthwise, dwcube
from npucc.backend.lower.builder import MeshBuilder, TileBuilder
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.conv_geom import conv_geometry
from npucc.backend.lower.depthwise import _lower_split
from npucc.backend.lower.dwcube import cube_plan
from npucc.backend.lower.layout import budget
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.isa import Copy, DdrRef, VFill
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph, TileNode
from npucc.target import load_target


@pytest.mark.parametrize(
    ("channels", "cog", "group", "attrs"),
    [
        (48, 1, 48, {"pads": [1, 1, 1, 1]}),
        (36, 1, 36, {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
        (7, 1, 7, {"dilations": [2, 1]}),
        (8, 2, 4, {"pads": [1, 1, 1, 1]}),  # two input and two output channels per group
        (6, 3, 2, {"strides": [1, 2]}),  # three input, three output channels per group
    ],
)
def test_grouped_conv_matches_onnxruntime(channels, cog, group, attrs):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((group * cog, channels // group, 3, 3)).astype(np.float32)
    b = rng.standard_normal(group * cog).astype(np.float32)
    run("Conv", {"x": (2, channels, 9, 8)}, {"group": group, **attrs}, consts={"w": w, "b": b})


def _conv_model(channels: int, group: int, cog: int, size: int = 14):
    w = np.ones((group * cog, channels // group, 3, 3), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=group, pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, channels, size, size))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, group * cog, size, size))],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), w


def test_depthwise_splits_its_channels_between_the_cube_and_the_vector_pipe():
    """No block-diagonal weights in the image (they are built on chip): the cube's share runs
    blocks of 8 channels (8 MACs per useful one), the vector pipe's `mla`s the other channels;
    the result is onnxruntime's."""
    model, w = _conv_model(64, 64, 1)
    program = npucc.compile(model)
    assert len(program.image) == w.nbytes
    x = np.random.default_rng(0).standard_normal((1, 64, 14, 14)).astype(np.float32)
    result = program.execute({"x": x})
    per_channel = 14 * 14 * 9 * 8
    assert result.counters["macs"] % per_channel == 0
    assert 0 < result.counters["macs"] // per_channel < 64
    assert " op=mla " in program.stream
    assert "img2col" in program.stream
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(program.run({"x": x})["y"], ref, rtol=1e-5, atol=1e-4)


def test_a_grouped_conv_whose_groups_fill_the_cube_stays_on_the_cube():
    model, _ = _conv_model(64, 2, 32)
    program = npucc.compile(model)
    result = program.execute({"x": np.ones((1, 64, 14, 14), np.float32)})
    assert result.counters["macs"] == 14 * 14 * 64 * 32 * 9
    assert " op=mla " not in program.stream


def _split_nodes(graph: Graph, layer: Layer, channels: int) -> list[TileNode]:
    """The nodes `layer` lowered alone emits with `channels` of its channels on the cube."""
    target = load_target("davinci-core")
    tiles = TileGraph("t")
    builder = MeshBuilder([TileBuilder(tiles, target)])
    ctx = LowerContext(graph, TiledProgram("t", target), builder, target)
    ctx.begin_layer((0,))
    _lower_split(ctx, layer, channels)
    return tiles.nodes


def _cube_share_copies(channels: int) -> tuple[list[int], int]:
    """A 64-channel 56x56 depthwise conv with `channels` on the cube, lowered alone: the first
    row of each of the share's input copies, in lowering order, and its copies into L0B."""
    graph = Graph("t")
    graph.add_tensor(Tensor("x", (1, 64, 56, 56)))
    graph.inputs.append("x")
    graph.add_tensor(Tensor("w", (64, 1, 3, 3), data=np.ones((64, 1, 3, 3), np.float32)))
    graph.add_tensor(Tensor("y", (1, 64, 56, 56)))
    layer = Layer("dw", "conv2d", ["x", "w"], ["y"], {"group": 64, "pads": (1, 1, 1, 1)})
    graph.add_layer(layer)
    copies = [n.instr for n in _split_nodes(graph, layer, channels)]
    copies = [c for c in copies if isinstance(c, Copy)]
    rows = [
        c.src.off % (56 * 56) // 56
        for c in copies
        if isinstance(c.src, DdrRef) and c.src.key == "x" and c.dst.tier == "L1"
    ]
    return rows, sum(c.dst.tier == "L0B" for c in copies)


def test_the_cube_share_reads_its_input_in_row_order():
    """The cube's units go window after window (every run of blocks in each window), so the
    share reads its input rows in row order, like the vector share's bands; the blocks'
    weights are built in L0B (zeros, then the diagonal) again only when the run changes."""
    rows, l0b = _cube_share_copies(32)  # 4 runs of one block of 8 channels
    windows = len(set(rows))
    assert windows > 1 and rows == sorted(rows) and len(rows) == 4 * windows
    assert l0b == 2 * len(rows)
    rows, l0b = _cube_share_copies(8)  # one run: its weights built once
    assert len(rows) == windows and rows == sorted(rows) and l0b == 2


def test_the_cube_share_takes_the_last_channels():
    """The vector share's bands read the first channels (a producer writing its channels in
    order writes them first) and are emitted first; the cube's share reads the last ones and
    writes their outputs, with their weights."""
    graph = Graph("t")
    graph.add_tensor(Tensor("x", (1, 64, 56, 56)))
    graph.inputs.append("x")
    w = np.arange(64 * 9, dtype=np.float32).reshape(64, 1, 3, 3)
    graph.add_tensor(Tensor("w", (64, 1, 3, 3), data=w))
    graph.add_tensor(Tensor("y", (1, 64, 56, 56)))
    layer = Layer("dw", "conv2d", ["x", "w"], ["y"], {"group": 64, "pads": (1, 1, 1, 1)})
    graph.add_layer(layer)
    nodes = _split_nodes(graph, layer, 24)
    copies = [n.instr for n in nodes if isinstance(n.instr, Copy)]
    plane = 56 * 56

    def channels(key: str, tier: str) -> list[int]:
        return [
            c.src.off // plane if c.src.tier == "DDR" else c.dst.off // plane
            for c in copies
            if any(isinstance(r, DdrRef) and r.key == key for r in (c.src, c.dst))
            and tier in (c.src.tier, c.dst.tier)
        ]

    into_ub, into_l1 = channels("x", "UB"), channels("x", "L1")
    assert into_ub[0] == 0 and max(into_ub) < 40 <= min(into_l1)
    weights = [c.src.off for c in copies if isinstance(c.src, DdrRef) and c.src.key == "w"]
    assert 40 * 9 in weights  # the share's weights: from its first channel's
    written = {c.dst.off // plane for c in copies if isinstance(c.dst, DdrRef) and c.dst.key == "y"}
    assert min(written) == 0 and max(written) >= 40


def test_weights_too_large_to_hold_in_ub_are_staged_in_l1_once():
    """512 channels' weights and bias exceed the UB share that holds them whole: they are
    staged in L1 with one DMA each, every block's weights copied L1 -> UB (no DDR latency per
    block on MTE2) and its bias read in place; the layer still matches onnxruntime."""
    graph = Graph("t")
    graph.add_tensor(Tensor("x", (1, 512, 14, 14)))
    graph.inputs.append("x")
    graph.add_tensor(Tensor("w", (512, 1, 3, 3), data=np.ones((512, 1, 3, 3), np.float32)))
    graph.add_tensor(Tensor("b", (512,), data=np.ones(512, np.float32)))
    graph.add_tensor(Tensor("y", (1, 512, 14, 14)))
    attrs = {"group": 512, "pads": (1, 1, 1, 1)}
    layer = Layer("dw", "conv2d", ["x", "w", "b"], ["y"], attrs)
    graph.add_layer(layer)
    nodes = _split_nodes(graph, layer, 0)
    copies = [n.instr for n in nodes if isinstance(n.instr, Copy)]
    reads = [c.src.key for c in copies if isinstance(c.src, DdrRef)]
    assert reads.count("w") == 1 and reads.count("b") == 1
    assert sum(c.src.tier == "L1" and c.dst.tier == "UB" for c in copies) > 1
    rng = np.random.default_rng(4)
    w = rng.standard_normal((512, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(512).astype(np.float32)
    run("Conv", {"x": (1, 512, 14, 14)}, attrs | {"pads": [1, 1, 1, 1]}, consts={"w": w, "b": b})


def _dw_graph(channels: int, size: int) -> tuple[Graph, Layer]:
    """A depthwise 3x3 conv with a bias alone in a graph, and its layer."""
    graph = Graph("t")
    graph.add_tensor(Tensor("x", (1, channels, size, size)))
    graph.inputs.append("x")
    w = np.ones((channels, 1, 3, 3), np.float32)
    graph.add_tensor(Tensor("w", w.shape, data=w))
    graph.add_tensor(Tensor("b", (channels,), data=np.ones(channels, np.float32)))
    graph.add_tensor(Tensor("y", (1, channels, size, size)))
    attrs = {"group": channels, "pads": (1, 1, 1, 1)}
    layer = Layer("dw", "conv2d", ["x", "w", "b"], ["y"], attrs)
    graph.add_layer(layer)
    return graph, layer


def room_readers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions (outside context.py) that read L1's room from now on, as they read it."""
    readers: list[str] = []
    room = LowerContext.room

    def spy(self: LowerContext, tier: str) -> int:
        if tier == "L1":
            frame = sys._getframe(1)
            while frame.f_back is not None and frame.f_code.co_filename.endswith("context.py"):
                frame = frame.f_back
            readers.append(frame.f_code.co_name)
        return room(self, tier)

    monkeypatch.setattr(LowerContext, "room", spy)
    return readers


@pytest.mark.parametrize(("channels", "size", "cube"), [(64, 14, 0), (64, 56, 24), (512, 14, 0)])
def test_a_split_reads_l1s_room_only_through_its_split_reads(monkeypatch, channels, size, cube):
    """Every weights-held, staged and cube-shared path of `_lower_split` reads L1's room only
    where `_split_reads` does: its trials are kept by those, whatever the L1 reservation."""
    readers = room_readers(monkeypatch)
    _split_nodes(*_dw_graph(channels, size), cube)
    assert set(readers) <= {"cube_plan", "fits_stage"}
    if channels == 512 or cube:
        assert readers  # the check can fail: these paths read it


def test_a_splits_trial_serves_every_reservation_of_the_same_reads(monkeypatch):
    """Two L1 reservations of the same `_split_reads` share one trial, whose figures are the
    ones a trial under the second gives; a reservation that changes the cube plan tries
    again."""
    graph, layer = _dw_graph(64, 56)
    target = load_target("davinci-core")
    memo: dict = {}

    def ctx(reserved: int, memo: dict = memo) -> LowerContext:
        builder = MeshBuilder([TileBuilder(TileGraph("t"), target)])
        program = TiledProgram("t", target)
        out = LowerContext(graph, program, builder, target, reserved=reserved, memo=memo)
        out.begin_layer((0,))
        return out

    def reads(reserved: int) -> object:
        return depthwise._split_reads(ctx(reserved), layer, 24)

    trials = []
    real = depthwise._trial
    monkeypatch.setattr(depthwise, "_trial", lambda *a: trials.append(a) or real(*a))
    first = depthwise.flow_bound(ctx(0), layer, _lower_split, 24)
    assert reads(0) == reads(4096)
    assert depthwise.flow_bound(ctx(4096), layer, _lower_split, 24) == first
    assert len(trials) == 1
    assert depthwise.flow_bound(ctx(4096, {}), layer, _lower_split, 24) == first
    tight = target.memory.capacity("L1") - 64 * 1024  # a quarter of the rest: a smaller plan
    assert reads(tight) != reads(0)
    depthwise.flow_bound(ctx(tight), layer, _lower_split, 24)
    assert len(trials) == 3


def test_kept_plans_and_tilings_are_those_worked_out_afresh_under_each_reservation():
    """`cube_plan`, `vector_tiles` and the tap patterns are kept per value of what they read:
    under two L1 reservations of different cube plans each gets its own, equal to the plan
    worked out afresh, and a band's tap patterns equal a fresh computation's."""
    graph, layer = _dw_graph(64, 56)
    target = load_target("davinci-core")
    tight = target.memory.capacity("L1") - 64 * 1024
    plans = []
    for reserved in (0, tight, 0):
        builder = MeshBuilder([TileBuilder(TileGraph("t"), target)])
        ctx = LowerContext(graph, TiledProgram("t", target), builder, target, reserved=reserved)
        g = conv_geometry(ctx, layer)
        ub = budget(ctx, layer, "UB") // 8
        plan = cube_plan(ctx, g, 24, ub)
        rooms = tuple(ctx.capacity(t) for t in ("L1", "L0A", "L0B", "L0C"))
        assert plan == dwcube._planned.__wrapped__(g, 24, ub, target.cube.n0 // 2, rooms)
        tiles = depthwise.vector_tiles(ctx, layer, g)
        assert tiles == depthwise._tiles.__wrapped__(g, depthwise._tile_cap(ctx, layer, g))
        plans.append(plan)
    assert plans[0] != plans[1] and plans[0] == plans[2]
    kept = depthwise._tap_pattern(g, *tiles[:2], tiles[2])
    assert kept == depthwise._tap_pattern.__wrapped__(g, *tiles[:2], tiles[2])


@pytest.mark.parametrize(("channels", "size", "cores"), [(256, 14, 2), (960, 7, 4), (32, 112, 1)])
def test_a_windows_fills_come_just_before_its_taps(channels, size, cores):
    """On each core the next band's window is loaded ahead of the current band's taps, but its
    border fills (which wait for that load) follow those taps on the in-order vector pipe:
    after a window's fills the next vector instruction is one of its taps (before the fix a
    core's share of several tiles ran up to 23 % longer than its tiles one after another)."""
    graph, layer = _dw_graph(channels, size)
    target = load_target("mesh8x8")
    graphs = [TileGraph(f"core{c}") for c in range(cores)]
    builder = MeshBuilder([TileBuilder(g, target, c) for c, g in enumerate(graphs)])
    ctx = LowerContext(graph, TiledProgram("t", target), builder, target)
    ctx.begin_layer(tuple(range(cores)))
    _lower_split(ctx, layer, 0)
    for core, tiles in enumerate(graphs):
        vector = [n for n in tiles.nodes if n.pipe == "VECTOR"]
        fills = [i for i, n in enumerate(vector) if isinstance(n.instr, VFill)]
        assert core or len(fills) > 4  # several windows, each with its border
        for i in fills:
            after = next(n for n in vector[i:] if not isinstance(n.instr, VFill))
            assert vector[i].bufs[0] in after.bufs
