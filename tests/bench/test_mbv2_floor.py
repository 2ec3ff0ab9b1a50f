"""bench/mbv2_floor.py: the tail weights a cut counts, and bounds below a real schedule's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.compiler import LEVEL_PASSES, compile_until
from npucc.target import load_target

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import mbv2_floor  # noqa: E402


def _chain() -> onnx.ModelProto:
    """Three 1x1 convs (a, b, c), a global average pool and a gemm (fc) on a 7x7 image."""
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for name, cin, cout in (("a", 8, 16), ("b", 16, 16), ("c", 16, 16)):
        w = rng.standard_normal((cout, cin, 1, 1)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"{name}.w"))
        nodes.append(helper.make_node("Conv", [x, f"{name}.w"], [name], name=name))
        x = name
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "fc.w"], ["y"], name="fc"),
    ]
    inits.append(numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "fc.w"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_tail_weights_after_a_channel_mixing_conv() -> None:
    """After conv a, conv b reads one element's dependents only (not counted); conv c reads
    every channel's (counted), and the gemm after the pool every element's (counted)."""
    graph = compile_until(_chain(), LEVEL_PASSES["graph"])
    names = [layer.name for layer in graph.layers]
    count, named = mbv2_floor.tail_weights(graph, names.index("a"))
    assert named == ["c", "fc"]
    assert count == 16 * 16 + 16 * 10
    assert mbv2_floor.tail_weights(graph, names.index("b"))[1] == ["fc"]


@pytest.mark.parametrize("name", ["small_cnn", "residual_block"])
def test_bounds_below_the_dan_makespan(name: str) -> None:
    """The floor of any lowering and the bound of today's instructions are lower bounds: each
    at most DAN's makespan of the same model, the program's above zero."""
    model = onnx.load(str(ROOT / "models" / f"{name}.onnx"))
    target = load_target("davinci-core")
    graph = compile_until(model, LEVEL_PASSES["graph"])
    r = compile_until(model, "schedule", "davinci-core", "dan").schedules[0][1]
    floor = mbv2_floor.machine(graph, target, list(range(len(graph.layers) - 1)), "blockdiag", [])
    bound = mbv2_floor.program(r, graph, target)
    assert 0 < bound <= r.makespan
    assert floor <= r.makespan
