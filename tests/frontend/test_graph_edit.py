"""infer_shapes: weights kept aside from ONNX's inference come back, shapes as ONNX infers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import WEIGHT_ELEMS, infer_shapes


def _model(index: type[np.integer]) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, WEIGHT_ELEMS)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3, WEIGHT_ELEMS])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
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
