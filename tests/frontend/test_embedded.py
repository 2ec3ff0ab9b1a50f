"""Initializers' raw data found in a model file's bytes, left out of the bytes parsed and mapped
from the file on import."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_weights_apart import conv_model

from npucc.frontend.embedded import WireError, without_raw_data
from npucc.frontend.onnx_import import load_model, load_model_apart, model_to_graph
from npucc.frontend.weights_apart import load_embedded, with_weights


def test_each_initializers_raw_data_is_found_where_the_file_holds_it() -> None:
    model = conv_model(8)
    data = model.SerializeToString()
    kept, places = without_raw_data(io.BytesIO(data), lambda place: False)
    assert kept == data
    assert [p.name for p in places] == [i.name for i in model.graph.initializer]
    for place, init in zip(places, model.graph.initializer, strict=True):
        assert place.dims == tuple(init.dims) and place.data_type == init.data_type
        assert place.raw is not None
        offset, length = place.raw
        assert data[offset : offset + length] == init.raw_data


def test_an_initializer_without_raw_data_has_no_place() -> None:
    model = conv_model(8)
    bias = model.graph.initializer[2]
    bias.float_data.extend(numpy_helper.to_array(bias).tolist())
    bias.ClearField("raw_data")
    _, places = without_raw_data(io.BytesIO(model.SerializeToString()), lambda place: True)
    assert places[2].raw is None and places[0].raw is not None


def test_bytes_that_are_not_a_message_are_refused() -> None:
    with pytest.raises(WireError):  # a graph field longer than the file
        without_raw_data(io.BytesIO(b"\x3a\x7f\x01"), lambda place: True)


def test_big_weights_in_the_file_are_mapped_from_it(tmp_path: Path) -> None:
    model = conv_model(8)
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path))
    shapes = {"x": (1, 8, 8, 8)}
    placeheld, weights = load_model_apart(path, shapes, mapped=True)
    w = weights["w"]
    assert isinstance(w, np.ndarray) and not w.flags.writeable and w.base is not None
    expected = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_array_equal(model_to_graph(placeheld, weights=weights).tensors["w"].data,
                                  expected)  # fmt: skip
    # put back into the model: the model loaded without mapping (its weights' data location
    # now set, to the default)
    plain, back = load_model(path, shapes), with_weights(placeheld, weights)
    for init in (*plain.graph.initializer, *back.graph.initializer):
        init.ClearField("data_location")
    assert back.SerializeToString() == plain.SerializeToString()


def test_the_bytes_kept_parse_as_the_model_without_the_raw_data_left_out() -> None:
    model = conv_model(8)
    extra = onnx.ModelProto()  # NOTE: a second graph field, merged into the first on parsing
    extra.graph.node.add().CopyFrom(model.graph.node[0])
    extra.graph.initializer.add().CopyFrom(model.graph.initializer[0])
    extra.graph.initializer[0].name = "w2"
    data = model.SerializeToString() + extra.SerializeToString()
    kept, places = without_raw_data(io.BytesIO(data), lambda place: place.name in ("w", "w2"))
    parsed, expected = onnx.ModelProto(), onnx.ModelProto()
    parsed.ParseFromString(kept)
    expected.ParseFromString(data)
    assert len(kept) < len(data) - 2 * len(model.graph.initializer[0].raw_data)
    for init in expected.graph.initializer:
        if init.name in ("w", "w2"):
            init.ClearField("raw_data")
    assert parsed == expected and len(parsed.graph.node) == len(model.graph.node) + 1
    assert [p.name for p in places] == [i.name for i in parsed.graph.initializer]


def test_a_file_that_does_not_read_as_a_model_here_is_parsed_whole(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x3a\x7f\x01")
    assert load_embedded(path) is None
    onnx.save_model(conv_model(8), str(path))
    loaded = load_embedded(path)
    assert loaded is not None and sorted(loaded[1]) == ["w"]


def test_weights_not_mapped_for_want_of_descriptors_are_loaded(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save_model(conv_model(8), str(path))

    def no_descriptors(*args: object) -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr("npucc.frontend.weights_apart.map_array", no_descriptors)
    loaded = load_embedded(path)
    assert loaded is not None and loaded[1] == {}
    assert loaded[0] == conv_model(8)  # read into its message, as parsed
    placeheld, weights = load_model_apart(path, {"x": (1, 8, 8, 8)}, mapped=True)
    assert isinstance(weights["w"], onnx.TensorProto)  # held apart as parsed
