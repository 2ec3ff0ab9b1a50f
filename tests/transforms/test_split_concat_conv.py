"""split-concat-conv: a conv of a channel concat computed per branch, the partial sums handed
on as fused residuals; exact against onnxruntime, in the graph and compiled."""

from __future__ import annotations

import numpy as np
from frontend_testutil import assert_matches_onnxruntime, tiny_model
from onnx import helper

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.transforms.graph_pipeline import import_model


def _fire(squeeze: int, extra_reader: bool = False) -> object:
    """Two expand convs (1x1 and 3x3, relu) of one input, concatenated on channels (8), read
    by a 1x1 conv of `squeeze` output channels with a bias and a relu."""
    rng = np.random.default_rng(6)
    inits = {
        "we1": rng.standard_normal((3, 4, 1, 1)).astype(np.float32),
        "we3": rng.standard_normal((5, 4, 3, 3)).astype(np.float32),
        "ws": rng.standard_normal((squeeze, 8, 1, 1)).astype(np.float32),
        "bs": rng.standard_normal(squeeze).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "we1"], ["e1"]),
        helper.make_node("Relu", ["e1"], ["r1"]),
        helper.make_node("Conv", ["x", "we3"], ["e3"], pads=[1] * 4),
        helper.make_node("Relu", ["e3"], ["r3"]),
        helper.make_node("Concat", ["r1", "r3"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "ws", "bs"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    outputs = ["y", "cat"] if extra_reader else ["y"]
    return tiny_model(nodes, {"x": [1, 4, 9, 9]}, outputs, inits)


def test_a_conv_of_a_concat_is_one_conv_per_branch_summed_as_residuals():
    model = _fire(squeeze=2)
    g = import_model(model)
    convs = [layer for layer in g.layers if layer.op == "conv2d"]
    assert [layer.op for layer in g.layers] == ["conv2d"] * 4  # no concat left
    first, second = convs[1], convs[3]
    assert first.inputs[0] == convs[0].outputs[0] and len(first.inputs) == 2
    assert not first.attrs.get("act")  # a partial sum: no bias, no activation
    assert second.inputs[0] == convs[2].outputs[0] and second.inputs[3] == first.outputs[0]
    assert second.inputs[2] and second.attrs["act"] == "relu"
    assert g.tensors[second.inputs[1]].shape == (2, 5, 1, 1)
    assert_matches_onnxruntime(g, model, rtol=1e-5)
    program = npucc.compile(model, "davinci-core")
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))


def test_a_conv_with_more_outputs_than_its_concat_or_a_shared_concat_is_not_split():
    for model in (_fire(squeeze=16), _fire(squeeze=2, extra_reader=True)):
        g = import_model(model)
        assert "concat" in [layer.op for layer in g.layers]
        assert_matches_onnxruntime(g, model, rtol=1e-5)
