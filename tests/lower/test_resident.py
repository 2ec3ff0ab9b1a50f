"""Layer outputs kept in L1 between layers (resident.py): executed against onnxruntime, no DDR
round trip for what stays on chip, and what the choice leaves in DDR."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.backend.lower.resident import choose_resident
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.compiler import compile_until
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _net() -> onnx.ModelProto:
    """conv 3x3 -> relu -> conv 3x3 (bands of a resident image) -> add -> maxpool ->
    flatten -> gemm -> softmax, and a Gather whose table is a layer output."""
    rng = np.random.default_rng(0)

    def const(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [const("w1", 16, 8, 3, 3), const("w2", 16, 16, 3, 3), const("g", 16 * 16 * 16, 10)]
    inits.append(numpy_helper.from_array(np.array([3, 0, 3], np.int64), "idx"))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "c2"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["z"]),
        helper.make_node("Softmax", ["z"], ["y"]),
        helper.make_node("Relu", ["p"], ["t"]),
        helper.make_node("Gather", ["t", "idx"], ["gt"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "resident",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10]),
            helper.make_tensor_value_info("gt", TensorProto.FLOAT, [1, 3, 16, 16]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_layer_outputs_stay_in_l1_and_the_program_matches_onnxruntime():
    model = _net()
    program = npucc.compile(model, TARGET)
    assert "img2col" in program.stream and "pt=-" in program.stream  # a band inside the image
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]
    roof = program.stats["roofline"]
    # what is not resident: the gathered table (and the graph's own I/O and weights)
    table = 16 * 16 * 16 * 4
    assert roof["ddr_bytes"] <= roof["min_ddr_bytes"] + 2 * table


def test_the_choice_leaves_outputs_gather_tables_and_inputs_in_ddr():
    graph = compile_until(_net(), "prune-unused", TARGET)
    kept = choose_resident(graph, TARGET)
    produced = {t for layer in graph.layers for t in layer.outputs}
    table = next(layer.inputs[0] for layer in graph.layers if layer.op == "take")
    assert kept.first and set(kept.first) <= produced
    assert table not in kept.first and not set(graph.outputs) & set(kept.first)
    assert not set(graph.inputs) & set(kept.first)
    for t in kept.first:
        assert kept.first[t] < kept.last[t]
    budget = TARGET.memory.capacity("L1") // 4
    assert all(kept.live_bytes(i) <= budget for i in range(len(graph.layers)))


def test_a_mesh_keeps_nothing_resident():
    graph = compile_until(_net(), "prune-unused", "davinci-core")
    assert not choose_resident(graph, load_target("mesh8x8")).first
