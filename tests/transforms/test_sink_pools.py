"""sink-pools: a pool of a channel concat pooled per branch, a monotone activation moved onto
the max pool that reads it; both exact against onnxruntime."""

from __future__ import annotations

import numpy as np
from frontend_testutil import assert_matches_onnxruntime, tiny_model
from onnx import helper

from npucc.transforms.graph_pipeline import import_model


def _branches(pool: str, act: str = "Relu", extra_reader: bool = False) -> object:
    """Two conv branches (3x3 and 1x1, each with `act`) of one input, concatenated on channels,
    then `pool` (a windowed 3x3 stride-2 pool or a global one)."""
    rng = np.random.default_rng(5)
    inits = {
        "wa": rng.standard_normal((3, 4, 1, 1)).astype(np.float32),
        "wb": rng.standard_normal((5, 4, 3, 3)).astype(np.float32),
        "bb": rng.standard_normal(5).astype(np.float32),
        "lo": np.array(-0.5, np.float32),
        "hi": np.array(1.0, np.float32),
    }
    bounds = ["lo", "hi"] if act == "Clip" else []
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["ca"]),
        helper.make_node(act, ["ca", *bounds], ["ra"]),
        helper.make_node("Conv", ["x", "wb", "bb"], ["cb"], pads=[1] * 4),
        helper.make_node(act, ["cb", *bounds], ["rb"]),
        helper.make_node("Concat", ["ra", "rb"], ["cat"], axis=1),
    ]
    if pool.startswith("Global"):
        nodes.append(helper.make_node(pool, ["cat"], ["y"]))
    else:
        nodes.append(helper.make_node(pool, ["cat"], ["y"], kernel_shape=[3, 3], strides=[2, 2]))
    outputs = ["y", "cat"] if extra_reader else ["y"]
    return tiny_model(nodes, {"x": [1, 4, 11, 11]}, outputs, inits)


def test_a_max_pool_of_a_concat_is_pooled_per_branch_with_the_branches_relu():
    model = _branches("MaxPool")
    g = import_model(model)
    ops = [(layer.op, layer.attrs.get("act", "")) for layer in g.layers]
    assert ops == [("conv2d", ""), ("maxpool", "relu"), ("conv2d", ""), ("maxpool", "relu"),
                   ("concat", "")]  # fmt: skip
    assert g.tensors[g.layers[-1].outputs[0]].shape == (1, 8, 5, 5)
    assert_matches_onnxruntime(g, model, rtol=1e-5)


def test_a_clip_moves_onto_the_max_pool_with_its_bounds():
    model = _branches("MaxPool", act="Clip")
    g = import_model(model)
    pools = [layer for layer in g.layers if layer.op == "maxpool"]
    assert [(p.attrs["act"], p.attrs["act_min"], p.attrs["act_max"]) for p in pools] == [
        ("clip", -0.5, 1.0)
    ] * 2
    assert not any(layer.attrs.get("act") for layer in g.layers if layer.op == "conv2d")
    assert_matches_onnxruntime(g, model, rtol=1e-5)


def test_an_average_pool_of_a_concat_is_pooled_per_branch_after_the_relu():
    model = _branches("AveragePool")
    g = import_model(model)
    ops = [(layer.op, layer.attrs.get("act", "")) for layer in g.layers]
    # pooled per branch (an average works on each channel alone), the relu stays in the convs
    assert ops == [("conv2d", "relu"), ("avgpool", ""), ("conv2d", "relu"), ("avgpool", ""),
                   ("concat", "")]  # fmt: skip
    assert_matches_onnxruntime(g, model, rtol=1e-5)


def test_a_global_pool_of_a_concat_is_pooled_per_branch():
    model = _branches("GlobalAveragePool")
    g = import_model(model)
    assert [layer.op for layer in g.layers] == [
        "conv2d", "globalavgpool", "conv2d", "globalavgpool", "concat",
    ]  # fmt: skip
    assert_matches_onnxruntime(g, model, rtol=1e-5)


def test_a_concat_another_layer_reads_stays_before_the_pool():
    model = _branches("MaxPool", extra_reader=True)
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["conv2d", "conv2d", "concat", "maxpool"]
    assert all(not layer.attrs.get("act") for layer in g.layers if layer.op == "maxpool")
    assert_matches_onnxruntime(g, model, rtol=1e-5)
