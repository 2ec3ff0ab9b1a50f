"""Graph rewrites on tiny models: BN folding exactness, fusion rules, folding, identities."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from frontend_testutil import assert_matches_onnxruntime, tiny_model
from onnx import TensorProto, helper

from npucc.errors import NpuccError
from npucc.transforms.fold_conv_affine import scaled_weights
from npucc.transforms.graph_pipeline import import_model


def _bn_inits(rng, c: int, prefix: str = "bn") -> dict[str, np.ndarray]:
    return {
        f"{prefix}.s": rng.uniform(0.5, 2.0, c).astype(np.float32),
        f"{prefix}.b": rng.standard_normal(c).astype(np.float32),
        f"{prefix}.m": rng.standard_normal(c).astype(np.float32),
        f"{prefix}.v": rng.uniform(0.1, 3.0, c).astype(np.float32),
    }


def _bn(x: str, y: str, prefix: str = "bn") -> object:
    names = [f"{prefix}.{k}" for k in "sbmv"]
    return helper.make_node("BatchNormalization", [x, *names], [y], epsilon=1e-3)


@pytest.mark.parametrize("bias", [True, False])
def test_bn_folding_is_exact_against_onnxruntime(bias):
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((6, 4, 3, 3)).astype(np.float32), **_bn_inits(rng, 6)}
    if bias:
        inits["cb"] = rng.standard_normal(6).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w", *(["cb"] if bias else [])], ["c"], pads=[1] * 4)
    model = tiny_model([conv, _bn("c", "y")], {"x": [2, 4, 9, 9]}, ["y"], inits)
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["conv2d"]
    assert g.layers[0].outputs == ["y"] and len(g.layers[0].inputs) == 3
    assert "w" not in g.tensors  # original weights pruned
    assert_matches_onnxruntime(g, model, rtol=1e-5)


def test_bn_not_folded_when_conv_output_has_two_users():
    rng = np.random.default_rng(4)
    inits = {"w": rng.standard_normal((3, 3, 1, 1)).astype(np.float32), **_bn_inits(rng, 3)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        _bn("c", "b"),
        helper.make_node("Add", ["b", "c"], ["y"]),
    ]
    model = tiny_model(nodes, {"x": [1, 3, 5, 5]}, ["y"], inits)
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["conv2d", "mul", "add", "add"]
    assert g.tensors[g.layers[1].inputs[1]].shape == (3, 1, 1)
    assert_matches_onnxruntime(g, model, rtol=1e-5)


def test_relu_not_fused_into_graph_output_or_shared_producer():
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "x"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    model = tiny_model(nodes, {"x": [2, 3]}, ["a", "y"])
    g = import_model(model)
    assert [(layer.op, layer.attrs.get("act", "")) for layer in g.layers] == [
        ("add", ""),
        ("relu", ""),
        ("mul", "relu"),
    ]
    assert_matches_onnxruntime(g, model)


def test_shape_arithmetic_folds_to_a_static_reshape():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "w"], ["y"], transB=1),
    ]
    inits = {
        "zero": np.array(0, np.int64),
        "axes": np.array([0], np.int64),
        "minus1": np.array([-1], np.int64),
        "w": np.random.default_rng(5).standard_normal((5, 24)).astype(np.float32),
    }
    model = tiny_model(nodes, {"x": [2, 2, 3, 4]}, ["y"], inits)
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["reshape", "gemm"]
    assert g.tensors[g.layers[0].outputs[0]].shape == (2, 24)
    assert set(g.tensors) == {"x", "f", "w", "y"}
    assert_matches_onnxruntime(g, model)


def test_identity_chain_to_outputs_keeps_names():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Identity", ["r"], ["out1"]),
        helper.make_node("Identity", ["x"], ["out2"]),
        helper.make_node("Dropout", ["out1"], ["d"], name="drop"),
        helper.make_node("Add", ["d", "r"], ["out3"]),
    ]
    model = tiny_model(nodes, {"x": [2, 3]}, ["out1", "out2", "out3"])
    g = import_model(model)
    assert g.outputs == ["out1", "out2", "out3"]
    assert [(layer.op, layer.outputs) for layer in g.layers] == [
        ("relu", ["out1"]),
        ("reshape", ["out2"]),  # an input passed straight to an output stays a copy
        ("add", ["out3"]),
    ]
    assert g.layers[2].inputs == ["out1", "out1"]
    assert_matches_onnxruntime(g, model)


def test_index_ops_fold_when_their_inputs_are_constant():
    """ScatterND, TopK, ArgMax... of constants (a Swin window mask) fold away; ScatterND on
    run-time data stays unsupported."""
    nodes = [
        helper.make_node("ScatterND", ["base", "where", "ones"], ["mask"]),
        helper.make_node("TopK", ["mask", "k"], ["top", "top_i"], axis=-1),
        helper.make_node("ArgMax", ["mask"], ["arg"], axis=-1, keepdims=1),
        helper.make_node("Cast", ["arg"], ["argf"], to=1),
        helper.make_node("ReduceSum", ["top"], ["tsum"], keepdims=1),
        helper.make_node("Mul", ["x", "mask"], ["xm"]),
        helper.make_node("Add", ["xm", "argf"], ["xa"]),
        helper.make_node("Add", ["xa", "tsum"], ["y"]),
    ]
    inits = {
        "base": np.zeros((3, 4), np.float32),
        "where": np.array([[0, 1], [2, 3]], np.int64),
        "ones": np.array([1.0, 2.0], np.float32),
        "k": np.array([2], np.int64),
    }
    model = tiny_model(nodes, {"x": [3, 4]}, ["y"], inits, opset=13)
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["mul", "add", "add"]
    assert_matches_onnxruntime(g, model)
    scatter = helper.make_node("ScatterND", ["x", "where", "ones"], ["y"], name="scatter")
    runtime = tiny_model([scatter], {"x": [3, 4]}, ["y"], inits, opset=13)
    with pytest.raises(NpuccError, match="unsupported operator ScatterND"):
        import_model(runtime)


def test_gather_elements_of_constants_folds_like_onnxruntime():
    """A Hugging Face BERT slices its token-type buffer [1, 512] with GatherElements; onnx's
    reference evaluator fails on that shape, npucc folds it with numpy."""
    nodes = [
        helper.make_node("GatherElements", ["buffer", "positions"], ["types"], axis=1),
        helper.make_node("Cast", ["types"], ["typesf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "typesf"], ["y"]),
    ]
    inits = {
        "buffer": np.arange(512, dtype=np.int64)[None] % 3,
        "positions": np.array([[0, 1, 2, 3, -1, 7]], np.int64),
    }
    model = tiny_model(nodes, {"x": [1, 6]}, ["y"], inits, opset=13)
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["add"]
    assert_matches_onnxruntime(g, model)


def test_folding_log_of_zero_is_quiet_and_gives_minus_infinity():
    # T5's relative-position buckets take log(0) of a constant: -inf is ONNX's value, and the
    # reference evaluator's RuntimeWarning must not reach the user
    model = tiny_model(
        [
            helper.make_node("Log", ["zero"], ["minf"]),
            helper.make_node("Max", ["x", "minf"], ["y"]),
        ],
        {"x": [2, 3]},
        ["y"],
        {"zero": np.zeros((2, 3), np.float32)},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = import_model(model)
    assert [layer.op for layer in g.layers] == ["max"]
    assert np.isneginf(g.tensors[g.layers[0].inputs[1]].data).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_scaled_weights_round_each_float64_product_once_to_float32(dtype) -> None:
    rng = np.random.default_rng(3)
    weights = (rng.standard_normal((5, 3, 70, 70)) * 1e3).astype(dtype)  # > one ufunc buffer
    scale = rng.standard_normal(5) * 1e-2
    got = scaled_weights(weights, scale)
    expected = (weights.astype(np.float64) * scale.reshape(-1, 1, 1, 1)).astype(np.float32)
    assert got.dtype == np.float32 and got.tobytes() == expected.tobytes()
