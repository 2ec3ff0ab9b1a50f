"""Graph IR text form: round trip on every model, odd names and attribute values, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from frontend_testutil import LIGHT, MODELS, imported

from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_text import graph_from_text


@pytest.mark.xdist_group("whole-model")  # one whole network at a time (tests/conftest.py)
@pytest.mark.parametrize("path", MODELS + LIGHT, ids=lambda p: p.stem)
def test_round_trip_every_model(path):
    g = imported(path)
    text = g.to_text()
    assert text == g.to_text()
    parsed = graph_from_text(text)
    assert parsed.to_text() == text
    assert [layer.attrs for layer in parsed.layers] == [layer.attrs for layer in g.layers]
    assert {n: (t.shape, t.dtype) for n, t in parsed.tensors.items()} == {
        n: (t.shape, t.dtype) for n, t in g.tensors.items()
    }
    const = next(t for t in parsed.tensors.values() if t.data is not None)
    assert not const.data.any() and const.data.shape == const.shape


def _odd_graph() -> Graph:
    g = Graph('we"ird\nmodel', opset=13)
    names = ["in\nput", 'q"uote', "back\\slash", "uni\u2028côde", "%none", ""]
    g.add_tensor(Tensor(names[0], (2, 3)))
    g.inputs.append(names[0])
    g.add_tensor(Tensor(names[1], (3,), "f32", np.arange(3, dtype=np.float32)))
    g.add_tensor(Tensor(names[2], (2, 3)))
    g.add_tensor(Tensor(names[3], (2, 3)))
    g.add_tensor(Tensor(names[4], (), "i64", np.array(7, np.int64)))
    attrs = {
        "zeta": -0.1,
        "alpha": 1e-05,
        "inf": math.inf,
        "ninf": -math.inf,
        "big": 3.4028234663852886e38,
        "s": 'a"b\nc',
        "ints": (1, -2, 3),
        "nested": ((1, 2), (0.5, "x")),
        "empty": (),
        "flag": True,
        "arr": np.array([[0.1, -2.0]], np.float32),
        "weird key": 1,
    }
    g.add_layer(Layer("la\nyer", "onnx.Add", [names[0], names[1]], [names[2]], attrs))
    g.add_layer(Layer("", "onnx.Foo", [names[2], "", names[4]], [names[3]], {"nan": math.nan}))
    g.outputs = [names[3], names[2]]
    return g


def test_odd_names_and_attributes_round_trip():
    g = _odd_graph()
    text = g.to_text()
    assert len(text.splitlines()) == 2 + 1 + 2 + 2 + 2  # header/footer, input, consts, layers, outs
    assert text.isascii()
    parsed = graph_from_text(text)
    assert parsed.to_text() == text
    assert parsed.name == g.name and parsed.inputs == g.inputs and parsed.outputs == g.outputs
    assert [(x.name, x.op, x.inputs, x.outputs) for x in parsed.layers] == [
        (x.name, x.op, x.inputs, x.outputs) for x in g.layers
    ]
    a, b = parsed.layers[0].attrs, g.layers[0].attrs
    assert a.keys() == b.keys()
    for key in a:
        if key == "arr":
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key])
        else:
            assert a[key] == b[key] and type(a[key]) is type(b[key]), key
    assert math.isnan(parsed.layers[1].attrs["nan"])


def test_printing_is_deterministic_and_sorted():
    g = _odd_graph()
    line = g.to_text().splitlines()[4]
    order = ["alpha =", "arr =", "big =", "empty =", "flag =", '"inf" =', "ints =", "zeta ="]
    positions = [line.index(key) for key in order]
    assert positions == sorted(positions)
    assert g.to_text() == _odd_graph().to_text()


def test_constant_digest_tracks_data():
    g = _odd_graph()
    before = g.to_text()
    g.tensors['q"uote'].data = np.array([0, 1, 3], np.float32)
    assert g.to_text() != before


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ('graph "g" opset=1 {\n  bogus\n}\n', "line 2"),
        ('graph "g" opset=1 {\n  input %"x" : f32[2\n}\n', "line 2"),
        ('graph "g" opset=1 {\n  output %"x"\n}\n', "never written"),
        ('graph "g" opset=1 {\n  input %"x" : f32[2]\n  input %"x" : f32[2]\n}\n', "line 3"),
        ('graph "g" opset=1 {\n  input %"x" : q9[2]\n}\n', "element type"),
    ],
)
def test_parse_errors(text, fragment):
    with pytest.raises(NpuccError, match=fragment):
        graph_from_text(text)
