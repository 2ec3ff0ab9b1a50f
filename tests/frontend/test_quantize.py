"""QuantizeLinear and DequantizeLinear at run time, against onnxruntime (docs/integers.md)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.tools.cli import main

FLOAT, UINT8, INT8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
NUMPY = {UINT8: np.uint8, INT8: np.int8, TensorProto.UINT16: np.uint16, TensorProto.INT16: np.int16}


def _model(nodes, inputs, outputs, inits, opset=21) -> onnx.ModelProto:
    """A model of `nodes`; inputs and outputs as {name: (elem type, shape)}."""
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _compare(model: onnx.ModelProto, x: np.ndarray, **feeds: np.ndarray) -> None:
    """npucc against onnxruntime run op by op: integer outputs bit-exact, float ones close."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no QLinear
    session = ort.InferenceSession(model.SerializeToString(), options)
    feeds["x"] = x
    got = npucc.compile(model).run(feeds)
    for out, want in zip(model.graph.output, session.run(None, feeds), strict=True):
        assert got[out.name].dtype == want.dtype, out.name
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got[out.name], want, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(got[out.name], want, err_msg=out.name)


def _adversarial(scale: np.ndarray, n: int) -> np.ndarray:
    """Values at and next to the ties of x / scale, exact multiples of scale / 2, and noise."""
    rng = np.random.default_rng(3)
    k = rng.integers(-400, 400, n).astype(np.float32)
    ties = (k + np.float32(0.5)) * scale
    near = (ties.view(np.int32) + rng.integers(-2, 3, n).astype(np.int32)).view(np.float32)
    noise = rng.uniform(-200, 200, n).astype(np.float32) * scale
    return np.concatenate([ties, near, k * (scale / np.float32(2)), noise]).astype(np.float32)


@pytest.mark.parametrize("elem", [*NUMPY, None], ids=["u8", "i8", "u16", "i16", "default"])
def test_quantize_rounds_ties_and_saturates_as_onnxruntime(elem):
    scale = np.float32(0.037)
    signed = elem in (INT8, TensorProto.INT16)
    zero = {} if elem is None else {"z": np.asarray(-7 if signed else 11, NUMPY[elem])}
    node = helper.make_node("QuantizeLinear", ["x", "s", *zero], ["y"])
    x = _adversarial(scale, 1000)
    out = {"y": (elem or UINT8, [x.size])}
    _compare(_model([node], {"x": (FLOAT, [x.size])}, out, {"s": scale, **zero}), x)


def test_per_axis_quantize_and_dequantize_round_trip():
    scales = np.array([0.02, 0.5, 1 / 3], np.float32)
    zeros = np.array([0, 100, 255], np.uint8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=-2),
    ]
    x = _adversarial(np.float32(0.1), 30).reshape(2, 3, 20)
    outs = {"q": (UINT8, [2, 3, 20]), "y": (FLOAT, [2, 3, 20])}
    _compare(_model(nodes, {"x": (FLOAT, [2, 3, 20])}, outs, {"s": scales, "z": zeros}), x)


@pytest.mark.parametrize("elem", [UINT8, INT8], ids=["uint8", "int8"])
def test_qdq_around_a_conv_with_per_channel_weights(elem):
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=0),
        helper.make_node("Conv", ["xd", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "cs", "z"], ["y"]),
    ]
    inits = {"s": np.float32(0.02), "z": np.asarray(128 if elem == UINT8 else 3, NUMPY[elem]),
             "wq": w, "ws": np.array([0.01, 0.02, 0.005, 0.03], np.float32),
             "cs": np.float32(0.05)}  # fmt: skip
    shape = [1, 3, 6, 6]
    outs = {"xq": (elem, shape), "c": (FLOAT, [1, 4, 6, 6]), "y": (elem, [1, 4, 6, 6])}
    x = rng.standard_normal(shape).astype(np.float32)
    _compare(_model(nodes, {"x": (FLOAT, shape)}, outs, inits, opset=13), x)  # weights folded


