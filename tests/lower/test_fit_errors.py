"""Capacity refusals are true, and a tile that fits is never refused (issue 20's probe)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.errors import NpuccError
from npucc.target import TIERS, load_target

CLAIM = re.compile(r"^(\w+) too small for .* '(.*)' \((\d+) bytes needed, (\d+) available\)$")


def _cnn() -> onnx.ModelProto:
    """conv 3x3 (3 -> 8 channels) + relu + maxpool 2x2 + gemm, on a 1x3x8x8 input."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    g = numpy_helper.from_array(rng.standard_normal((128, 4)).astype(np.float32), "g")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="Conv_0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["y"], name="Gemm_0"),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w, g],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model, target):
    program = npucc.compile(model, target)
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]


def test_tiles_below_the_cube_fractal_fit_small_tiers():
    # the probe's refusal, on davinci-core with 1/64 of its capacities:
    # "L0A too small for the smallest tile of layer 'Conv_0' (36 bytes needed, 1024 available)"
    base = load_target("davinci-core")
    _check(_cnn(), base.with_capacity(**{t: base.memory.capacity(t) // 64 for t in TIERS}))


@pytest.mark.parametrize(
    "tier,size", [("L0A", 64), ("L0B", 32), ("L0C", 32), ("UB", 32), ("L1", 64)]
)
def test_a_refusal_names_a_need_that_gets_past_it(tier, size):
    model = _cnn()
    target = load_target("davinci-core").with_capacity(**{tier: size})
    refused: set[tuple[str, str]] = set()
    for _ in range(4):  # a larger tier may let a later layer be refused, for its own need
        try:
            npucc.compile(model, target)
            break
        except NpuccError as exc:
            claim = CLAIM.match(str(exc))
            assert claim is not None, str(exc)
            named, layer, need, have = claim[1], claim[2], int(claim[3]), int(claim[4])
            assert named == tier and have == target.memory.capacity(tier) and need > have
            assert (named, layer) not in refused, f"refused twice: {exc}"
            refused.add((named, layer))
            smaller = target.with_capacity(**{tier: need - target.memory.alignment})
            with pytest.raises(NpuccError, match=f"^{tier} too small .* '{layer}'"):
                npucc.compile(model, smaller)  # the need is the least that gets past the layer
            target = target.with_capacity(**{tier: need})
    assert refused
    _check(model, target)
