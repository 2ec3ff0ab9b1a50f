"""The graph's use lists follow its mutations; verify() catches a change made behind them and a
canonical layer that breaks its schema."""

from __future__ import annotations

import pytest

from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer, Tensor


def _chain() -> tuple[Graph, Layer, Layer]:
    g = Graph()
    for name in ("x", "a", "b"):
        g.add_tensor(Tensor(name, (2, 3)))
    g.inputs.append("x")
    first = g.add_layer(Layer("first", "relu", ["x"], ["a"]))
    second = g.add_layer(Layer("second", "add", ["a", "a"], ["b"]))
    g.outputs.append("b")
    return g, first, second


def test_producer_and_users_follow_the_mutations() -> None:
    g, first, second = _chain()
    assert g.producer("a") is first and g.users("a") == [second] and g.users("x") == [first]
    g.add_tensor(Tensor("c", (2, 3)))
    middle = Layer("middle", "exp", ["a"], ["c"])
    g.add_layer(middle, after=first)
    g.set_inputs(second, ["a", "c"])
    assert [x.name for x in g.layers] == ["first", "middle", "second"]
    assert g.users("a") == [middle, second] and g.users("c") == [second]  # in use order
    g.replace_uses("c", "a")
    g.remove_layer(middle)
    assert g.users("c") == [] and g.producer("c") is None and not g.has_layer(middle)
    neg = Layer("neg", "neg", ["x"], ["a"])
    g.replace_layer(first, [neg])
    assert g.layers[0] is neg and g.producer("a") is neg and g.layer_name_taken("neg")
    assert not g.layer_name_taken("first") and g.layers_after(neg) == [second]
    g.verify()


def test_verify_catches_a_change_behind_the_use_lists() -> None:
    g, first, _ = _chain()
    first.inputs = ["a"]  # not through set_inputs
    with pytest.raises(NpuccError, match="reads undefined tensor|use lists"):
        g.verify()
    g, _, second = _chain()
    second.inputs = ["x", "x"]
    with pytest.raises(NpuccError, match="use lists"):
        g.verify()


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "message"),
    [
        ("add", ["x"], {}, "takes 2..2 inputs"),
        ("lrn", ["x"], {"alpha": 1e-4, "beta": 0.75}, "needs attribute 'size'"),
        ("relu", ["x"], {"axis": 1}, "has no attribute 'axis'"),
        ("softmax", ["x"], {"axis": "1"}, "not of kind int"),
        ("transpose", ["x"], {"perm": (0, 1)}, r"gives \[2, 3\], not \[3, 2\]"),
        ("frobnicate", ["x"], {}, "unknown canonical op"),
    ],
)
def test_verify_checks_canonical_layers_against_the_schema(op, inputs, attrs, message) -> None:
    g = Graph()
    g.add_tensor(Tensor("x", (2, 3)))
    g.add_tensor(Tensor("y", (3, 2)))
    g.inputs.append("x")
    g.add_layer(Layer("L", op, inputs, ["y"], attrs))
    g.outputs.append("y")
    with pytest.raises(NpuccError, match=message):
        g.verify()
    g.layers[0].op = "onnx.Anything"  # ONNX-level layers have no schema
    g.verify()
