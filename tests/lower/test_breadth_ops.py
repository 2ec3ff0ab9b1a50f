"""One-op models of the frontend-breadth operators, compiled, interpreted and compared with ORT."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc


def run(op, inputs, attrs=None, consts=None, opset=18, n_out=1, positive=False, order=None):
    """Build a one-node model, run it with npucc and onnxruntime, compare within 1e-4."""
    consts = consts or {}
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, order or list(inputs) + list(consts), outs, **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in consts.items() if n],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    rng = np.random.default_rng(0)
    feeds = {}
    for name, shape in inputs.items():
        x = rng.standard_normal(shape)
        feeds[name] = np.asarray(np.abs(x) + 0.5 if positive else x, np.float32)
    refs = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for target in ("davinci-core", MESH2X2):  # one core, and tiles spread over four
        got = npucc.compile(model, target=target, beam_width=4).run(feeds)
        for name, ref in zip(outs, refs, strict=True):
            assert got[name].shape == ref.shape
            err = float(np.max(np.abs(got[name] - ref)))
            assert err <= 1e-4 * float(np.max(np.abs(ref))) + 1e-5, (name, err)


X = {"x": (2, 3, 5, 7)}


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("Erf", {}),
        ("Tanh", {}),
        ("Sigmoid", {}),
        ("Exp", {}),
        ("Neg", {}),
        ("Abs", {}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("HardSwish", {}),
        ("LeakyRelu", {"alpha": 0.2}),
        ("LeakyRelu", {"alpha": 1.5}),
        ("Elu", {"alpha": 0.7}),
        ("Selu", {}),
        ("Celu", {"alpha": 2.0}),
        ("Softsign", {}),
        ("Softplus", {}),
        ("Gelu", {}),
        ("Gelu", {"approximate": "tanh"}),
        ("Identity", {}),
    ],
)
def test_activation(op, attrs):
    run(op, X, attrs, opset=20)


@pytest.mark.parametrize("op", ["Sqrt", "Reciprocal", "Log"])
def test_positive_unary(op):
    run(op, X, positive=True)


def test_prelu_and_pow():
    run("PRelu", X, consts={"slope": np.linspace(-1, 1, 5 * 7, dtype=np.float32).reshape(5, 7)})
    run("Pow", X, consts={"p": np.array(2.0, np.float32)})
    run("Pow", {"x": (3, 4), "y": (4,)}, positive=True)


@pytest.mark.parametrize(
    "op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSumExp"]
)
@pytest.mark.parametrize(("axes", "keep"), [((1, 3), 1), ((-1,), 0), ((0, 2), 0)])
def test_reduce(op, axes, keep):
    run(op, X, {"keepdims": keep}, consts={"axes": np.array(axes, np.int64)})


def test_reduce_all_and_long_axis():
    run("ReduceSum", X, {"keepdims": 0})
    run("ReduceMax", {"x": (3, 70000)}, consts={"axes": np.array([1], np.int64)})


def test_softmax_family():
    run("Softmax", X, {"axis": 2}, opset=13)
    run("LogSoftmax", X, {"axis": -1}, opset=13)


def test_layer_norm():
    g, b = np.linspace(0.5, 1.5, 35, dtype=np.float32), np.linspace(-1, 1, 35, dtype=np.float32)
    run("LayerNormalization", X, {"axis": 2}, consts={"g": g.reshape(5, 7), "b": b.reshape(5, 7)})
    run("LayerNormalization", {"x": (4, 768)}, consts={"g": np.ones(768, np.float32)})


def test_instance_norm():
    run(
        "InstanceNormalization",
        X,
        consts={"s": np.arange(3, dtype=np.float32), "b": np.ones(3, np.float32)},
    )


def test_slice_split_gather():
    ints = {"s": [1, -1, 0], "e": [3, -6, 7], "a": [1, 2, 3], "st": [1, -2, 3]}
    run("Slice", X, consts={k: np.array(v, np.int64) for k, v in ints.items()})
    run("Split", X, {"axis": 3}, consts={"split": np.array([2, 4, 1], np.int64)}, n_out=3)
    run("Split", X, {"axis": 1, "num_outputs": 3}, n_out=3)
    run("Gather", X, {"axis": 2}, consts={"i": np.array([[4, 0], [1, 2]], np.int64)})
    run("Gather", {"table": (50, 16)}, consts={"ids": np.array([3, 3, 7, 8, 9, 1], np.int64)})


def test_layout_ops():
    run("Transpose", X, {"perm": [2, 0, 3, 1]})
    run("Squeeze", {"x": (2, 1, 5)}, consts={"a": np.array([1], np.int64)})
    run("Unsqueeze", {"x": (2, 5)}, consts={"a": np.array([0, 3], np.int64)})
    run("Concat", {"a": (2, 3), "b": (2, 4)}, {"axis": -1})
    run("Expand", {"x": (3, 1)}, consts={"s": np.array([2, 3, 4], np.int64)})
    run("Tile", {"x": (2, 3)}, consts={"r": np.array([2, 2], np.int64)})
    run("DepthToSpace", {"x": (1, 8, 2, 3)}, {"blocksize": 2})
    run("SpaceToDepth", {"x": (1, 2, 4, 6)}, {"blocksize": 2})


def test_where_cast_matmul():
    cond = np.tril(np.ones((4, 4), bool))
    consts = {"c": cond, "b": np.full((4, 4), -5.0, np.float32)}
    run("Where", {"a": (2, 4, 4)}, consts=consts, order=["c", "a", "b"])
    run("Cast", X, {"to": TensorProto.FLOAT})
    run("MatMul", {"a": (2, 3, 5, 8), "b": (3, 8, 6)})
    run("MatMul", {"a": (7,), "b": (2, 7, 3)})


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad(mode):
    pads = np.array([0, 1, 2, -1, 0, 0, 1, 3], np.int64)
    run("Pad", X, {"mode": mode}, consts={"p": pads, "v": np.array(1.5, np.float32)}, opset=19)


@pytest.mark.parametrize(
    "attrs",
    [
        {"mode": "nearest"},
        {"mode": "linear"},
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        {"mode": "cubic"},
    ],
)
def test_resize(attrs):
    scales = np.array([1, 1, 2, 1.5], np.float32)
    run("Resize", {"x": (1, 2, 4, 6)}, attrs, consts={"roi": np.zeros(0, np.float32), "s": scales})


TF_CROP = {"coordinate_transformation_mode": "tf_crop_and_resize"}


@pytest.mark.parametrize(
    ("attrs", "roi"),
    [
        ({"mode": "linear"}, [0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8]),  # an unchanged size, cropped
        ({"mode": "nearest", "extrapolation_value": 2.5}, [0, 0, 0.4, 0.6, 1, 1, 1.15, 1.7]),
        ({"mode": "cubic", "extrapolation_value": -1.0}, [0, 0, -0.3, 0.1, 1, 1, 0.9, 1.4]),
        ({"mode": "linear", "axes": [3, 2], "extrapolation_value": 7.0}, [-0.2, 0.1, 0.7, 1.3]),
        ({"mode": "nearest", "axes": [1, 3]}, [0.25, 0.1, 0.75, 0.9]),
    ],
)
def test_resize_tf_crop_and_resize(attrs, roi):
    sizes = [5, 3] if "axes" in attrs else [2, 3, 5, 3]
    consts = {"roi": np.array(roi, np.float32), "": None, "sizes": np.array(sizes, np.int64)}
    run(
        "Resize",
        {"x": (2, 3, 4, 6)},
        {**TF_CROP, **attrs},
        consts=consts,
        order=["x", "roi", "", "sizes"],
    )


def test_resize_tf_crop_and_resize_scales():
    consts = {
        "roi": np.array([0.1, 0.2, 0.8, 0.9], np.float32),
        "s": np.array([2, 0.5], np.float32),
    }
    run("Resize", {"x": (1, 2, 4, 6)}, {**TF_CROP, "axes": [2, 3]}, consts=consts)


@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [2, 2]},
        {"strides": [2, 3], "pads": [1, 0, 1, 1], "output_padding": [1, 0]},
        {"group": 2, "dilations": [2, 1]},
    ],
)
def test_conv_transpose(attrs):
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 2)).astype(np.float32)
    run(
        "ConvTranspose",
        {"x": (1, 4, 5, 6)},
        attrs,
        consts={"w": w, "b": np.arange(3 * attrs.get("group", 1), dtype=np.float32)},
    )


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 0, 1]},
        {"group": 2, "dilations": [2, 1, 2]},
    ],
)
def test_conv_transpose_3d(attrs):
    group = attrs.get("group", 1)
    w = np.random.default_rng(2).standard_normal((4, 3, 3, 2, 2)).astype(np.float32)
    consts = {"w": w, "b": np.arange(3 * group, dtype=np.float32)}
    run("ConvTranspose", {"x": (2, 4, 3, 4, 5)}, attrs, consts=consts)


def test_pool_ceil_follows_onnxruntime():
    attrs = {"kernel_shape": [2, 2], "strides": [3, 3], "pads": [1, 1, 1, 1], "ceil_mode": 1}
    run("MaxPool", {"x": (1, 2, 11, 11)}, attrs)
    run("GlobalMaxPool", X)


def test_trilu_rms_norm_center_crop_pad():
    run("Trilu", {"x": (2, 4, 6)}, {"upper": 0}, consts={"k": np.array(1, np.int64)})
    run(
        "RMSNormalization",
        X,
        {"axis": 2},
        consts={"s": np.linspace(0.5, 2, 35, dtype=np.float32).reshape(5, 7)},
        opset=23,
    )
    crop = {"s": np.array([5, 9], np.int64)}
    run("CenterCropPad", {"x": (3, 8, 5)}, {"axes": [1, 2]}, consts=crop)


def test_attention_op():
    q, kv = {"q": (2, 4, 6, 8)}, {"k": (2, 2, 10, 8), "v": (2, 2, 10, 8)}
    run("Attention", {**q, **kv}, {"is_causal": 1}, opset=23)


def test_matmul_by_a_shared_weight_is_one_product():
    """[197, 1, K] @ W[K, N] (a transposed token layout) is as many tile ops as [1, 197, K] @ W:
    the batches of A become rows of one product instead of 197 one-row products."""
    w = np.random.default_rng(2).standard_normal((64, 96)).astype(np.float32)
    run("MatMul", {"a": (45, 1, 64)}, consts={"w": w})
    run("MatMul", {"a": (3, 5, 64)}, consts={"w": w[None]})  # a [1, K, N] weight too
    counts = []
    for shape in ((45, 1, 64), (1, 45, 64)):
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "w"], ["y"])],
            "t",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, (*shape[:2], 96))],
            [numpy_helper.from_array(w, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        counts.append(npucc.compile(model).stats["tile_ops"])
    assert counts[0] == counts[1]
