"""import-int8 (npucc.frontend.onnx_qdq): hand-built QDQ models compile at int8 and equal
onnxruntime's run of the same model element for element."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.checking import run_onnxruntime
from npucc.errors import NpuccError


class _Qdq:
    """A QDQ model under construction: float input x quantized, layers, float output y."""

    def __init__(self, shape: list[int], scale: float = 0.05, zp: int = 3) -> None:
        self.inits: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.shape = shape
        self.x = self.dq(self.q("x", scale, zp), scale, zp)

    def const(self, name: str, data: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def q(self, x: str, scale: float, zp: int) -> str:
        s = self.const(f"s{len(self.inits)}", np.array(scale, np.float32))
        z = self.const(f"z{len(self.inits)}", np.array(zp, np.int8))
        return self.node("QuantizeLinear", [x, s, z])

    def dq(self, x: str, scale, zp, axis: int | None = None) -> str:
        s = self.const(f"s{len(self.inits)}", np.asarray(scale, np.float32))
        z = self.const(f"z{len(self.inits)}", np.asarray(zp, getattr(zp, "dtype", np.int8)))
        attrs = {} if axis is None else {"axis": axis}
        return self.node("DequantizeLinear", [x, s, z], **attrs)

    def requant(self, x: str, scale: float, zp: int) -> str:
        return self.dq(self.q(x, scale, zp), scale, zp)

    def model(self, y: str, y_shape: list[int]) -> onnx.ModelProto:
        graph = helper.make_graph(
            [*self.nodes, helper.make_node("Identity", [y], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
            initializer=self.inits,
        )  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv(m: _Qdq, x: str, cin: int, cout: int, rng: np.random.Generator, **attrs) -> str:
    """A per-channel int8 conv with an int32 bias (the constant DequantizeLinear of int32)."""
    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.001, 0.01, cout).astype(np.float32)
    b = rng.integers(-2000, 2000, cout).astype(np.int32)
    wq = m.dq(m.const(f"w{len(m.inits)}", w), w_scale, np.zeros(cout, np.int8), axis=0)
    bq = m.dq(m.const(f"b{len(m.inits)}", b), 0.05 * w_scale, np.zeros(cout, np.int32), axis=0)
    return m.node("Conv", [x, wq, bq], kernel_shape=[3, 3], **attrs)


def _check(model: onnx.ModelProto, shape: list[int], seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    program = npucc.compile(model, precision="int8")
    result = program.execute({"x": x})
    assert result.makespan == program.stats["predicted_makespan"]
    expected = run_onnxruntime(model, {"x": x})["y"]
    np.testing.assert_array_equal(result.outputs["y"], expected)
    return expected


def test_a_padded_conv_with_relu_saturation_and_an_int32_bias_equals_onnxruntime():
    """The input's zero point (3) pads the conv (its 0.0); the Relu's bound is the output's
    zero point; the wide input range saturates the output at 127."""
    rng = np.random.default_rng(0)
    m = _Qdq([1, 4, 9, 9])
    y = m.node("Relu", [_conv(m, m.x, 4, 8, rng, pads=[1, 1, 1, 1])])
    out = m.requant(y, 0.02, -20)
    expected = _check(m.model(out, [1, 8, 9, 9]), [1, 4, 9, 9])
    steps = np.rint(expected / 0.02) - 20
    assert steps.min() == -20 and steps.max() == 127  # both bounds reached: the test can fail


@pytest.mark.parametrize("seed", [0, 1])
def test_add_average_pool_and_softmax_equal_onnxruntime(seed):
    """Add dequantizes both sides and quantizes the float sum; a 2x2 average of one scale lands
    on exact .5 ties (its rounding follows onnxruntime's summation order: columns of rows);
    softmax computes in float32 and quantizes."""
    rng = np.random.default_rng(seed)
    m = _Qdq([1, 4, 8, 8])
    a = m.requant(_conv(m, m.x, 4, 4, rng, pads=[1, 1, 1, 1]), 0.03, -7)
    total = m.requant(m.node("Add", [m.x, a]), 0.04, 1)
    pooled = m.requant(m.node("AveragePool", [total], kernel_shape=[2, 2], strides=[2, 2]), 0.04, 1)
    mean = m.requant(m.node("GlobalAveragePool", [pooled]), 0.04, 1)
    flat = m.requant(m.node("Flatten", [mean], axis=1), 0.04, 1)
    probs = m.requant(m.node("Softmax", [flat], axis=-1), 1 / 256, -128)
    _check(m.model(probs, [1, 4]), [1, 4, 8, 8], seed)
    _check(m.model(pooled, [1, 4, 4, 4]), [1, 4, 8, 8], seed)
    summed = np.rint(_check(m.model(total, [1, 4, 8, 8]), [1, 4, 8, 8], seed) / 0.04)
    windows = summed.reshape(4, 4, 2, 4, 2).sum(axis=(2, 4))
    assert np.sum(windows % 4 == 2) >= 8  # exact .5 ties: the test can fail on their rounding


def test_a_float_op_between_quantizations_has_no_int8_form():
    m = _Qdq([1, 16])
    y = m.requant(m.node("Sigmoid", [m.x]), 1 / 256, -128)
    with pytest.raises(NpuccError, match=r"\(Sigmoid\): Sigmoid has no int8 form \(docs/"):
        npucc.compile(m.model(y, [1, 16]), precision="int8")


def test_a_strided_depthwise_conv_in_dense_blocks_equals_onnxruntime():
    """A 32-channel depthwise conv (stride 2, pads 0,1 as Keras') runs as two dense groups of
    16 channels, zero off the diagonal: the same int32 sums."""
    rng = np.random.default_rng(3)
    m = _Qdq([1, 32, 9, 9], 0.05, -10)
    w = rng.integers(-127, 128, (32, 1, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.01, 0.05, 32).astype(np.float32)
    wq = m.dq(m.const("wd", w), w_scale, np.zeros(32, np.int8), axis=0)
    y = m.node("Conv", [m.x, wq], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1], group=32)
    out = m.requant(y, 0.1, 4)
    model = m.model(out, [1, 32, 4, 4])
    _check(model, [1, 32, 9, 9])
    stream = npucc.compile(model, precision="int8").stream
    assert stream.count("CUBE mmad") == 2  # one per block of 16 channels
