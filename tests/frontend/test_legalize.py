"""Import and legalize-onnx on tiny models: the pipeline, Clip, chains, pads, pools, softmax."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_testutil import assert_matches_onnxruntime, tiny_model
from onnx import helper

from npucc.transforms.graph_pipeline import import_model


def test_clip_from_inputs_and_absent_max():
    inits = {"lo": np.array(-0.5, np.float32)}
    nodes = [
        helper.make_node("MatMul", ["x", "x"], ["m"]),
        helper.make_node("Clip", ["m", "lo", ""], ["y"]),
    ]
    model = tiny_model(nodes, {"x": [4, 4]}, ["y"], inits)
    g = import_model(model)
    (mm,) = g.layers
    assert (mm.op, mm.attrs["act"], mm.attrs["act_min"], mm.attrs["act_max"]) == (
        "matmul",
        "clip",
        -0.5,
        float("inf"),
    )
    assert_matches_onnxruntime(g, model)


def test_sum_and_max_chains():
    nodes = [
        helper.make_node("Sum", ["a", "b", "c"], ["s"]),
        helper.make_node("Max", ["s", "a", "b"], ["y"]),
    ]
    model = tiny_model(nodes, {"a": [2, 3], "b": [1, 3], "c": [2, 1]}, ["y"])
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["add", "add", "max", "max"]
    assert len({layer.name for layer in g.layers}) == 4
    assert_matches_onnxruntime(g, model)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad_matches_onnxruntime(auto_pad):
    w = np.random.default_rng(6).standard_normal((4, 2, 2, 3)).astype(np.float32)
    conv = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad, strides=[2, 1], group=1)
    model = tiny_model([conv], {"x": [1, 2, 7, 6]}, ["y"], {"w": w})
    g = import_model(model)
    if auto_pad == "SAME_LOWER":
        assert g.layers[0].attrs["pads"] == (1, 1, 0, 1)
    assert_matches_onnxruntime(g, model)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_avgpool_ceil_mode(count_include_pad):
    pool = helper.make_node(
        "AveragePool",
        ["x"],
        ["y"],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        ceil_mode=1,
        count_include_pad=count_include_pad,
    )
    model = tiny_model([pool], {"x": [1, 2, 8, 8]}, ["y"])
    g = import_model(model)
    assert g.layers[0].attrs["pads"] == (1, 1, 2, 2)
    # the extra bottom/right pad of ceil_mode never counts in the divisor
    assert g.layers[0].attrs.get("ceil_pads") == ((1, 1) if count_include_pad else None)
    assert_matches_onnxruntime(g, model)


def test_pool_3d_is_two_separable_2d_pools():
    pool = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[2, 3, 2], strides=[2, 1, 2],
        pads=[1, 0, 1, 0, 1, 0], ceil_mode=1, count_include_pad=1,
    )  # fmt: skip
    model = tiny_model([pool], {"x": [2, 3, 5, 6, 7]}, ["y"])
    g = import_model(model)
    pools = [layer for layer in g.layers if layer.op == "avgpool"]
    assert [p.attrs["kernel"] for p in pools] == [(3, 2), (2, 1)]
    assert [g.tensors[p.inputs[0]].shape for p in pools] == [(2, 15, 6, 7), (2, 3, 5, 20)]
    assert_matches_onnxruntime(g, model)


def test_softmax_old_opset_coerces_to_2d():
    model = tiny_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": [2, 3, 4]}, ["y"],
                       opset=11)  # fmt: skip
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["reshape", "softmax", "reshape"]
    assert_matches_onnxruntime(g, model)
    new = tiny_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": [2, 3, 4]}, ["y"])
    g = import_model(new)
    assert [(layer.op, layer.attrs) for layer in g.layers] == [("softmax", {"axis": 1})]
    assert_matches_onnxruntime(g, new)


def test_transpose_and_global_max_pool():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("GlobalMaxPool", ["t"], ["y"]),
    ]
    model = tiny_model(nodes, {"x": [1, 4, 5, 3]}, ["y"])
    g = import_model(model)
    assert g.layers[0].attrs["perm"] == (0, 3, 1, 2)
    assert_matches_onnxruntime(g, model)


def test_nodes_nothing_reads_are_dropped_on_import():
    # a Where whose output nothing reads used to become a layer without outputs (a crash)
    model = tiny_model(
        [
            helper.make_node("Greater", ["a", "b"], ["mask"]),
            helper.make_node("Where", ["mask", "a", "b"], ["unused"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        {"a": [2, 3], "b": [2, 3]},
        ["y"],
    )
    g = import_model(model)
    assert [layer.op for layer in g.layers] == ["relu"]
    assert_matches_onnxruntime(g, model)
