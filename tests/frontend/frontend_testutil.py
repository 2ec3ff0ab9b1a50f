"""Helpers of the frontend tests: model paths, a tiny-model builder, the ORT comparison."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from frontend_npeval import evaluate
from onnx import TensorProto, helper, numpy_helper

from npucc.errors import NpuccError
from npucc.ir.graph import Graph
from npucc.transforms.graph_pipeline import import_model

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "models").glob("*.onnx"))
LIGHT = sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("light_*.onnx"))
INPUT_SHAPES = {"mlp.onnx": {"x": (2, 64)}}


def imported(path: Path) -> Graph:
    """The imported graph of a model file: a shipped model's is shared by the tests that only
    read it; a light zoo model's (up to 550 MB of weights) is made afresh and not kept."""
    return _shipped(path) if path in MODELS else import_model(path)


@cache
def _shipped(path: Path) -> Graph:
    return import_model(path, INPUT_SHAPES.get(path.name))


def import_error(model: onnx.ModelProto) -> str:
    """The one-line NpuccError importing `model` raises."""
    with pytest.raises(NpuccError) as info:
        import_model(model)
    message = str(info.value)
    assert "\n" not in message
    return message


def tiny_model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int | str]],
    outputs: list[str],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 13,
) -> onnx.ModelProto:
    """A one-graph float32 model from nodes, input shapes and initializers."""
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return onnx.shape_inference.infer_shapes(model)  # the checker wants output shapes


def assert_matches_onnxruntime(g: Graph, model: onnx.ModelProto | Path, rtol: float = 1e-4):
    """Evaluate `g` with numpy and the model with onnxruntime on the same random inputs."""
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(g.tensors[n].shape).astype(np.float32) for n in g.inputs}
    source = model if isinstance(model, Path) else model.SerializeToString()
    session = ort.InferenceSession(str(source) if isinstance(source, Path) else source)
    expected = session.run(None, feeds)
    del session, source  # not held while numpy evaluates the graph
    got = evaluate(g, feeds)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * float(np.abs(b).max() + 1e-6))
