"""The frontend and the graph rewrites are linear in the number of layers (use lists)."""

from __future__ import annotations

import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from npucc.transforms.graph_pipeline import import_model


def ladder(layers: int) -> onnx.ModelProto:
    """A chain of Add/Mul/Relu/Identity/BatchNormalization on [1, 8] with fan-out: every
    fourth value is read again two steps later."""
    inits = [numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "c")]
    for name, value in (("s", 1.0), ("b", 0.0), ("m", 0.0), ("v", 1.0)):
        inits.append(numpy_helper.from_array(np.full(8, value, np.float32), name))
    nodes, prev, back = [], "x", "x"
    for i in range(layers):
        out = f"t{i}"
        kind = i % 5
        if kind == 0:
            nodes.append(helper.make_node("Add", [prev, back], [out]))
        elif kind == 1:
            nodes.append(helper.make_node("Mul", [prev, "c"], [out]))
        elif kind == 2:
            nodes.append(helper.make_node("Relu", [prev], [out]))
        elif kind == 3:
            nodes.append(helper.make_node("Identity", [prev], [out]))
        else:
            nodes.append(helper.make_node("BatchNormalization", [prev, "s", "b", "m", "v"], [out]))
        if i % 4 == 0:
            back = prev
        prev = out
    graph = helper.make_graph(
        nodes,
        "ladder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _import_seconds(layers: int) -> float:
    model = ladder(layers)
    start = time.perf_counter()
    g = import_model(model)
    seconds = time.perf_counter() - start
    assert len(g.layers) > layers // 2
    return seconds


def test_ten_thousand_layers_import_in_seconds_and_linearly() -> None:
    small = min(_import_seconds(2500) for _ in range(2))
    large = _import_seconds(10_000)
    assert large < 10.0
    # 4x the layers: a linear pipeline takes ~4x (16x if quadratic); 8x leaves room for noise
    assert large / small < 8.0, (small, large)
