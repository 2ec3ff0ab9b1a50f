"""Frontend errors: unsupported ops, symbolic dims, bad inputs; all NpuccError, one line."""

from __future__ import annotations

import onnx
import pytest
from frontend_testutil import MODELS, tiny_model
from onnx import TensorProto, helper

from npucc.errors import NpuccError
from npucc.frontend.onnx_import import load_model, model_to_graph
from npucc.transforms.graph_pipeline import import_model

MLP = next(p for p in MODELS if p.name == "mlp.onnx")


def _error(source, shapes=None) -> str:
    with pytest.raises(NpuccError) as info:
        import_model(source, shapes)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unsupported_operator_message():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="first"),
        helper.make_node("Det", ["r"], ["y"]),  # unnamed: gets a deterministic name
    ]
    model = tiny_model(nodes, {"x": [4, 4]}, ["y"])
    assert _error(model) == "unsupported operator Det (node 'Det_1', opset 13)"


def test_fold_only_operator_on_activations_is_refused():
    model = tiny_model(
        [helper.make_node("Range", ["x", "x", "x"], ["y"], name="f")], {"x": []}, ["y"]
    )
    assert _error(model) == "node 'f' (Range): cannot infer a static shape for 'y'"


def test_unsupported_custom_domain():
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], name="g", domain="com.example")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    assert _error(model) == "unsupported operator com.example.Gelu (node 'g', opset 1)"


def test_symbolic_dimension_error_and_fix():
    assert _error(MLP) == "input 'x' has symbolic dimension 'batch'; pass --input-shape x=1x64"
    g = import_model(MLP, {"x": (5, 64)})
    assert g.tensors["x"].shape == (5, 64)
    assert g.tensors[g.outputs[0]].shape == (5, 10)


@pytest.mark.parametrize(
    ("shapes", "fragment"),
    [
        ({"y": (1, 64)}, "unknown input 'y'"),
        ({"x": (1, 64, 1)}, "rank 2"),
        ({"x": (1, 63)}, "dimension 1 cannot be 63"),
    ],
)
def test_bad_input_shapes(shapes, fragment):
    assert fragment in _error(MLP, shapes)


def test_non_float_input():
    graph = helper.make_graph(
        [
            helper.make_node("Abs", ["x"], ["n"]),
            helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT32, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert "element type UINT32" in _error(model)


def test_int_activation_inside_graph():
    nodes = [
        helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64, name="to_int"),
        helper.make_node("ReduceMean", ["i"], ["m"], name="mean"),
        helper.make_node("Cast", ["m"], ["y"], to=TensorProto.FLOAT, name="to_float"),
    ]
    model = tiny_model(nodes, {"x": [2]}, ["y"])
    assert _error(model) == (
        "node 'mean' (ReduceMean): integer tensor 'i' (i64) is not supported by this operator"
    )


def test_nonconstant_weights_and_reshape_shape():
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="c")
    model = tiny_model([conv], {"x": [1, 1, 3, 3], "w": [1, 1, 1, 1]}, ["y"])
    assert _error(model) == "node 'c' (Conv): weights and bias must be constant"


def test_invalid_and_missing_files(tmp_path):
    assert "cannot read model" in _error(tmp_path / "missing.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not a model")
    assert isinstance(pytest.raises(NpuccError, load_model, bad).value, NpuccError)


def test_invalid_model_fails_checker():
    model = tiny_model([helper.make_node("Relu", ["nope"], ["y"])], {"x": [2]}, ["y"])
    assert _error(model).startswith("invalid ONNX model:")


def test_model_bytes_and_proto_are_not_mutated():
    model = onnx.load(MLP)
    before = model.SerializeToString()
    import_model(model, {"x": (1, 64)})
    assert model.SerializeToString() == before
    assert (
        import_model(before, {"x": (1, 64)}).to_text()
        == import_model(MLP, {"x": (1, 64)}).to_text()
    )


def test_duplicate_and_empty_node_names_are_unique_and_deterministic():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="n"),
        helper.make_node("Relu", ["a"], ["b"], name="n"),
        helper.make_node("Mul", ["b", "b"], ["c"]),
        helper.make_node("Relu", ["c"], ["d"], name="Mul_2"),
        helper.make_node("Relu", ["d"], ["y"], name=""),
    ]
    model = tiny_model(nodes, {"x": [2]}, ["y"])
    names = [layer.name for layer in model_to_graph(load_model(model)).layers]
    assert names == ["n", "n_1", "Mul_2", "Mul_2_1", "Relu_4"]
    assert import_model(model).to_text() == import_model(model).to_text()
