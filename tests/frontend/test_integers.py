"""Run-time integer and boolean tensors held as float32, against onnxruntime (docs/integers.md)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.errors import NpuccError
from npucc.tools.cli import main

INT64, INT32, FLOAT, BOOL = (TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT,
                             TensorProto.BOOL)  # fmt: skip


def _model(nodes, inputs, outputs, inits=None, opset=17) -> onnx.ModelProto:
    """A model of `nodes`; inputs and outputs as {name: (elem type, shape)}."""
    graph = helper.make_graph(
        nodes,
        "ints",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _same_as_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    got = npucc.compile(model).run(feeds)
    names = [v.name for v in model.graph.output]
    refs = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for name, want in zip(names, refs, strict=True):
        assert got[name].dtype == want.dtype, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)


@pytest.mark.parametrize("elem", [INT64, INT32])
def test_integer_arithmetic_and_signs_of_div_and_mod(elem):
    ops = {"Add": {}, "Sub": {}, "Mul": {}, "Div": {}, "Mod": {}, "Max": {}, "Min": {}}
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()], **kw) for op, kw in ops.items()]
    nodes += [
        helper.make_node("Mod", ["a", "b"], ["fmod"], fmod=1),
        helper.make_node("Neg", ["a"], ["neg"]),
        helper.make_node("Abs", ["a"], ["abs"]),
        helper.make_node("Greater", ["a", "b"], ["gt"]),
        helper.make_node("Equal", ["a", "b"], ["eq"]),
    ]
    shape = [2, 6]
    outs = {n.output[0]: (BOOL if n.op_type in ("Greater", "Equal") else elem, shape)
            for n in nodes}  # fmt: skip
    model = _model(nodes, {"a": (elem, shape), "b": (elem, [6])}, outs)
    dtype = np.int64 if elem == INT64 else np.int32
    a = np.array([[7, -7, 7, -7, 0, 4000], [9, -9, 1, -1, 100000, -3]], dtype)
    b = np.array([2, 2, -2, -2, 3, -7], dtype)
    _same_as_onnxruntime(model, {"a": a, "b": b})


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("elem", [INT64, FLOAT])
def test_cumsum_at_run_time(exclusive, reverse, elem):
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    model = _model([node], {"x": (elem, [3, 7])}, {"y": (elem, [3, 7])}, {"axis": np.int64(1)})
    x = np.random.default_rng(0).integers(-50, 50, (3, 7))
    _same_as_onnxruntime(model, {"x": x.astype(np.int64 if elem == INT64 else np.float32)})


def test_position_ids_computed_from_token_ids_gather_embeddings():
    """RoBERTa: positions = cumsum(ids != pad) * (ids != pad) + pad, then two lookups."""
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["is_pad"]),
        helper.make_node("Not", ["is_pad"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["keep_i"], to=INT32),
        helper.make_node("CumSum", ["keep_i", "one"], ["run"]),
        helper.make_node("Mul", ["run", "keep_i"], ["pos_i"]),
        helper.make_node("Cast", ["pos_i"], ["pos64"], to=INT64),
        helper.make_node("Add", ["pos64", "pad"], ["pos"]),
        helper.make_node("Gather", ["words", "ids"], ["w"]),
        helper.make_node("Gather", ["places", "pos"], ["p"]),
        helper.make_node("Add", ["w", "p"], ["y"]),
        helper.make_node("GatherElements", ["kinds", "pos"], ["k"], axis=1),
    ]
    rng = np.random.default_rng(1)
    inits = {
        "pad": np.int64(1),
        "one": np.int64(1),
        "words": rng.standard_normal((20, 4)).astype(np.float32),
        "places": rng.standard_normal((12, 4)).astype(np.float32),
        "kinds": rng.integers(0, 9, (2, 12)),
    }
    outs = {"y": (FLOAT, [2, 8, 4]), "pos": (INT64, [2, 8]), "k": (INT64, [2, 8])}
    model = _model(nodes, {"ids": (INT64, [2, 8])}, outs, inits)
    ids = np.array([[0, 5, 7, 9, 2, 1, 1, 1], [0, 3, 19, 4, 8, 6, 2, 1]], np.int64)
    _same_as_onnxruntime(model, {"ids": ids})
    assert "index=f32" in npucc.compile(model).stream  # computed indices, read as float32


def test_computed_index_out_of_range_is_a_run_time_error():
    nodes = [
        helper.make_node("Add", ["ids", "shift"], ["moved"]),
        helper.make_node("Gather", ["table", "moved"], ["y"]),
    ]
    inits = {"shift": np.int64(3), "table": np.ones((5, 2), np.float32)}
    model = _model(nodes, {"ids": (INT64, [3])}, {"y": (FLOAT, [3, 2])}, inits)
    program = npucc.compile(model)
    with pytest.raises(NpuccError, match=r"gather index 5 \(position 1\) out of range \[-5, 5\)"):
        program.run({"ids": np.array([0, 2, 1], np.int64)})


def test_gather_elements_with_computed_indices_along_an_inner_axis():
    nodes = [
        helper.make_node("Sub", ["ids", "one"], ["idx"]),
        helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1),
    ]
    model = _model(
        nodes,
        {"x": (FLOAT, [2, 5, 3]), "ids": (INT64, [2, 4, 3])},
        {"y": (FLOAT, [2, 4, 3])},
        {"one": np.int64(1)},
    )
    rng = np.random.default_rng(2)
    feeds = {
        "x": rng.standard_normal((2, 5, 3)).astype(np.float32),
        "ids": rng.integers(-4, 6, (2, 4, 3)),  # after -1: negative ones count from the end
    }
    _same_as_onnxruntime(model, feeds)


def test_casts_truncate_toward_zero_and_booleans_are_outputs():
    nodes = [
        helper.make_node("Cast", ["x"], ["i"], to=INT32),
        helper.make_node("Cast", ["i"], ["b"], to=BOOL),
        helper.make_node("Cast", ["b"], ["f"], to=FLOAT),
        helper.make_node("Less", ["x", "f"], ["lt"]),
    ]
    shape = [8]
    outs = {"i": (INT32, shape), "b": (BOOL, shape), "f": (FLOAT, shape), "lt": (BOOL, shape)}
    model = _model(nodes, {"x": (FLOAT, shape)}, outs)
    x = np.array([2.7, -2.7, 0.5, -0.5, 0.0, 1e6 + 0.5, -3.0, 7.999], np.float32)
    _same_as_onnxruntime(model, {"x": x})


def _mul_model(elem: int) -> onnx.ModelProto:
    node = helper.make_node("Mul", ["a", "b"], ["y"])
    return _model([node], {"a": (elem, [2]), "b": (elem, [2])}, {"y": (elem, [2])})


def test_an_output_overflow_is_an_error_not_a_number():
    program = npucc.compile(_mul_model(INT64))
    big = np.array([4096, 3], np.int64)
    overflow = r'output "y": value 16781312\.0 at \(0,\) is not an exact int64 \(integer overflow'
    with pytest.raises(NpuccError, match=overflow):
        program.run({"a": big, "b": np.array([4097, 5], np.int64)})
    narrow = npucc.compile(_mul_model(TensorProto.UINT8))  # onnxruntime wraps 20 * 20 to 144
    with pytest.raises(NpuccError, match=r"value 400\.0 at \(0,\) is not an exact uint8"):
        narrow.run({"a": np.array([20, 2], np.uint8), "b": np.array([20, 3], np.uint8)})


def test_an_input_beyond_two_to_the_24_is_refused_on_the_cli(tmp_path, capsys):
    path = tmp_path / "mul.onnx"
    onnx.save(_mul_model(INT64), str(path))
    out = tmp_path / "mul.cmd"
    assert main([str(path), "-o", str(out)]) == 0
    np.save(tmp_path / "a.npy", np.array([1, 2**25], np.int64))
    np.save(tmp_path / "b.npy", np.array([1, 1], np.int64))
    feeds = ["-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}"]
    assert main(["run", str(out), *feeds, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert 'npucc: error: input "a": value 33554432 at (1,) is not an exact int64' in err


def test_narrow_integer_arithmetic_inside_the_model_is_refused():
    nodes = [
        helper.make_node("Add", ["a", "a"], ["s"]),
        helper.make_node("Cast", ["s"], ["y"], to=INT32),
    ]
    model = _model(nodes, {"a": (TensorProto.INT8, [3])}, {"y": (INT32, [3])})
    with pytest.raises(NpuccError, match="node 'Add_0' \\(Add\\): i8 result 's' may wrap around"):
        npucc.compile(model)


def test_an_operator_without_exact_integer_semantics_is_refused():
    node = helper.make_node("ReduceMean", ["a"], ["y"], keepdims=0)
    model = _model([node], {"a": (INT64, [4])}, {"y": (INT64, [])}, opset=17)
    with pytest.raises(NpuccError, match="integer tensor 'a' \\(i64\\) is not supported"):
        npucc.compile(model)
