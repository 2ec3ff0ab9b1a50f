"""infer_shapes and check_model: weights kept out of onnx's serialisation, results as onnx's."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import WEIGHT_ELEMS, check_model, infer_shapes


def _model(index: type[np.integer]) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, WEIGHT_ELEMS)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3, WEIGHT_ELEMS])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"]),
            helper.make_node("Reshape", ["c", "shape"], ["y"]),
        ],
        "g",
        [x],
        [y],
        [numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(np.array([2, 2], index), "shape")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_inferred_with_the_weights_kept() -> None:
    model = _model(np.int64)
    want = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True,
                                             data_prop=True)  # fmt: skip
    got = infer_shapes(model)
    assert got.SerializeToString() == want.SerializeToString()
    assert [d.dim_value for d in got.graph.output[0].type.tensor_type.shape.dim] == [2, 2]
    assert len(got.graph.initializer[0].raw_data) == 4 * 9 * WEIGHT_ELEMS * 4


def test_a_failed_inference_leaves_the_weights() -> None:
    model = _model(np.int32)  # Reshape takes an int64 shape
    weights = model.graph.initializer[0].raw_data
    with pytest.raises(NpuccError, match="shape inference failed"):
        infer_shapes(model)
    assert model.graph.initializer[0].raw_data == weights


def test_check_model_passes_a_valid_model_and_keeps_it() -> None:
    model = _model(np.int64)
    before = model.SerializeToString()
    check_model(model)
    assert model.SerializeToString() == before


def test_check_model_refuses_short_weights() -> None:
    model = _model(np.int64)
    w = model.graph.initializer[0]
    w.raw_data = w.raw_data[:-4]
    with pytest.raises(NpuccError, match=r"invalid ONNX model: .*\(tensor name: w\) raw_data size"):
        check_model(model)


def test_check_model_runs_onnx_checker_on_the_rest() -> None:
    model = _model(np.int64)
    model.graph.node[1].input[0] = "nope"  # Reshape reads an undefined value
    with pytest.raises(NpuccError, match="invalid ONNX model: .*nope"):
        check_model(model)
    bad_type = _model(np.int32)  # the strict shape inference of the full check runs
    with pytest.raises(NpuccError, match="invalid ONNX model"):
        check_model(bad_type)
