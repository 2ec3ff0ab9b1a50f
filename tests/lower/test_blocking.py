"""Two-level tiling (blocking.py): weights or inputs fetched once, ping-pong loads, every loop
order executed against onnxruntime, and the cost function's choices."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.backend.lower import LowerTiles
from npucc.backend.lower.block_price import block_cost
from npucc.backend.lower.blocking import (
    Blocking,
    Candidates,
    CubeShape,
    MBlock,
    MTile,
    _bias_plan,
    choose_blocking,
)
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.l0_tiles import MatTiles
from npucc.backend.planner import single_core_plan
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.ir.graph_text import graph_from_text
from npucc.ir.plan import PlannedGraph
from npucc.passes import CompileContext
from npucc.target import load_target
from npucc.target.cost import dma_cycles

Z = "0" * 64
TARGET = load_target("davinci-core")


def lowered(
    x: tuple[int, ...], w: tuple[int, ...], y: tuple[int, ...], attrs: str, bias: bool = False
):
    """The tiled program of one conv2d layer (zero constants) for davinci-core."""
    b = f'  const %"b" : f32[{w[0]}] sha256={Z}\n' if bias else ""
    operands = '%"x", %"w", %"b"' if bias else '%"x", %"w"'
    text = (
        'graph "t" opset=13 {\n'
        f'  input %"x" : f32[{",".join(map(str, x))}]\n'
        f'  const %"w" : f32[{",".join(map(str, w))}] sha256={Z}\n{b}'
        f'  %"y" = conv2d({operands}) {{{attrs}}} : '
        f'f32[{",".join(map(str, y))}] loc("c")\n'
        '  output %"y"\n}\n'
    )
    graph = graph_from_text(text)
    planned = PlannedGraph(graph, single_core_plan(graph))
    return LowerTiles().run(planned, CompileContext(TARGET))


def loads(program, key: str) -> list:
    """The COPY_IN nodes reading DDR tensor `key`, and their elements."""
    graph = program.cores[0].graph
    return [n for n in graph.nodes if n.op == "COPY_IN" and getattr(n.instr.src, "key", "") == key]


def test_weights_that_fit_are_fetched_once_for_every_band():
    # 64 x 64 pixels in many bands; 32 x 32 x 3 x 3 weights (37 KB) fit L1 with a band
    p = lowered((1, 32, 64, 64), (32, 32, 3, 3), (1, 32, 64, 64), "pads = [1, 1, 1, 1]")
    w = loads(p, "w")
    assert len(w) == 1 and np.prod(w[0].instr.dims) == 32 * 32 * 9
    assert len(loads(p, "x")) > 1


def test_a_small_input_and_large_weights_are_each_fetched_once():
    # 7 x 7 pixels of 512 channels (100 KB) against 9.4 MB of weights
    p = lowered((1, 512, 7, 7), (512, 512, 3, 3), (1, 512, 7, 7), "pads = [1, 1, 1, 1]")
    assert sum(np.prod(n.instr.dims) for n in loads(p, "x")) == 512 * 7 * 7
    assert sum(np.prod(n.instr.dims) for n in loads(p, "w")) == 512 * 512 * 9


def test_an_output_block_may_hold_all_of_l0c_to_read_its_input_once():
    # 196 x 256 accumulators (200 KB) exceed half of L0C; neither the input (802 KB) nor the
    # weights (1 MB) fit L1 whole: one output block over K blocks reads each once
    p = lowered((1, 1024, 14, 14), (256, 1024, 1, 1), (1, 256, 14, 14), "")
    assert sum(np.prod(n.instr.dims) for n in loads(p, "x")) == 1024 * 14 * 14
    assert sum(np.prod(n.instr.dims) for n in loads(p, "w")) == 1024 * 256


def test_accumulators_past_l0c_share_pay_for_their_drain():
    # one output block of 196 x 256 accumulators: past half of L0C its epilogue no longer
    # overlaps the next block's products; within half of a larger L0C it does
    shape = CubeShape(256, 1024, 1, 1, False, False, 1)
    blocks = [MBlock((MTile(0, 196),), 196)]
    plan = Blocking("os", npucc.backend.lower.l0_tiles.MatTiles(196, 64, 32), 1, 256, 128)
    costs = []
    for l0c in (1 << 18, 1 << 19):
        ctx = LowerContext(None, None, None, TARGET.with_capacity(L0C=l0c))  # type: ignore[arg-type]
        costs.append(block_cost(ctx, shape, plan, blocks))
    assert costs[0][1:] == costs[1][1:] and costs[0][0] > costs[1][0]


def test_k_blocks_of_an_input_written_by_channel_groups_run_while_it_is_written():
    # 196 pixels x 384 channels -> 64, X in 3 K blocks: with X written channel group after
    # channel group, the first 2 of the 3 K blocks of the first M block run while it is
    # written (of 2 M blocks, 2 of 6); X blocks of every channel (`is`) wait for all of it
    shape = CubeShape(64, 384, 1, 1, False, False, 1)
    grouped = replace(shape, x_by_channels=True)
    tiles = npucc.backend.lower.l0_tiles.MatTiles(196, 64, 32)
    one = [MBlock((MTile(0, 196),), 196)]
    two = [MBlock((MTile(0, 98),), 98), MBlock((MTile(98, 98),), 98)]
    ctx = LowerContext(None, None, None, TARGET)  # type: ignore[arg-type]
    for plan, blocks, x0, hidden in (
        (Blocking("os", tiles, 1, 64, 128), one, 128 * 196, (2, 3)),
        (Blocking("os", replace(tiles, m=98), 1, 64, 128), two, 128 * 98, (2, 6)),
        (Blocking("is", tiles, 1, 64, 384), one, 384 * 196, (0, 1)),
    ):
        alone = block_cost(ctx, shape, plan, blocks)
        staggered = block_cost(ctx, grouped, plan, blocks)
        own = alone[0] - dma_cycles(TARGET, "DDR_L1", x0 * 4)  # less the first X block's load
        assert staggered == (alone[0] - own * hidden[0] // hidden[1], *alone[1:])


def test_an_input_k_block_serves_several_weight_k_blocks():
    # 14 x 14 x 512 -> 7 x 7 x 512, 3 x 3 stride 2: 295 KB W blocks of 16 channels; X blocks
    # of 16 channels (12.5 KB) would cost a DMA's latency each, X blocks of several W blocks
    # still ping-pong beside them, and the input is still read once
    p = lowered((1, 512, 14, 14), (512, 512, 3, 3), (1, 512, 7, 7),
                "pads = [1, 1, 1, 1], strides = [2, 2]")  # fmt: skip
    x, w = loads(p, "x"), loads(p, "w")
    assert 1 < len(x) < len(w) and len(w) % len(x) == 0
    assert sum(np.prod(n.instr.dims) for n in x) == 512 * 14 * 14


def test_a_bias_beside_large_weight_blocks_is_loaded_with_the_last_one():
    # 7 x 7 x 512 -> 512 with 3 x 3 taps: two 295 KB W blocks exceed half of L1, a bias
    # loaded before them could split L1 between them; it comes with the last K block
    p = lowered((1, 512, 7, 7), (512, 512, 3, 3), (1, 512, 7, 7), "pads = [1, 1, 1, 1]", True)
    order = [n.id for n in loads(p, "w")], [n.id for n in loads(p, "b")]
    assert len(order[0]) > 2 and order[1] and min(order[1]) > order[0][-1]
    # K blocks of 131 KB (a pair within the share): the bias first
    p = lowered((1, 1024, 14, 14), (256, 1024, 1, 1), (1, 256, 14, 14), "", True)
    assert len(loads(p, "w")) > 2
    assert min(n.id for n in loads(p, "b")) < min(n.id for n in loads(p, "w"))


def test_an_only_stationary_block_is_held_once_beside_larger_streamed_blocks():
    # 7 x 7 x 1536 (301 KB) held once: 262 KB W blocks (and bias) beside it (two with it
    # exceed half of L1; ping-ponged with X, 131 KB ones), half as many DMAs, est. 4 % faster
    p = lowered((1, 1536, 7, 7), (2048, 1536, 1, 1), (1, 2048, 7, 7), "", True)
    x, w = loads(p, "x"), loads(p, "w")
    assert len(x) == 1 and np.prod(x[0].instr.dims) == 1536 * 7 * 7
    held = 4 * (1536 * 49 + max(np.prod(n.instr.dims) for n in w))
    assert 2 * held > TARGET.memory.capacity("L1") and len(w) == 48


def test_an_input_loaded_once_keeps_two_weight_blocks_beside_it_within_the_share():
    # 14 x 14 x 256 (200 KB) read once against 1024 x 256 weights: X and one 262 KB W block
    # fit half of L1, X and two do not; two 131 KB ones do (the next block's, or the next
    # layer's first, loads beside it)
    p = lowered((1, 256, 14, 14), (1024, 256, 1, 1), (1, 1024, 14, 14), "")
    x, w = loads(p, "x"), loads(p, "w")
    assert len(x) == 1 and np.prod(x[0].instr.dims) == 256 * 14 * 14
    blocks = 4 * (256 * 196 + 2 * max(np.prod(n.instr.dims) for n in w))
    assert 2 * blocks <= TARGET.memory.capacity("L1") and len(w) == 8


def test_a_held_block_within_the_estimates_tolerance_is_not_chosen():
    # 13 x 13 x 512 -> 1000 (SqueezeNet's last conv): holding X once saves DMAs only,
    # not cycles beyond the tolerance: its blocks stay within the ping-pong share
    p = lowered((1, 512, 13, 13), (1000, 512, 1, 1), (1, 1000, 13, 13), "")
    w = max(np.prod(n.instr.dims) for n in loads(p, "w"))
    x = max(np.prod(n.instr.dims) for n in loads(p, "x"))
    assert 2 * 4 * (x + w) <= TARGET.memory.capacity("L1")


def test_a_strided_pointwise_conv_loads_only_the_pixels_it_uses():
    p = lowered((1, 64, 28, 28), (128, 64, 1, 1), (1, 128, 14, 14), "strides = [2, 2]")
    assert sum(np.prod(n.instr.dims) for n in loads(p, "x")) == 64 * 14 * 14


def test_the_next_blocks_loads_wait_for_nothing_of_the_current_block():
    # ping-pong: every block's DMA depends only on its buffer's ALLOC
    p = lowered((1, 32, 64, 64), (32, 32, 3, 3), (1, 32, 64, 64), "pads = [1, 1, 1, 1]")
    graph = p.cores[0].graph
    for node in loads(p, "x"):
        assert [graph.nodes[q].op for q in graph.preds[node.id]] == ["ALLOC"]


def test_a_conv_tile_is_sized_by_the_pixels_of_its_rows():
    # 2 rows of 56 pixels x 8 channels x 9 taps fit half of L0A (a 128-pixel tile would not):
    # K tiles of 72, whole cube fractals, instead of 36 (4.5 fractals, padded to 5)
    p = lowered((1, 64, 56, 56), (192, 64, 3, 3), (1, 192, 56, 56), "pads = [1, 1, 1, 1]")
    mmads = [n.instr for n in p.cores[0].graph.nodes if n.op == "MMAD"]
    assert {(m.m, m.k) for m in mmads} == {(112, 72)}


def test_a_conv_splits_its_rows_into_balanced_bands():
    # the largest band of whole rows that fits is 28 of 32 rows; balanced: 2 bands of 16
    p = lowered((1, 3, 32, 32), (8, 3, 3, 3), (1, 8, 32, 32), "pads = [1, 1, 1, 1]")
    mmads = [n.instr for n in p.cores[0].graph.nodes if n.op == "MMAD"]
    assert {m.m for m in mmads} == {16 * 32}


def test_fetching_the_weights_once_costs_less_than_once_per_band():
    ctx = LowerContext(None, None, None, TARGET)  # type: ignore[arg-type]
    shape = CubeShape(64, 576, 9, 1, False, False, 0)
    blocks = [MBlock((MTile(i * 128, 128),), 64 * 10) for i in range(16)]
    tile = npucc.backend.lower.l0_tiles.MatTiles(128, 64, 72)
    once = block_cost(ctx, shape, Blocking("ws", tile, 1, 64, 576), blocks)
    per_band = block_cost(ctx, shape, Blocking("os", tile, 1, 64, 72), blocks)
    assert once[1] < per_band[1] and once[2] < per_band[2] and once <= per_band


def _conv_model(c: int, co: int, hw: int, k: int, stride: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((co, c, k, k)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(co).astype(np.float32), "b")
    pad = k // 2
    oh = (hw + 2 * pad - k) // stride + 1
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], pads=[pad] * 4, strides=[stride] * 2, kernel_shape=[k, k]
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, co, oh, oh])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("l1", "model"),
    [
        (1 << 20, (32, 48, 20, 3, 1)),  # fits: weight- or input-stationary
        (1 << 15, (64, 48, 12, 3, 1)),  # L1 too small for all of K: K blocks (os)
        (1 << 20, (48, 40, 15, 1, 2)),  # strided pointwise
        (1 << 20, (3, 16, 40, 7, 2)),  # bands of several tiles, each padded above and below
        (1 << 20, (8, 16, 24, 7, 1)),
        (1 << 20, (24, 40, 29, 3, 1)),  # tiles of whole rows of 29 pixels
        (1 << 20, (1024, 256, 14, 1, 1)),  # one output block holding all of L0C
    ],
)
@pytest.mark.parametrize("target", ["davinci-core", "mesh8x8"])
def test_every_blocking_agrees_with_onnxruntime(l1, model, target):
    base = load_target(target)
    onnx_model = _conv_model(*model)
    program = npucc.compile(onnx_model, base.with_capacity(L1=min(l1, base.memory.capacity("L1"))))
    inputs = random_inputs(program.inputs, 0, onnx_model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(onnx_model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]


def test_the_cube_adds_a_bias_where_the_vector_unit_binds_and_not_where_the_cube_does():
    ctx = LowerContext(None, None, None, TARGET)  # type: ignore[arg-type]
    tile = npucc.backend.lower.l0_tiles.MatTiles(128, 64, 32)
    blocks = [MBlock((MTile(i * 128, 128),), 64 * 10) for i in range(16)]

    def costs(k: int) -> tuple[int, int]:
        # a float bias and a relu; the output stays in L1 (stored on the vector unit)
        shape = CubeShape(64, k, 1, 1, True, False, 1, x_onchip=True, out_onchip=True)
        plan = Blocking("ws", tile, 1, 64, k)
        vector = block_cost(ctx, shape, plan, blocks)[0]
        cube = block_cost(ctx, shape, replace(plan, cube_bias=True), blocks)[0]
        return vector, cube

    vector, cube = costs(32)  # few MACs an output: the epilogue's vector passes bind
    assert cube < vector
    vector, cube = costs(1024)  # the cube binds: its bias mmads only add to it
    assert cube > vector


def test_a_bias_tied_in_cost_goes_to_the_cube_only_beside_a_depthwise_conv():
    # a 3x3 conv 3 -> 32 with a bias and a clip, its output to DDR: the DDR bound prices both
    # places of the bias alike; beside a depthwise conv (whose taps bind the vector unit) the
    # cube takes it, where its pipes' loads, busiest first, are less; elsewhere the vector unit
    ctx = LowerContext(None, None, None, TARGET)  # type: ignore[arg-type]
    shape = CubeShape(32, 27, 9, 1, True, False, 1)
    tile = npucc.backend.lower.l0_tiles.MatTiles(256, 32, 32)
    blocks = [MBlock((MTile(i * 256, 256),), 27 * 256) for i in range(16)]
    plan = Blocking("ws", tile, 1, 32, 27)
    assert block_cost(ctx, shape, plan, blocks) == block_cost(
        ctx, shape, replace(plan, cube_bias=True), blocks
    )
    for beside in (False, True):
        chosen = _bias_plan(ctx, replace(shape, beside_vector=beside), plan, blocks, {})[1]
        assert chosen.cube_bias == beside


def _stem_model(hw: int) -> onnx.ModelProto:
    """conv 3x3 stride 2 (3 -> 64, bias, relu) -> max pool 3x3 stride 2 -> conv 1x1 (64 -> 16)."""
    rng = np.random.default_rng(0)
    shapes = {"w1": (64, 3, 3, 3), "b1": (64,), "w2": (16, 64, 1, 1), "b2": (16,)}
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in shapes.items()
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2", "b2"], ["y"]),
    ]
    o = ((hw - 3) // 2 + 1 - 3) // 2 + 1
    graph = helper.make_graph(
        nodes,
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, o, o])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_bias_added_by_the_cube_agrees_with_onnxruntime():
    # the first conv's output (774 KB) is cascaded into the pool: its epilogue binds on VECTOR
    model = _stem_model(112)
    tiled = npucc.compile_until(model, "lower-tiles", "davinci-core")
    mmads = [n.instr for n in tiled.cores[0].graph.nodes if n.op == "MMAD"]
    assert any(m.k == 1 and m.acc == 1 for m in mmads)
    program = npucc.compile(model, "davinci-core")
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]


def test_operands_kept_on_chip_spread_a_layer_over_the_mesh():
    # a 1x1 conv of one 56 x 56 image, 64 -> 256 channels, on mesh8x8: through DDR every plan
    # waits for the shared channel, so the one-unit plan (weights read once) is as fast as
    # 64 units; kept on chip (a sub-batch loop's handoffs and staged weights) its bytes pass
    # no DDR channel, and 64 units are many times faster
    ctx = LowerContext(None, None, None, load_target("mesh8x8"))  # type: ignore[arg-type]
    tile = npucc.backend.lower.l0_tiles.MatTiles(112, 64, 64)
    blocks = [MBlock((MTile(i * 112, 112),), 112) for i in range(28)]
    ddr = CubeShape(256, 64, 1, 1, True, False, 0)
    noc = replace(ddr, noc=(True, True, True, False))
    one, spread = Blocking("ws", tile, 1, 256, 64, 1), Blocking("ws", tile, 1, 256, 64, 28)
    assert block_cost(ctx, ddr, spread, blocks)[0] >= block_cost(ctx, ddr, one, blocks)[0]
    assert block_cost(ctx, noc, spread, blocks)[0] * 8 < block_cost(ctx, noc, one, blocks)[0]
    # the bytes moved count the NoC's as the DDR's
    assert block_cost(ctx, noc, one, blocks)[1] == block_cost(ctx, ddr, one, blocks)[1]


def test_searches_sharing_candidates_pick_what_each_picks_alone():
    # one layer's searches under every set of operands on chip (a mesh plan's profiles) share
    # their candidates and the prices' pieces that do not depend on them (`Candidates`): each
    # picks what it picks alone, in any order, and every plan costs what it costs alone
    ctx = LowerContext(None, None, None, load_target("mesh8x8"))  # type: ignore[arg-type]
    tiles = [MatTiles(112, 64, 64), MatTiles(56, 128, 32), MatTiles(16, 16, 64)]

    def m_blocks(t: MatTiles, count: int) -> list[MBlock]:
        rows = [(m0, min(count * t.m, 784 - m0)) for m0 in range(0, 784, count * t.m)]
        return [
            MBlock(tuple(MTile(m0 + i, min(t.m, mb - i)) for i in range(0, mb, t.m)), mb)
            for m0, mb in rows
        ]

    base = CubeShape(256, 576, 9, 1, True, True, 1)
    shapes = [replace(base, noc=tuple(bool(f >> i & 1) for i in range(4))) for f in range(16)]
    shared = Candidates()
    for shape in shapes[::-1] + shapes:
        alone = choose_blocking(ctx, shape, tiles, m_blocks, 7)
        found = choose_blocking(ctx, shape, tiles, m_blocks, 7, shared)
        assert found[0] == alone[0] and found[1] == alone[1]
        assert block_cost(ctx, shape, *found, shared.memo) == block_cost(ctx, shape, *alone)
    with pytest.raises(AssertionError):  # another layer's shape may not share them
        choose_blocking(ctx, replace(base, n=128), tiles, m_blocks, 7, shared)


@pytest.mark.parametrize("target", ["davinci-core", "mesh8x8"])
def test_plans_bounded_out_unpriced_leave_every_pick_as_it_was(monkeypatch, target):
    # a plan whose floor (CUBE, its passes' DMAs or their DDR bound) is beyond the tolerance of
    # one priced is not priced (`blocking._scored`): each search picks what it picks with every
    # plan priced, and no plan costs less than its floor
    import npucc.backend.lower.block_price as block_price
    import npucc.backend.lower.blocking as blocking

    ctx = LowerContext(None, None, None, load_target(target))  # type: ignore[arg-type]
    tiles = [MatTiles(16, 16, 64), MatTiles(56, 128, 32), MatTiles(112, 64, 64)]

    def m_blocks(t: MatTiles, count: int) -> list[MBlock]:
        rows = [(m0, min(count * t.m, 784 - m0)) for m0 in range(0, 784, count * t.m)]
        return [
            MBlock(tuple(MTile(m0 + i, min(t.m, mb - i)) for i in range(0, mb, t.m)), mb)
            for m0, mb in rows
        ]

    priced = []
    plain, cycle_floor = blocking._bias_plan, block_price.cycle_floor

    def bias_plan(*a):
        scored = plain(*a)
        priced.append(scored[0][0] >= cycle_floor(*a[:5]))  # no plan costs less than its floor
        return scored

    monkeypatch.setattr(blocking, "_bias_plan", bias_plan)
    shapes = [
        CubeShape(n, k, taps, inst, bias, res, 1, x_by_channels=chan)
        for n, k, taps, inst, bias, res, chan in [
            (256, 576, 9, 1, True, True, False),
            (64, 27, 9, 1, True, False, False),
            (512, 4608, 9, 2, False, False, True),
            (1000, 4096, 9, 1, True, False, False),
            (144, 24, 1, 1, True, False, False),  # a 1x1 conv's: its DMAs bind
        ]
    ]
    bounded, counts = [], []
    for floor in (cycle_floor, lambda *a: 0):
        monkeypatch.setattr(block_price, "cycle_floor", floor)
        priced.clear()
        bounded.append([choose_blocking(ctx, s, tiles, m_blocks, 7) for s in shapes])
        counts.append(len(priced))
        assert all(priced)
    assert bounded[0] == bounded[1]
    assert counts[0] < counts[1]


def test_plans_bounded_out_with_operands_on_chip_leave_every_pick_as_it_was(monkeypatch):
    # with operands on chip the least cycles x bytes moved wins, and a plan whose floor of that
    # product is above one priced is not priced (`blocking._least_product`): each search picks
    # what it picks with every plan priced, and no plan costs less than its floor
    import npucc.backend.lower.block_price as block_price
    import npucc.backend.lower.blocking as blocking

    ctx = LowerContext(None, None, None, load_target("mesh8x8"))  # type: ignore[arg-type]
    tiles = [MatTiles(16, 16, 64), MatTiles(56, 128, 32), MatTiles(112, 64, 64)]

    def m_blocks(t: MatTiles, count: int) -> list[MBlock]:
        rows = [(m0, min(count * t.m, 784 - m0)) for m0 in range(0, 784, count * t.m)]
        return [
            MBlock(tuple(MTile(m0 + i, min(t.m, mb - i)) for i in range(0, mb, t.m)), mb)
            for m0, mb in rows
        ]

    priced, floors, bound = [], {}, [True]
    plain, product_floors = blocking._bias_plan, block_price.product_floors

    def floored(ctx, shape, plans, memo):
        found = product_floors(ctx, shape, plans, memo)
        floors.update(((id(p[0]), p[1]), f) for p, f in zip(plans, found.tolist(), strict=True))
        return found if bound[0] else np.zeros(len(plans))  # 0: every plan priced

    def bias_plan(*a):
        scored = plain(*a)
        priced.append(scored[0][0] * scored[0][1] >= floors[id(a[3]), a[2]])
        return scored

    monkeypatch.setattr(blocking, "_bias_plan", bias_plan)
    monkeypatch.setattr(block_price, "product_floors", floored)
    shapes = [
        CubeShape(n, k, taps, inst, bias, res, 1, x_by_channels=chan, noc=flags)
        for n, k, taps, inst, bias, res, chan in [
            (256, 576, 9, 1, True, True, False),
            (512, 4608, 9, 2, False, False, True),
            (144, 24, 1, 1, True, False, False),
        ]
        for flags in [(True, False, False, False), (False, True, True, False), (True,) * 4]
    ]
    bounded, counts = [], []
    for on in (True, False):
        bound[0] = on
        priced.clear()
        bounded.append([choose_blocking(ctx, s, tiles, m_blocks, 7) for s in shapes])
        counts.append(len(priced))
        assert all(priced)
    assert bounded[0] == bounded[1]
    assert counts[0] < counts[1]


def test_the_prices_pieces_and_arrays_are_splits_and_rows():
    # `_pieces` (memoised, shared tuples) counts the pieces `split` gives; `_int_rows` lays out
    # rows of ints (bools among them) as `np.array` does
    from npucc.backend.lower.block_price import _int_rows, _pieces
    from npucc.backend.lower.context import split

    for total, tile in [(7, 3), (8, 4), (5, 8), (1, 1), (1000, 64)]:
        sizes = [size for _, size in split(total, tile)]
        assert [s for s, c in _pieces(total, tile) for _ in range(c)] == sizes
    rows = [(1, 2, True), (4, 2**40, False), (0, -3, 1)]
    assert np.array_equal(_int_rows(rows, 3), np.array(rows, np.int64))
    assert _int_rows(rows, 3).dtype == np.int64
    assert _int_rows([], 9).shape == (0, 9)
