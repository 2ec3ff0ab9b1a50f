"""Conv lowering: on a mesh the images of a batch share each stationary weight block; on one
core a global average pool that alone reads a conv is the conv's epilogue."""

from __future__ import annotations

import numpy as np
import pytest
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.checking import (
    compare,
    fp16_rtol,
    random_inputs,
    reduction_length,
    run_onnxruntime,
)
from npucc.ir.isa import Copy, VReduce


def _conv_model():
    """x [batch, 32, 16, 16] -> 3x3 conv of 32 channels (37 KB of weights, they fit L1)."""
    w = np.random.default_rng(0).standard_normal((32, 32, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32, 16, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _weight_elems(program) -> int:
    """Elements of `w` all cores load from DDR."""
    return sum(
        int(np.prod(n.instr.dims))
        for core in program.cores
        for n in core.graph.nodes
        if n.op == "COPY_IN" and getattr(n.instr.src, "key", "") == "w"
    )


def test_the_images_of_a_batch_share_the_weight_loads_on_a_mesh():
    model = _conv_model()
    tiled = npucc.compile_until(model, "lower-tiles", MESH2X2, batch=4, beam_width=4)
    assert _weight_elems(tiled) < 4 * 32 * 32 * 9  # fewer than once per image
    program = npucc.compile(model, MESH2X2, batch=4, beam_width=4)
    inputs = random_inputs(program.inputs, 0)
    result = program.execute(inputs)
    for c in compare(result.outputs, run_onnxruntime(model, inputs)):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
    assert result.makespan == program.stats["predicted_makespan"]


POOLS = {"GlobalAveragePool": {}, "AveragePool": {"kernel_shape": [13, 13]}}


def _pooled_model(size: int, readers: int = 1, pool: str = "GlobalAveragePool"):
    """x [1, 8, size, size] -> 3x3 conv of 24 channels with a bias and a relu -> the mean of
    each plane by `pool` -> softmax (`readers` 2: the conv's output is also a graph output)."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(pool, ["r"], ["g"], **POOLS[pool]),
        helper.make_node("Softmax", ["g"], ["y"], axis=1),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 1, 1])]
    if readers == 2:
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 24, size, size]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])
    graph = helper.make_graph(nodes, "pooled", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _stored_elems(program, key: str) -> int:
    """Elements the program's copies write into DDR tensor `key`."""
    return sum(
        int(np.prod(n.instr.dims))
        for core in program.cores
        for n in core.graph.nodes
        if n.op == "COPY_OUT" and getattr(n.instr.dst, "key", "") == key
    )


def _executed(model, precision: str = "fp32") -> None:
    """Compile for davinci-core, run, and check against onnxruntime and the prediction."""
    program = npucc.compile(model, "davinci-core", precision=precision)
    inputs = random_inputs(program.inputs, 0)
    result = program.execute(inputs)
    rtol = fp16_rtol(reduction_length(model)) if precision == "fp16" else 1e-4
    for c in compare(result.outputs, run_onnxruntime(model, inputs), rtol):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
    assert result.makespan == program.stats["predicted_makespan"]


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_a_conv_computes_the_global_average_pool_that_alone_reads_it_in_its_epilogue(pool):
    model = _pooled_model(13, pool=pool)
    tiled = npucc.compile_until(model, "lower-tiles", "davinci-core")
    assert _stored_elems(tiled, "r") == 0  # the conv's output never leaves UB
    sums = [
        (n.instr.dims, n.instr.src_strides)
        for n in tiled.cores[0].graph.nodes
        if isinstance(n.instr, VReduce) and n.instr.op == "sum"
    ]
    assert sums[0] == ((24, 13 * 13), (1, 24))  # the pixel-major output tile, by channel
    for precision in ("fp32", "fp16"):
        _executed(model, precision)


def test_a_conv_read_by_another_layer_or_too_large_for_one_tile_is_stored_whole():
    shared, large = _pooled_model(13, readers=2), _pooled_model(96)
    assert _stored_elems(npucc.compile_until(shared, "lower-tiles", "davinci-core"), "r") > 0
    tiled = npucc.compile_until(large, "lower-tiles", "davinci-core")
    assert _stored_elems(tiled, "r") + _stored_elems(tiled, "c") == 24 * 96 * 96
    for model in (shared, large):
        _executed(model)


def _max_pooled_model(pads: tuple[int, ...] = (0, 0, 0, 0), readers: int = 1):
    """x [1, 8, 17, 17] -> 3x3 conv of 24 channels with a bias -> 3x3 max pool of stride 2
    (`pads`) -> relu (`readers` 2: the conv's output is also a graph output)."""
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.standard_normal((24, 8, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(24).astype(np.float32), "b"),
    ]
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": list(pads)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], **pool),
        helper.make_node("Relu", ["p"], ["y"]),
    ]
    side = (17 + pads[0] + pads[2] - 3) // 2 + 1
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, side, side])]
    if readers == 2:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 24, 17, 17]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 17, 17])
    graph = helper.make_graph(nodes, "max_pooled", [x], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv_stores(model) -> int:
    """Elements the first layer (the conv) stores out of UB (to L1 or DDR)."""
    tiled = npucc.compile_until(model, "lower-tiles", "davinci-core")
    return sum(
        int(np.prod(n.instr.dims))
        for n in tiled.cores[0].graph.nodes
        if n.layer == 0 and isinstance(n.instr, Copy) and n.instr.src.tier == "UB"
    )


def test_a_conv_computes_the_column_pass_of_the_max_pool_that_alone_reads_it():
    model = _max_pooled_model()
    assert _conv_stores(model) == 24 * 17 * 8  # rows of the pool's 8 output columns
    for precision in ("fp32", "fp16"):
        _executed(model, precision)


def test_a_max_pool_with_padded_columns_or_beside_another_reader_pools_its_columns():
    padded, shared = _max_pooled_model(pads=(1, 1, 1, 1)), _max_pooled_model(readers=2)
    for model in (padded, shared):
        assert _conv_stores(model) == 24 * 17 * 17
        _executed(model)
