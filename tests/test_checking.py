"""checking.py: an ill-conditioned reference is named, not a bare FAIL; seeded random weights."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from npucc import checking
from npucc.checking import (
    ATOL,
    Comparison,
    compare,
    ill_conditioned,
    model_file,
    randomize_weights,
    reference_spread,
    run_onnxruntime,
    within_spread,
)
from npucc.tools.cli import main


def _cancelling_sum(n: int = 64, scale: float = 1e8) -> onnx.ModelProto:
    """y = sum(concat(scale*x, x, -scale*x)): float32 rounding of the large terms swamps sum(x)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])
    consts = [
        helper.make_tensor("big", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor("neg", TensorProto.FLOAT, [], [-scale]),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["a"]),
        helper.make_node("Mul", ["x", "neg"], ["b"]),
        helper.make_node("Concat", ["a", "x", "b"], ["c"], axis=1),
        helper.make_node("ReduceSum", ["c", "axes"], ["y"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "cancel", [x], [y], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _affine() -> onnx.ModelProto:
    """y = 2x + 1: a well-conditioned reference."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    consts = [
        helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "affine", [x], [y], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_cancelling_sum_is_ill_conditioned_and_a_stable_result_is_not():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64)).astype(np.float32)
    model = _cancelling_sum()
    ref = run_onnxruntime(model, {"x": x})
    spread = reference_spread(model, {"x": x}, ref)
    (c,) = compare({"y": ref["y"] + 1.0}, ref)
    assert ill_conditioned(c, spread["y"])  # rounding alone moves the reference by > tolerance
    stable = _affine()
    x2 = rng.standard_normal((4, 8)).astype(np.float32)
    ref2 = run_onnxruntime(stable, {"x": x2})
    spread2 = reference_spread(stable, {"x": x2}, ref2)
    (c2,) = compare({"y": ref2["y"] + 1e-2}, ref2)
    assert not c2.ok and not ill_conditioned(c2, spread2["y"])


def test_the_spread_counts_the_rounding_of_the_values_nodes_compute():
    # LayerNormalization of a duplicated mean: every input draw keeps the pairs equal, so
    # only a node's own rounding (another evaluation order's) shows the output is pure noise
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 1, 1])
    scale = numpy_helper.from_array(np.ones((2, 4, 1, 1), np.float32), "s")
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], axis=-1),
        helper.make_node("GlobalAveragePool", ["p"], ["m"]),
        helper.make_node("Concat", ["m", "m"], ["c"], axis=0),
        helper.make_node("LayerNormalization", ["c", "s"], ["y"], axis=0),
    ]
    graph = helper.make_graph(nodes, "noise", [x], [y], [scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    inputs = {"x": np.random.default_rng(1).standard_normal((1, 4, 1, 3)).astype(np.float32)}
    ref = run_onnxruntime(model, inputs)
    spread = reference_spread(model, inputs, ref)["y"]
    assert np.all(spread > 1e-7)  # each element is rounding noise scaled by 1/sqrt(eps)
    assert len(model.graph.node) == 4  # the caller's model is not edited


def test_within_spread_is_elementwise():
    expected = np.array([1.0, 100.0])
    spread = np.array([0.0, 50.0])  # the second element is rounding-sensitive, the first is not
    c = Comparison("y", 60.0, 100.0)
    assert within_spread(c, np.array([1.0, 160.0]), expected, spread)  # 60 <= 2 * 50 + tol
    assert not within_spread(c, np.array([1.5, 100.0]), expected, spread)  # stable element off
    assert not within_spread(c, np.array([1.0]), expected, spread)  # misshapen
    assert ATOL < 1e-3


def test_check_names_an_ill_conditioned_output(tmp_path, capsys):
    path = tmp_path / "cancel.onnx"
    onnx.save(_cancelling_sum(), path)
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    assert "ILL-CONDITIONED" in out and "FAIL" not in out, out
    assert "npucc: warning: output 'y' is ill-conditioned" in err
    assert code == 0 and out.rstrip().endswith("PASS")


def _one(op: str, shape: list[int], **attrs) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_reduction_length_counts_normalisations_and_subgraph_nodes():
    from npucc.checking import reduction_length

    assert reduction_length(_one("Relu", [4, 8])) == 1
    assert reduction_length(_one("GroupNormalization", [2, 6, 4, 4], num_groups=3,
                                 epsilon=1e-5)) == 32  # fmt: skip
    assert reduction_length(_one("LpNormalization", [3, 5], axis=1)) == 5
    body = helper.make_graph(
        [helper.make_node("MatMul", ["a", "w"], ["b"])],
        "body",
        [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.ones((2, 7), np.float32), "a"),
         numpy_helper.from_array(np.ones((7, 3), np.float32), "w")],
    )  # fmt: skip
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph([node], "g", [cond], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])  # fmt: skip
    assert reduction_length(model) == 7


def _conv_bn(channels: int = 8) -> onnx.ModelProto:
    """A conv (weight from ConstantOfShape, as the zoo's light models make them) and a BN."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 8, 8])
    bn = [numpy_helper.from_array(np.ones(channels, np.float32), n) for n in "sbmv"]
    shape = numpy_helper.from_array(np.array([channels, 3, 3, 3], np.int64), "wshape")
    nodes = [
        helper.make_node("ConstantOfShape", ["wshape"], ["w"]),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "conv_bn", [x], [y], [shape, *bn])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_random_weights_are_seeded_he_scaled_and_the_same_drawn_in_blocks(monkeypatch):
    model = _conv_bn()
    once = randomize_weights(model, seed=3)
    weights = {i.name: numpy_helper.to_array(i) for i in once.graph.initializer}
    assert weights["w"].shape == (8, 3, 3, 3) and weights["w"].dtype == np.float32
    assert 0.5 * np.sqrt(2 / 27) < weights["w"].std() < 1.5 * np.sqrt(2 / 27)
    assert 0.5 <= weights["v"].min() and weights["v"].max() <= 1.5  # BN variances
    assert 0.2 <= weights["s"].min() and weights["s"].max() <= 0.6  # BN scales
    assert randomize_weights(model, seed=3).SerializeToString() == once.SerializeToString()
    assert randomize_weights(model, seed=4).SerializeToString() != once.SerializeToString()
    monkeypatch.setattr(checking, "_DRAW_BLOCK", 5)  # 216 weights in 44 draws
    assert randomize_weights(model, seed=3).SerializeToString() == once.SerializeToString()


def _big_conv(rng: np.random.Generator) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A conv whose 64x8x3x3 weights (random from `rng`) are big enough to be held apart, and
    a random input for it."""
    w = numpy_helper.from_array(rng.standard_normal((64, 8, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 6, 6])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model, {"x": rng.standard_normal((1, 8, 8, 8)).astype(np.float32)}


def test_onnxruntime_reads_big_weights_from_arrays_with_the_same_results():
    rng = np.random.default_rng(0)
    model, x = _big_conv(rng)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    expected = session.run(["y"], x)[0]
    np.testing.assert_array_equal(run_onnxruntime(model, x)["y"], expected)


def test_a_model_file_keeps_its_weights_apart_and_onnxruntime_runs_it_the_same(tmp_path):
    rng = np.random.default_rng(1)
    model, x = _big_conv(rng)
    expected, w = run_onnxruntime(model, x)["y"], numpy_helper.to_array(model.graph.initializer[0])
    path = model_file(model, tmp_path)
    assert (tmp_path / "model.onnx.data").stat().st_size == 64 * 8 * 3 * 3 * 4
    assert onnx.load(path, load_external_data=False).graph.initializer[0].data_location == 1
    np.testing.assert_array_equal(numpy_helper.to_array(onnx.load(path).graph.initializer[0]), w)
    np.testing.assert_array_equal(run_onnxruntime(path, x)["y"], expected)


def test_a_model_file_of_random_weights_holds_randomize_weights_values(tmp_path):
    for i, model in enumerate((_conv_bn(), _big_conv(np.random.default_rng(3))[0])):
        for folder in (f"{i}drawn", f"{i}kept"):
            (tmp_path / folder).mkdir()
        drawn = model_file(model, tmp_path / f"{i}drawn", seed=5)
        kept = model_file(randomize_weights(model, seed=5), tmp_path / f"{i}kept")
        a, b = onnx.load(drawn), onnx.load(kept)
        assert [t.name for t in a.graph.initializer] == [t.name for t in b.graph.initializer]
        for x, y in zip(a.graph.initializer, b.graph.initializer, strict=True):
            np.testing.assert_array_equal(numpy_helper.to_array(x), numpy_helper.to_array(y))
            assert numpy_helper.to_array(x).dtype == numpy_helper.to_array(y).dtype
        del a.graph.initializer[:], b.graph.initializer[:]
        assert a.SerializeToString() == b.SerializeToString()
    apart = onnx.load(tmp_path / "1drawn" / "model.onnx", load_external_data=False)
    assert apart.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    assert model.graph.initializer[0].data_location != onnx.TensorProto.EXTERNAL  # left as is


def test_a_check_runs_a_model_holding_its_weights_apart_from_its_own_file(tmp_path, monkeypatch):
    model, _ = _big_conv(np.random.default_rng(2))
    embedded = tmp_path / "embedded.onnx"
    onnx.save(model, str(embedded))
    apart = model_file(model, tmp_path)
    assert checking.holds_weights_apart(apart) and not checking.holds_weights_apart(embedded)
    assert not checking.holds_weights_apart(tmp_path / "missing.onnx")
    written = []
    monkeypatch.setattr(checking, "model_file", lambda m, folder, seed=None:
                        written.append(folder) or model_file(m, folder, seed))  # fmt: skip
    assert main(["check", str(apart), "--quiet"]) == 0
    assert written == []  # checked as it lies
    assert main(["check", str(embedded), "--quiet"]) == 0
    assert main(["check", str(apart), "--quiet", "--random-weights"]) == 0
    assert len(written) == 2