def test_qdq_matmul_keeps_the_quantized_tensor_inside():
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("MatMul", ["xd", "w"], ["y"]),
    ]
    inits = {"s": np.float32(0.03), "z": np.int8(-5), "w": rng.standard_normal((8, 5), np.float32)}
    x = rng.standard_normal((4, 8)).astype(np.float32)
    _compare(_model(nodes, {"x": (FLOAT, [4, 8])}, {"y": (FLOAT, [4, 5])}, inits), x)


def test_a_value_rounding_to_zero_dequantizes_to_plus_zero():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Reciprocal", ["d"], ["y"]),  # 1 / -0.0 would be -inf
    ]
    inits = {"s": np.float32(0.5), "z": np.int8(0)}
    model = _model(nodes, {"x": (FLOAT, [3])}, {"y": (FLOAT, [3])}, inits)
    _compare(model, np.array([-0.1, -0.0, 0.2], np.float32))


def test_run_time_per_axis_scale_and_zero_point():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0),
    ]
    inputs = {"x": (FLOAT, [3, 40]), "s": (FLOAT, [3]), "z": (INT8, [3])}
    model = _model(nodes, inputs, {"q": (INT8, [3, 40]), "y": (FLOAT, [3, 40])}, {})
    scales = np.array([0.02, 0.5, 1 / 3], np.float32)
    x = _adversarial(np.float32(0.1), 30).reshape(3, 40)
    _compare(model, x, s=scales, z=np.array([0, -100, 27], np.int8))


@pytest.mark.parametrize("case", ["random", "positive", "zeros"])
def test_dynamic_quantize_matches_onnxruntime(case):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero"])
    outs = {"y": (UINT8, [2, 50]), "scale": (FLOAT, []), "zero": (UINT8, [])}
    x = np.random.default_rng(8).standard_normal((2, 50)).astype(np.float32) * 3
    x = {"random": x, "positive": np.abs(x) + 1, "zeros": np.zeros_like(x)}[case]
    _compare(_model([node], {"x": (FLOAT, [2, 50])}, outs, {}), x)


def test_a_float16_scale_is_refused_on_the_cli(tmp_path, capsys):
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    model = _model([node], {"x": (UINT8, [4])}, {"y": (TensorProto.FLOAT16, [4])},
                   {"s": np.float16(0.5)})  # fmt: skip
    path = tmp_path / "dq.onnx"
    onnx.save(model, str(path))
    assert main([str(path), "-o", str(tmp_path / "dq.cmd")]) == 2
    err = capsys.readouterr().err
    want = "npucc: error: node 'DequantizeLinear_0' (DequantizeLinear): npucc dequantizes "
    assert err == want + "8-, 16- and 32-bit integers to float32\n"


def test_quantize_and_integer_constants_beyond_2048_are_refused_at_fp16():
    quant = _model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
        {"x": (FLOAT, [8])}, {"y": (UINT8, [8])},
        {"s": np.float32(0.1), "z": np.uint8(3)},
    )  # fmt: skip
    npucc.compile(quant)  # fp32: runs as float32 arithmetic
    with pytest.raises(npucc.NpuccError, match="QuantizeLinear at fp16: x / scale is rounded"):
        npucc.compile(quant, precision="fp16")
    int16 = TensorProto.INT16
    wide = _model(
        [helper.make_node("Add", ["x", "c"], ["out"])],
        {"x": (int16, [4])}, {"out": (int16, [4])},
        {"c": np.array([1, 2, 3, 3001], np.int16)},
    )  # fmt: skip
    got = npucc.compile(wide).run({"x": np.zeros(4, np.int16)})["out"]
    assert got.tolist() == [1, 2, 3, 3001]
    with pytest.raises(npucc.NpuccError, match=r"holds 3001: .* float16 \(at fp16\), exact"):
        npucc.compile(wide, precision="fp16")
