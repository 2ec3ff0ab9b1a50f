"""Big initializers held apart while a model is checked and inferred: the same model results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.frontend.graph_edit import infer_shapes
from npucc.frontend.onnx_import import load_model, load_model_apart, model_to_graph
from npucc.frontend.weights_apart import (
    BIG,
    external_weights,
    mapped_weight,
    split_weights,
    with_weights,
)


def conv_model(ir_version: int) -> onnx.ModelProto:
    """x -> Conv(big weight w) -> Reshape(small shape) -> Add(small bias) -> y."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 8, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    bias = numpy_helper.from_array(np.ones(64 * 36, np.float32), "bias")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("Add", ["r", "bias"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 8, 8])]
    if ir_version < 4:  # initializers are graph inputs too
        inputs += [helper.make_tensor_value_info(i.name, i.data_type, i.dims)
                   for i in (w, shape, bias)]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64 * 36])],
        [w, shape, bias],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=ir_version)  # fmt: skip


def plain_load(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """What load_model did with the weights in place: check and infer the whole model."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.checker.check_model(copy, full_check=True)
    x = next(v for v in copy.graph.input if v.name == "x").type.tensor_type.shape
    x.Clear()
    for n in shapes["x"]:
        x.dim.add().dim_value = n
    return infer_shapes(copy)


@pytest.mark.parametrize("ir_version", [3, 8])
def test_loading_with_weights_apart_gives_the_same_model(ir_version: int) -> None:
    model = conv_model(ir_version)
    before = model.SerializeToString()
    shapes = {"x": (1, 8, 8, 8)}
    loaded = load_model(model, shapes)
    assert loaded.SerializeToString() == plain_load(model, shapes).SerializeToString()
    assert model.SerializeToString() == before  # the caller's model is untouched


def test_only_big_initializers_are_held_apart_as_inputs_of_their_type() -> None:
    model = conv_model(8)
    skeleton, weights = split_weights(model)
    assert sorted(weights) == ["w"] and 64 * 8 * 9 >= BIG > 64 * 36
    assert [i.name for i in skeleton.graph.initializer] == ["shape", "bias"]
    w = next(v for v in skeleton.graph.input if v.name == "w").type.tensor_type
    assert w.elem_type == TensorProto.FLOAT
    assert [d.dim_value for d in w.shape.dim] == [64, 8, 3, 3]


def test_the_graph_reads_the_held_apart_values() -> None:
    model = conv_model(8)
    placeheld, weights = load_model_apart(model, {"x": (1, 8, 8, 8)})
    held = next(i for i in placeheld.graph.initializer if i.name == "w")
    assert not held.raw_data and list(held.dims) == [64, 8, 3, 3]
    assert [i.name for i in placeheld.graph.initializer] == ["w", "shape", "bias"]
    assert [v.name for v in placeheld.graph.input] == ["x"]
    graph = model_to_graph(placeheld, weights=weights)
    expected = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_array_equal(graph.tensors["w"].data, expected)


def test_onnxruntime_gets_the_big_weights_as_external_references() -> None:
    model = conv_model(8)
    copy, weights = external_weights(model)
    assert sorted(weights) == ["w"]
    w, shape, bias = copy.graph.initializer
    assert w.data_location == TensorProto.EXTERNAL and not w.raw_data
    assert [(e.key, e.value) for e in w.external_data] == [("location", "w")]
    assert shape == model.graph.initializer[1] and bias == model.graph.initializer[2]


def test_big_external_weights_are_mapped_from_their_file(tmp_path: Path) -> None:
    model = conv_model(8)
    path = tmp_path / "m.onnx"
    onnx.save_model(conv_model(8), str(path), save_as_external_data=True, location="m.data",
                    size_threshold=0)  # fmt: skip
    shapes = {"x": (1, 8, 8, 8)}
    placeheld, weights = load_model_apart(path, shapes, mapped=True)
    assert sorted(weights) == ["w"]  # the small ones are loaded
    w = weights["w"]
    assert isinstance(w, np.ndarray) and not w.flags.writeable and w.base is not None
    expected = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_array_equal(model_to_graph(placeheld, weights=weights).tensors["w"].data,
                                  expected)  # fmt: skip
    # put back into the model: the model loaded without mapping, byte for byte
    plain = load_model(path, shapes).SerializeToString()
    assert with_weights(placeheld, weights).SerializeToString() == plain


def test_external_data_not_exactly_a_weights_bytes_is_loaded_not_mapped(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save_model(conv_model(8), str(path), save_as_external_data=True, location="m.data")
    with open(tmp_path / "m.data", "ab") as f:  # the last weight now runs to the file's end
        f.write(b"\0" * 4)
    w = next(i for i in onnx.load(str(path), load_external_data=False).graph.initializer)
    assert mapped_weight(w, tmp_path) is not None  # its length is given
    del w.external_data[1:]  # location only: the rest of the file, 4 bytes too many
    assert mapped_weight(w, tmp_path) is None
