"""The frontend's host fallback: which nodes become `host` layers, and what they hold."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.helper as h
import onnxruntime as ort
import pytest
from onnx import TensorProto as T

import npucc
from npucc.errors import NpuccError
from npucc.ir.graph_text import graph_from_text
from npucc.transforms.graph_pipeline import import_model


def _conv_model() -> onnx.ModelProto:
    """A Conv whose weights are a run-time input: legalize-onnx refuses it (a limitation)."""
    nodes = [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node("Conv", ["r", "w"], ["c"], name="conv"),
        h.make_node("Neg", ["c"], ["y"], name="neg"),
    ]
    graph = h.make_graph(
        nodes, "conv",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 6, 6]),
         h.make_tensor_value_info("w", T.FLOAT, [4, 3, 3, 3])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 4, 4])],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_a_limitation_of_a_lowered_operator_falls_back_too():
    with pytest.raises(NpuccError, match="node 'conv'"):
        import_model(_conv_model())
    program = npucc.compile(_conv_model(), fallback="host")
    assert [s["node"] for s in program.stats["host_segments"]] == ["conv"]
    rng = np.random.default_rng(0)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 6, 6), (4, 3, 3, 3)))
    ref = ort.InferenceSession(
        _conv_model().SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x, "w": w})
    np.testing.assert_allclose(program.run({"x": x, "w": w})["y"], ref[0], rtol=1e-5, atol=1e-5)


def test_the_host_layer_holds_the_node_and_prints_back():
    from_model = onnx.helper.make_model(
        h.make_graph(
            [h.make_node("Det", ["x"], ["d"], name="det"), h.make_node("Neg", ["d"], ["y"])],
            "det", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 3])],
            [h.make_tensor_value_info("y", T.FLOAT, [2])],
        ),
        opset_imports=[h.make_opsetid("", 13)],
    )  # fmt: skip
    graph = import_model(from_model, fallback="host")
    (layer,) = [x for x in graph.layers if x.op == "host"]
    spec = json.loads(layer.attrs["host"])
    assert (spec["op"], spec["domain"], spec["version"], spec["opset"]) == ("Det", "", 13, 13)
    assert spec["in_types"] == ["f32"] and spec["inputs"] == ["in0"] and layer.src == ("det",)
    assert graph_from_text(graph.to_text()).to_text() == graph.to_text()
    x = np.random.default_rng(0).standard_normal((2, 3, 3)).astype(np.float32)
    out = npucc.compile(from_model, fallback="host").run({"x": x})["y"]
    np.testing.assert_allclose(out, -np.linalg.det(x), rtol=1e-5)


def test_an_unknown_fallback_is_an_error():
    with pytest.raises(NpuccError, match="fallback must be 'error' or 'host'"):
        npucc.compile(_conv_model(), fallback="cpu")
