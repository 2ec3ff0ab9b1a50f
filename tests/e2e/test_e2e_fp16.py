"""End to end at fp16: every shipped model and a light-zoo model within the fp16 tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import npucc
from npucc.checking import (
    compare,
    fp16_reference,
    fp16_rtol,
    random_inputs,
    randomize_weights,
    reduction_length,
    run_onnxruntime,
)
from npucc.frontend.onnx_import import load_model

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "models").glob("*.onnx"))
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
INPUT_SHAPES = {"mlp.onnx": {"x": (2, 64)}}


def check_fp16(model: onnx.ModelProto) -> None:
    """Compile at fp16, run, compare with onnxruntime's float32 run (the fp16 tolerance) and,
    where it runs, its fp16 run (the same tolerance); predicted makespan = interpreted."""
    program = npucc.compile(model, precision="fp16")
    assert program.target.dtype == "f16"
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    rtol = fp16_rtol(reduction_length(model))
    for c in compare(result.outputs, run_onnxruntime(model, inputs), rtol):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
        assert c.rel > 2.0**-24, "an fp16 program that matches float32 exactly is suspicious"
    half = fp16_reference(model, inputs)
    if isinstance(half, dict):
        assert all(c.ok for c in compare(result.outputs, half, rtol))
    assert result.makespan == program.stats["predicted_makespan"]


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_shipped_model_at_fp16(path: Path) -> None:
    check_fp16(load_model(path, INPUT_SHAPES.get(path.name)))


def test_light_squeezenet_at_fp16_with_random_weights() -> None:
    check_fp16(randomize_weights(load_model(LIGHT / "light_squeezenet.onnx"), seed=0))


def _unary(op: str, shape: tuple[int, ...], **attrs) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_a_zero_norm_and_a_tanh_gelu_at_fp16() -> None:
    x = np.array([[1, 2, 0], [3, 4, 0]], np.float32)
    y = npucc.compile(_unary("LpNormalization", (2, 3), axis=0), precision="fp16").run({"x": x})
    np.testing.assert_allclose(y["y"], [[0.3162, 0.4472, 0], [0.9487, 0.8944, 0]], atol=1e-3)
    assert not np.isnan(y["y"]).any()  # 0 / 0 is 0, not a clip to a float32-only tiny
    gelu = _unary("Gelu", (64,), approximate="tanh")
    x = np.linspace(-4, 4, 64, dtype=np.float32)
    got = npucc.compile(gelu, precision="fp16").run({"x": x})["y"]
    ref = run_onnxruntime(gelu, {"x": x})["y"]
    assert np.abs(got - ref).max() <= fp16_rtol(1) * np.abs(ref).max()
