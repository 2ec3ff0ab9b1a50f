"""Frontend of comparisons, logic, Where, training-mode BN and Dropout, casts between floats."""

from __future__ import annotations

import numpy as np
from frontend_testutil import assert_matches_onnxruntime, tiny_model
from onnx import TensorProto, helper

from npucc.transforms.graph_pipeline import import_model


def test_comparisons_and_logic_become_float_booleans_read_by_where():
    nodes = [
        helper.make_node("Less", ["x", "y"], ["lt"]),
        helper.make_node("GreaterOrEqual", ["x", "half"], ["ge"]),
        helper.make_node("Equal", ["x", "y"], ["eq"]),
        helper.make_node("And", ["lt", "ge"], ["both"]),
        helper.make_node("Or", ["both", "eq"], ["either"]),
        helper.make_node("Xor", ["either", "keep"], ["flip"]),
        helper.make_node("Not", ["flip"], ["sel"]),
        helper.make_node("Where", ["sel", "x", "y"], ["out"]),
    ]
    inits = {"half": np.float32(0.5), "keep": np.array([True, False, True, False, True])}
    model = tiny_model(nodes, {"x": [3, 5], "y": [3, 5]}, ["out"], inits, opset=16)
    g = import_model(model)
    ops = [layer.op for layer in g.layers]
    assert ops == ["lt", "ge", "eq", "mul", "max", "ne", "not", "where"]
    assert {g.tensors[t].dtype for layer in g.layers for t in layer.outputs} == {"f32"}
    assert_matches_onnxruntime(g, model)


def test_batchnorm_training_mode_is_decomposed_into_batch_statistics():
    node = helper.make_node(
        "BatchNormalization",
        ["x", "s", "b", "m", "v"],
        ["y", "rm", "rv"],
        training_mode=1,
        momentum=0.7,
    )
    c = 4
    inits = {
        "s": np.linspace(0.5, 2, c, dtype=np.float32),
        "b": np.linspace(-1, 1, c, dtype=np.float32),
        "m": np.zeros(c, np.float32),
        "v": np.ones(c, np.float32),
    }
    model = tiny_model([node], {"x": [2, c, 3, 3]}, ["y", "rm", "rv"], inits, opset=15)
    g = import_model(model)
    assert [x.attrs["axes"] for x in g.layers if x.op == "reduce"] == [(0, 2, 3), (0, 2, 3)]
    assert_matches_onnxruntime(g, model)


def test_dropout_in_training_mode_with_ratio_zero_is_dropped():
    node = helper.make_node("Dropout", ["x", "r", "t"], ["d"])
    nodes = [node, helper.make_node("Relu", ["d"], ["y"])]
    inits = {"r": np.float32(0.0), "t": np.array(True)}
    g = import_model(tiny_model(nodes, {"x": [2, 3]}, ["y"], inits))
    assert [x.op for x in g.layers] == ["relu"] and g.layers[0].inputs == ["x"]


def test_casts_round_narrowing_and_view_widening():
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["d"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["d"], ["bf"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["bf"], ["y"], to=TensorProto.FLOAT),
    ]
    model = tiny_model(nodes, {"x": [4, 6]}, ["y"])
    g = import_model(model)
    assert [(x.op, g.tensors[x.outputs[0]].dtype) for x in g.layers] == [
        ("f16", "f16"),
        ("reshape", "f64"),
        ("bf16", "bf16"),
        ("reshape", "f32"),
    ]
    assert_matches_onnxruntime(g, model, rtol=0)
