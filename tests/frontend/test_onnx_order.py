"""Graphs out of topological order are sorted (as onnxruntime does); a cycle is an error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import npucc
from npucc.checking import compare, run_onnxruntime
from npucc.errors import NpuccError
from npucc.frontend.onnx_order import topologically_sorted


def model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    """x[2,3] -> nodes -> y[2,3]."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_an_unsorted_graph_compiles_and_matches_onnxruntime() -> None:
    nodes = [
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
        helper.make_node("Neg", ["a"], ["b"], name="neg"),
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
    ]
    m = model(nodes)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    result = npucc.compile(m).execute({"x": x})
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(m, {"x": x})))
    assert [n.name for n in m.graph.node] == ["add", "neg", "relu"]  # the caller's is untouched


def test_a_sorted_graph_is_kept_as_it_is() -> None:
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")])
    assert topologically_sorted(m) is m


def test_a_cycle_names_its_nodes() -> None:
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["c"], name="second"),
        helper.make_node("Neg", ["a"], ["y"], name="out"),
    ]
    with pytest.raises(NpuccError, match=r"cycle: first -> second -> first \(node 'first'\)"):
        npucc.compile(model(nodes))
