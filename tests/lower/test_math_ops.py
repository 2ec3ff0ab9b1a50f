"""One-op models of the math operators (trigonometric, rounding, scans, Lp norms, Hardmax, Mod),
compiled, interpreted and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.ir.formats import parse_ir, render

RNG = np.random.default_rng(3)


def run(op, feeds, attrs=None, consts=None, opset=22, out_shape=None):
    """Run a one-node model under npucc and onnxruntime; compare within 1e-4 of max |ref|.

    `out_shape` declares the output's shape where ONNX shape inference cannot infer it.
    """
    consts = consts or {}
    node = helper.make_node(op, [*feeds, *consts], ["out"], **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if out_shape is None:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for target in ("davinci-core", MESH2X2):  # one core, and tiles spread over four
        got = npucc.compile(model, target=target, beam_width=4).run(feeds)["out"]
        assert got.shape == ref.shape
        err = float(np.max(np.abs(got - ref)))
        assert err <= 1e-4 * float(np.max(np.abs(ref))) + 1e-6, (op, target, err)


def normal(*shape, scale=1.0):
    """Seeded float32 standard normal values."""
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize(
    ("op", "low", "high"),
    [
        ("Sin", -10, 10),
        ("Cos", -10, 10),
        ("Tan", -1.4, 1.4),
        ("Asin", -1, 1),
        ("Acos", -1, 1),
        ("Atan", -20, 20),
        ("Sinh", -5, 5),
        ("Cosh", -5, 5),
        ("Asinh", -50, 50),
        ("Acosh", 1, 50),
        ("Atanh", -0.99, 0.99),
        ("Floor", -5, 5),
        ("Ceil", -5, 5),
        ("Sign", -2, 2),
    ],
)
def test_math_unary(op, low, high):
    x = RNG.uniform(low, high, (2, 3, 5, 7)).astype(np.float32)
    if op == "Sign":
        x[0, 0, 0, :3] = 0.0
    run(op, {"x": x})


def test_round_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4999, -3.7, 7.2, 1e7 + 1], np.float32)
    run("Round", {"x": x})


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("ThresholdedRelu", {"alpha": 0.3}),
        ("Shrink", {"lambd": 0.4, "bias": 0.25}),
        ("Swish", {"alpha": 0.7}),
    ],
)
def test_thresholds_and_swish(op, attrs):
    run(op, {"x": normal(2, 3, 5, 7)}, attrs, opset=24)


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_broadcast(fmod):
    x, y = normal(4, 6, scale=5.0), normal(6, scale=2.0) + 0.1
    run("Mod", {"x": x, "y": y}, {"fmod": fmod}, opset=28 if fmod == 0 else 13)


@pytest.mark.parametrize("axes", [[1], [0, 2], []])
def test_reduce_prod(axes):
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    consts = {"axes": np.array(axes, np.int64)} if axes else {}
    run("ReduceProd", {"x": x}, {"keepdims": 1}, consts, opset=18)


@pytest.mark.parametrize(("axis", "p"), [(1, 2), (-1, 1), (0, 2)])
def test_lp_normalization(axis, p):
    x = normal(3, 4, 5)
    x[0, :, 0] = 0.0  # a zero vector along axis 1 (and partly along the others)
    run("LpNormalization", {"x": x}, {"axis": axis, "p": p})


@pytest.mark.parametrize(
    ("shape", "attrs"),
    [
        ((1, 3, 9, 9), {"kernel_shape": [3, 3], "p": 2}),
        ((1, 2, 8, 8), {"kernel_shape": [2, 3], "p": 3, "strides": [2, 1], "pads": [1, 0, 1, 1]}),
        ((1, 2, 7, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"}),
        ((1, 2, 7, 9), {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "dilations": [2, 2]}),
        ((1, 2, 9), {"kernel_shape": [3], "p": 1}),
        ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 2]}),
    ],
)
def test_lp_pool(shape, attrs):
    run("LpPool", {"x": normal(*shape)}, attrs)


@pytest.mark.parametrize(("axis", "opset"), [(-1, 13), (0, 13), (1, 13), (1, 11)])
def test_hardmax_first_maximum(axis, opset):
    x = np.round(normal(3, 4, 5)).astype(np.float32)  # many ties: the first maximum wins
    run("Hardmax", {"x": x}, {"axis": axis}, opset=opset)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize(
    ("op", "axis", "n"), [("CumSum", 1, 13), ("CumSum", 0, 1), ("CumProd", 2, 6)]
)
def test_cumulative(op, axis, n, exclusive, reverse):
    shape = [3, 4, 6]
    shape[axis] = n
    x = normal(*shape) if op == "CumSum" else RNG.uniform(0.5, 1.5, shape).astype(np.float32)
    consts = {"axis": np.array(axis, np.int64)}
    run(op, {"x": x}, {"exclusive": exclusive, "reverse": reverse}, consts, opset=26)


def test_new_ops_print_and_parse_back_at_every_level(tmp_path):
    nodes = [
        helper.make_node("Sin", ["x"], ["s"]),
        helper.make_node("Round", ["s"], ["r"]),
        helper.make_node("Mod", ["x", "d"], ["m"], fmod=1),
        helper.make_node("Add", ["r", "m"], ["a"]),
        helper.make_node("ReduceProd", ["a"], ["y"], axes=[1], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(np.full(4, 0.7, np.float32), "d")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    npucc.compile(model, dump_dir=tmp_path)
    texts = [f.read_text() for f in sorted(tmp_path.iterdir())]
    assert any("op=round" in t for t in texts) and any("op=prod" in t for t in texts)
    for text in texts:
        assert render(parse_ir(text)[1]) == text


def test_group_normalization():
    consts = {"scale": normal(6) + 1, "bias": normal(6)}
    x = normal(2, 6, 4, 5)
    run("GroupNormalization", {"x": x}, {"num_groups": 3}, consts, 21, x.shape)


def test_mean_variance_normalization():
    x = normal(2, 3, 4, 5, scale=3.0)
    run("MeanVarianceNormalization", {"x": x}, {"axes": [0, 2]}, opset=13, out_shape=x.shape)


@pytest.mark.parametrize(("axis", "shape"), [(0, (2, 4)), (0, (5, 2)), (1, (2, 6)), (-1, (3, 4))])
def test_gather_elements(axis, shape):
    x = normal(3, 4)
    indices = RNG.integers(-3 if axis == 0 else -4, 3 if axis == 0 else 4, shape)
    run("GatherElements", {"x": x}, {"axis": axis}, {"indices": indices.astype(np.int64)}, 13)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_swiglu(alpha):
    node = helper.make_node("SwiGLU", ["a", "b"], ["out"], alpha=alpha)
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 8]) for n in "ab"],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 28)])
    a, b = normal(3, 8), normal(3, 8)
    got = npucc.compile(model).run({"a": a, "b": b})["out"]
    want = a / (1 + np.exp(-alpha * a)) * b  # onnxruntime has no SwiGLU kernel yet
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gather_of_scattered_indices_selects_with_a_one_hot():
    indices = RNG.integers(-5, 5, (30, 20)).astype(np.int64)  # hundreds of short runs
    run("Gather", {"x": normal(2, 5, 3)}, {"axis": 1}, {"indices": indices}, 13)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_losses_with_weights_and_ignored_targets(op, reduction):
    target = RNG.integers(0, 4, (3, 5)).astype(np.int64)
    consts = {"target": target, "weight": RNG.uniform(0.5, 2.0, 4).astype(np.float32)}
    attrs = {"reduction": reduction, "ignore_index": 2}
    run(op, {"x": normal(3, 4, 5)}, attrs, consts, opset=22)


def test_softmax_cross_entropy_log_prob_output():
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t"], ["loss", "logp"])
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("loss", "logp")],
        [numpy_helper.from_array(RNG.integers(0, 6, 4).astype(np.int64), "t")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    x = normal(4, 6)
    refs = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = npucc.compile(model).run({"x": x})
    for name, ref in zip(("loss", "logp"), refs, strict=True):
        np.testing.assert_allclose(got[name], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [None, 0, -1])
def test_compress_with_a_constant_condition(axis):
    x = normal(3, 5)
    n = x.size if axis is None else x.shape[axis]
    condition = RNG.integers(0, 2, n - 1).astype(bool)  # shorter than the axis: the rest dropped
    condition[0] = True
    attrs = {} if axis is None else {"axis": axis}
    run("Compress", {"x": x}, attrs, {"condition": condition}, 13)
