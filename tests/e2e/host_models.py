"""Small models with an operator npucc refuses today, for the host fallback tests."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as h
from onnx import TensorProto as T
from onnx import numpy_helper as nh


def det_model(size: int = 32, channels: int = 16) -> onnx.ModelProto:
    """conv -> sigmoid (NPU) -> Det (host: npucc only folds Det) -> abs -> log -> mul (NPU)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.3
    inits = [
        nh.from_array(w, "w"),
        nh.from_array(rng.standard_normal(channels).astype(np.float32), "b"),
        nh.from_array(np.array([0.5], np.float32), "s"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Sigmoid", ["c"], ["r"], name="sigmoid"),
        h.make_node("Det", ["r"], ["d"], name="det"),
        h.make_node("Abs", ["d"], ["a"], name="abs"),
        h.make_node("Log", ["a"], ["l"], name="log"),
        h.make_node("Mul", ["l", "s"], ["y"], name="scale"),
    ]
    graph = h.make_graph(
        nodes,
        "det",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 3, size, size])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, channels])],
        inits,
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def fastgelu_model() -> onnx.ModelProto:
    """matmul (NPU) -> com.microsoft.FastGelu with a bias (host) -> matmul (NPU)."""
    rng = np.random.default_rng(1)
    inits = [
        nh.from_array(rng.standard_normal((16, 32)).astype(np.float32) * 0.3, "w1"),
        nh.from_array(rng.standard_normal(32).astype(np.float32) * 0.1, "bias"),
        nh.from_array(rng.standard_normal((32, 8)).astype(np.float32) * 0.3, "w2"),
    ]
    nodes = [
        h.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        h.make_node("FastGelu", ["a", "bias"], ["g"], domain="com.microsoft", name="gelu"),
        h.make_node("MatMul", ["g", "w2"], ["y"], name="mm2"),
    ]
    graph = h.make_graph(
        nodes,
        "fastgelu",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 8])],
        inits,
        value_info=[h.make_tensor_value_info("g", T.FLOAT, [1, 8, 32])],
    )
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    return h.make_model(graph, opset_imports=opsets)
