"""Boolean and integer masks as graph inputs: held as float 1.0/0.0, checked against ORT."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.tools.cli import main


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "masks",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model: onnx.ModelProto, tmp_path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    assert main(["check", str(path), "--quiet", "--seed", "4"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_boolean_input_selects_with_where(tmp_path, capsys):
    nodes = [
        helper.make_node("Not", ["keep"], ["drop"]),
        helper.make_node("Where", ["drop", "fill", "x"], ["y"]),
    ]
    model = _model(
        nodes,
        [("keep", TensorProto.BOOL, [2, 6]), ("x", TensorProto.FLOAT, [2, 6])],
        [("y", TensorProto.FLOAT, [2, 6])],
        [("fill", np.float32(-3.0))],
    )
    _check(model, tmp_path, capsys)


def test_integer_mask_cast_to_bool_then_gathered_and_combined(tmp_path, capsys):
    """The shape of a modern Hugging Face mask: Cast(BOOL), index ops, And, Where."""
    causal = np.tril(np.ones((5, 5), bool))
    nodes = [
        helper.make_node("Cast", ["mask"], ["mb"], to=TensorProto.BOOL),
        helper.make_node("Unsqueeze", ["mb", "axes"], ["m3"]),
        helper.make_node("Gather", ["m3", "order"], ["mg"], axis=2),  # constant indices
        helper.make_node("And", ["mg", "causal"], ["both"]),
        helper.make_node("Where", ["both", "zero", "minus"], ["bias"]),
        helper.make_node("Add", ["x", "bias"], ["s"]),
        helper.make_node("Softmax", ["s"], ["y"], axis=-1),
    ]
    model = _model(
        nodes,
        [("mask", TensorProto.INT64, [2, 5]), ("x", TensorProto.FLOAT, [2, 5, 5])],
        [("y", TensorProto.FLOAT, [2, 5, 5])],
        [
            ("axes", np.array([1], np.int64)),
            ("order", np.array([4, 3, 2, 1, 0], np.int64)),
            ("causal", causal),
            ("zero", np.float32(0.0)),
            ("minus", np.float32(-1e4)),
        ],
    )
    _check(model, tmp_path, capsys)


def test_boolean_graph_output_is_converted_by_the_host():
    model = _model(
        [helper.make_node("Greater", ["x", "zero"], ["y"])],
        [("x", TensorProto.FLOAT, [3])],
        [("y", TensorProto.BOOL, [3])],
        [("zero", np.float32(0.0))],
    )
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    got = npucc.compile(model).run({"x": x})["y"]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, x > 0)
