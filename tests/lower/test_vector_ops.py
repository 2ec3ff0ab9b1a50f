"""End to end: one-op ONNX models compiled by npucc, run in its interpreter, vs onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc

OPSET = 17


def make_model(op, inputs, out_shape, attrs=None, consts=None):
    """A model with one `op` node over graph inputs `inputs` {name: shape} and initializers."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    node = helper.make_node(op, names, ["out"], **(attrs or {}))
    graph = helper.make_graph(
        [node],
        f"{op.lower()}_test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v.astype(np.float32), n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def check(model, seed=0, positive=False):
    """Compile with npucc, run both, and compare within 1e-4 of the reference's scale."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in model.graph.input:
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        x = rng.standard_normal(shape)
        feeds[v.name] = np.asarray(np.abs(x) + 0.5 if positive else x, np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    for target in ("davinci-core", MESH2X2):  # one core, and tiles spread over four
        got = npucc.compile(model, target=target, beam_width=4).run(feeds)["out"]
        assert got.shape == ref.shape
        err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        assert err <= 1e-4 * float(np.max(np.abs(ref))) + 1e-6, err


# ------------------------------------------------------------------------- element-wise

BROADCASTS = [
    ((2, 3, 5, 7), (2, 3, 5, 7)),
    ((2, 3, 5, 7), (3, 1, 1)),
    ((2, 3, 5, 7), (7,)),
    ((1, 5), (4, 1)),
    ((3, 1, 6), (1, 4, 1)),
    ((6,), ()),
]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("a,b", BROADCASTS)
def test_binary(op, a, b):
    out = np.broadcast_shapes(a, b)
    check(make_model(op, {"x": a, "y": b}, out), positive=op == "Div")


def test_binary_const_operand_and_fused_relu():
    rng = np.random.default_rng(1)
    add = helper.make_node("Add", ["x", "bias"], ["t"])
    relu = helper.make_node("Relu", ["t"], ["out"])
    bias = numpy_helper.from_array(rng.standard_normal((4, 1, 1)).astype(np.float32), "bias")
    graph = helper.make_graph(
        [add, relu],
        "add_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 4, 6, 5))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (2, 4, 6, 5))],
        [bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    check(model)


def test_binary_bigger_than_ub():
    shape = (1, 3, 150, 200)  # 90000 elements > 65536 (all of UB)
    check(make_model("Add", {"x": shape, "y": (3, 1, 200)}, shape))


def test_relu():
    check(make_model("Relu", {"x": (2, 3, 9, 11)}, (2, 3, 9, 11)))


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.7), (0.0, 6.0)])
def test_clip(lo, hi):
    consts = {"lo": np.array(lo), "hi": np.array(hi)}
    check(make_model("Clip", {"x": (2, 5, 7)}, (2, 5, 7), consts=consts))


# ------------------------------------------------------------------------- pooling

POOLS = [
    # shape, attrs
    ((2, 3, 9, 11), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 4, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    ((1, 2, 10, 7), dict(kernel_shape=[3, 2], strides=[1, 2], pads=[0, 1, 2, 1])),
    ((2, 3, 10, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((1, 2, 12, 9), dict(kernel_shape=[2, 3], strides=[3, 2], pads=[1, 0, 0, 1], ceil_mode=1)),
    ((1, 3, 13, 13), dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2])),
]


@pytest.mark.parametrize("shape,attrs", POOLS)
def test_maxpool(shape, attrs):
    y = onnx.helper.make_node("MaxPool", ["x"], ["out"], **attrs)
    check(_pool_model(y, shape))


def test_maxpool_dilated():
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[2, 2, 2, 2], dilations=[2, 2])
    check(_pool_model(helper.make_node("MaxPool", ["x"], ["out"], **attrs), (1, 2, 12, 12)))


AVGPOOLS = [(*case, include_pad) for case in POOLS for include_pad in (0, 1)]


@pytest.mark.parametrize("shape,attrs,include_pad", AVGPOOLS)
def test_avgpool(shape, attrs, include_pad):
    node = helper.make_node("AveragePool", ["x"], ["out"], count_include_pad=include_pad, **attrs)
    check(_pool_model(node, shape))


POOLS_3D = [
    # shape, attrs (count_include_pad for AveragePool comes from the test)
    ((1, 2, 6, 7, 8), dict(kernel_shape=[2, 2, 2])),
    ((2, 3, 7, 9, 8), dict(kernel_shape=[3, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 1, 1, 0])),
    ((1, 1, 12, 12, 12), dict(kernel_shape=[3, 3, 3], strides=[3, 3, 3], dilations=[2, 2, 2],
                              ceil_mode=1)),
    ((1, 2, 9, 8, 10), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 3], pads=[1, 1, 0, 0, 1, 1],
                            ceil_mode=1)),
]  # fmt: skip


@pytest.mark.parametrize("shape,attrs", POOLS_3D)
@pytest.mark.parametrize("op,include_pad", [("MaxPool", None), ("AveragePool", 0),
                                            ("AveragePool", 1)])  # fmt: skip
def test_pool_3d(shape, attrs, op, include_pad):
    extra = {} if include_pad is None else {"count_include_pad": include_pad}
    check(_pool_model(helper.make_node(op, ["x"], ["out"], **attrs, **extra), shape, opset=19))


def test_maxpool_bigger_than_ub():
    node = helper.make_node("MaxPool", ["x"], ["out"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    check(_pool_model(node, (2, 8, 64, 80)))  # 81920 elements


def _pool_model(node, shape, opset=OPSET):
    graph = helper.make_graph(
        [node],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize(
    "shape", [(2, 3, 5, 7), (1, 16, 1, 1), (1, 2, 200, 200), (2, 3, 4, 5, 6), (2, 3, 7)]
)
def test_global_pool(op, shape):
    check(make_model(op, {"x": shape}, (*shape[:2], *(1,) * (len(shape) - 2))))


# ------------------------------------------------------------------------- softmax, LRN


@pytest.mark.parametrize(
    "shape,axis", [((2, 10), 1), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), -1), ((3, 70000), 1)]
)
def test_softmax(shape, axis):
    check(make_model("Softmax", {"x": shape}, shape, {"axis": axis}))


@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("shape", [(2, 7, 5, 6), (1, 3, 4, 4)])
def test_lrn(size, shape):
    attrs = dict(size=size, alpha=1e-2, beta=0.75, bias=2.0)
    check(make_model("LRN", {"x": shape}, shape, attrs))


# ------------------------------------------------------------------------- layout


@pytest.mark.parametrize(
    "shapes,axis",
    [
        ([(2, 3, 4, 5), (2, 2, 4, 5), (2, 1, 4, 5)], 1),
        ([(1, 3), (4, 3)], 0),
        ([(2, 3, 4), (2, 3, 7)], -1),
    ],
)
def test_concat(shapes, axis):
    inputs = {f"x{i}": s for i, s in enumerate(shapes)}
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    check(make_model("Concat", inputs, out, {"axis": axis}))


def test_concat_with_constant():
    rng = np.random.default_rng(2)
    consts = {"c": rng.standard_normal((2, 2, 3)).astype(np.float32)}
    check(make_model("Concat", {"x": (2, 5, 3)}, (2, 7, 3), {"axis": 1}, consts))


@pytest.mark.parametrize(
    "shape,perm",
    [((2, 3, 4, 5), (0, 2, 3, 1)), ((30, 50), (1, 0)), ((4, 5, 6), (2, 1, 0)), ((2, 3, 4), None)],
)
def test_transpose(shape, perm):
    out = tuple(reversed(shape)) if perm is None else tuple(shape[p] for p in perm)
    attrs = {} if perm is None else {"perm": list(perm)}
    check(make_model("Transpose", {"x": shape}, out, attrs))


def test_transpose_bigger_than_l1():
    check(make_model("Transpose", {"x": (3, 300, 400)}, (400, 3, 300), {"perm": [2, 0, 1]}))
