"""fuse-shortcut: a projection shortcut's 1x1 conv becomes more K of the 1x1 conv that adds
it; the compiled bottleneck agrees with onnxruntime and moves fewer DDR bytes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.target import load_target
from npucc.transforms.graph_pipeline import import_model

RNG = np.random.default_rng(3)


def _bottleneck(c: int, mid: int, co: int, hw: int, stride: int, act: bool = False):
    """x -> 1x1 -> 3x3 (stride) -> 1x1, plus a 1x1 (stride) projection of x, added, relu
    (`act`: the projection ends in a relu, which keeps it from being fused)."""
    inits, nodes = [], []

    def w(name: str, *shape: int) -> str:
        scale = np.float32(1 / np.sqrt(np.prod(shape[1:])))
        data = (RNG.standard_normal(shape) * scale).astype(np.float32)
        inits.append(numpy_helper.from_array(data, name))
        return name

    def conv(out: str, x: str, wt: str, k: int, s: int, relu: bool) -> None:
        bias = w(f"{wt}_b", int(inits[-1].dims[0]))
        nodes.append(
            helper.make_node(
                "Conv", [x, wt, bias], [out + ("_" if relu else "")], kernel_shape=[k, k],
                pads=[k // 2] * 4, strides=[s, s],
            )
        )  # fmt: skip
        if relu:
            nodes.append(helper.make_node("Relu", [out + "_"], [out]))

    conv("a", "x", w("w1", mid, c, 1, 1), 1, 1, True)
    conv("b", "a", w("w2", mid, mid, 3, 3), 3, stride, True)
    conv("m", "b", w("w3", co, mid, 1, 1), 1, 1, False)
    conv("p", "x", w("wp", co, c, 1, 1), 1, stride, act)
    nodes.append(helper.make_node("Add", ["m", "p"], ["s"]))
    nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    oh = (hw - 1) // stride + 1
    graph = helper.make_graph(
        nodes,
        "bottleneck",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, co, oh, oh])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, target: str) -> npucc.Program:
    program = npucc.compile(model, target=target)
    x = RNG.standard_normal(
        (1, *[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:])
    ).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    result = program.execute({"x": x})
    got = result.outputs["y"]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max() + 1e-6
    assert result.makespan == program.stats["predicted_makespan"]
    return program


@pytest.mark.parametrize("stride", [1, 2])
def test_a_projection_shortcut_is_more_k_of_the_last_conv(stride):
    # 64 -> 256 channels at 40 x 40: the shortcut's output (400 KB at stride 2, more than a
    # quarter of L1) would go through DDR twice; fused, it is neither written nor read
    fused = _run(_bottleneck(64, 32, 256, 40, stride), "davinci-core")
    assert fused.stats["fuse-shortcut.fused"] == 1
    kept = _run(_bottleneck(64, 32, 256, 40, stride, act=True), "davinci-core")
    assert kept.stats["fuse-shortcut.fused"] == 0
    roof_fused, roof_kept = fused.stats["roofline"], kept.stats["roofline"]
    assert roof_fused["macs"] == roof_kept["macs"]
    out = 256 * (40 // stride) ** 2 * 4
    # NOTE: less the fused conv's first image, which no longer stays in L1 (51 KB, twice)
    assert roof_fused["ddr_bytes"] < roof_kept["ddr_bytes"] - out


def test_the_target_neutral_graph_keeps_its_shortcut_conv():
    # import_model is what HyperCut plans meshes on: no one-core rewrite
    graph = import_model(_bottleneck(64, 32, 256, 40, 1))
    assert sum(layer.op == "conv2d" for layer in graph.layers) == 4


def test_a_shortcut_that_can_stay_in_l1_or_on_a_mesh_is_kept():
    assert _run(_bottleneck(64, 32, 256, 28, 2), "davinci-core").stats["fuse-shortcut.fused"] == 0
    mesh = load_target("mesh8x8")
    program = _run(_bottleneck(16, 8, 32, 8, 2), mesh.name)
    assert program.stats["fuse-shortcut.fused"] == 0
