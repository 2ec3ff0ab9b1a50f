"""Run-time comparisons, logic and Where, training-mode BN and Dropout, casts between float types.

Each model is compiled, interpreted and compared with onnxruntime (npucc.checking).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.errors import NpuccError

F32, F16, BF16, F64 = (
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.BFLOAT16,
    TensorProto.DOUBLE,
)


def model(nodes, inputs, outputs, inits=None, opset=18):
    """A model from nodes, {input: (elem type, shape)} and {output: elem type}."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def check(m, feeds=None, targets=("davinci-core", MESH2X2)):
    """npucc's outputs equal onnxruntime's within the `npucc check` tolerance."""
    feeds = feeds or random_inputs(
        {v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim) for v in m.graph.input},
        model=m,
    )
    ref = run_onnxruntime(m, feeds)
    for target in targets:
        got = npucc.compile(m, target=target, beam_width=4).run(feeds)
        for name, r in ref.items():
            assert got[name].dtype == r.dtype, name
        bad = [c for c in compare(got, ref) if not c.ok]
        assert not bad, bad
    return ref


def error(m) -> str:
    with pytest.raises(NpuccError) as exc:
        npucc.compile(m)
    return str(exc.value)


@pytest.mark.parametrize("op", ["Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Equal"])
def test_comparison_selects_with_where(op):
    # rounded inputs tie often; the condition broadcasts [3,1,6] against [2,3,40,6]
    nodes = [
        helper.make_node(op, ["ra", "rb"], ["c"]),
        helper.make_node("Where", ["c", "x", "y"], ["out"]),
    ]
    m = model(
        nodes,
        {"ra": (F32, [3, 1, 6]), "rb": (F32, [3, 1, 6]), "x": (F32, [2, 3, 40, 6])},
        {"out": F32},
        {"y": np.float32(-7.0)},
    )
    rng = np.random.default_rng(3)
    feeds = {
        "ra": np.round(rng.standard_normal((3, 1, 6))).astype(np.float32),
        "rb": np.round(rng.standard_normal((3, 1, 6))).astype(np.float32),
        "x": rng.standard_normal((2, 3, 40, 6)).astype(np.float32),
    }
    check(m, feeds)


def test_where_tiles_a_large_select_and_logic_ops():
    # Not, And, Or, Xor of comparisons; big enough for several UB tiles per operand
    shape = [4, 96, 160]
    nodes = [
        helper.make_node("Less", ["x", "y"], ["lt"]),
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("Not", ["lt"], ["ge"]),
        helper.make_node("And", ["ge", "pos"], ["both"]),
        helper.make_node("Or", ["both", "mask"], ["either"]),
        helper.make_node("Xor", ["either", "lt"], ["sel"]),
        helper.make_node("Where", ["sel", "x", "y"], ["out"]),
    ]
    mask = np.random.default_rng(1).random(shape[-1:]) < 0.5
    m = model(
        nodes,
        {"x": (F32, shape), "y": (F32, shape)},
        {"out": F32},
        {"zero": np.float32(0.0), "mask": mask},
    )
    check(m)


def test_where_is_exact_on_non_finite_values():
    nodes = [
        helper.make_node("Less", ["x", "y"], ["c"]),
        helper.make_node("Where", ["c", "x", "y"], ["out"]),
    ]
    m = model(nodes, {"x": (F32, [6]), "y": (F32, [6])}, {"out": F32})
    x = np.array([np.inf, -np.inf, np.nan, 1.0, 2.0, -3.0], np.float32)
    y = np.array([0.0, np.inf, 5.0, np.nan, -np.inf, np.inf], np.float32)
    got = npucc.compile(m).run({"x": x, "y": y})["out"]
    ref = run_onnxruntime(m, {"x": x, "y": y})["out"]
    np.testing.assert_array_equal(got, ref)


def test_where_with_a_constant_condition_and_non_finite_operands():
    cond = np.array([[True, False, True]])
    m = model(
        [helper.make_node("Where", ["c", "x", "y"], ["out"])],
        {"x": (F32, [2, 3]), "y": (F32, [2, 3])},
        {"out": F32},
        {"c": cond},
    )
    x = np.array([[1, np.inf, 2], [3, np.nan, 4]], np.float32)
    y = np.array([[np.nan, 5, -np.inf], [6, 7, np.inf]], np.float32)
    got = npucc.compile(m).run({"x": x, "y": y})["out"]
    np.testing.assert_array_equal(got, np.where(cond, x, y))


def test_a_boolean_graph_output_is_converted_by_the_host():
    m = model(
        [helper.make_node("Less", ["x", "y"], ["c"])],
        {"x": (F32, [4]), "y": (F32, [4])},
        {"c": TensorProto.BOOL},
    )
    x, y = np.array([1, 2, 3, 4], np.float32), np.array([4, 2, 1, 5], np.float32)
    got = npucc.compile(m).run({"x": x, "y": y})["c"]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, x < y)


@pytest.mark.parametrize("shape", [[2, 3, 4, 5], [6, 3]])
def test_batchnorm_training_mode_with_running_statistics(shape):
    c = shape[1]
    node = helper.make_node(
        "BatchNormalization",
        ["x", "s", "bias", "mean", "var"],
        ["y", "running_mean", "running_var"],
        training_mode=1,
        epsilon=1e-2,
        momentum=0.8,
    )
    inputs = {"x": (F32, shape), "s": (F32, [c]), "bias": (F32, [c]), "mean": (F32, [c])}
    m = model(
        [node],
        inputs,
        {"y": F32, "running_mean": F32, "running_var": F32},
        {"var": np.linspace(0.5, 1.5, c, dtype=np.float32)},
        opset=15,
    )
    check(m)


def test_dropout_training_mode_is_the_identity_only_with_ratio_zero():
    def dropout(ratio):
        node = helper.make_node("Dropout", ["x", "r", "t"], ["y"], seed=0)
        inits = {"r": np.float32(ratio), "t": np.array(True)}
        return model([node], {"x": (F32, [3, 4])}, {"y": F32}, inits, opset=13)

    check(dropout(0.0))
    assert "ratio other than 0 is random" in error(dropout(0.5))


@pytest.mark.parametrize(("to", "dtype"), [(F16, np.float16), (BF16, ml_dtypes.bfloat16)])
def test_cast_inside_a_float32_graph_rounds(to, dtype):
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=to),
        helper.make_node("Cast", ["h"], ["f"], to=F32),
        helper.make_node("Sub", ["x", "f"], ["err"]),
    ]
    m = model(nodes, {"x": (F32, [5, 70])}, {"err": F32, "f": F32})
    x = (np.random.default_rng(2).standard_normal((5, 70)) * 1000).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, 1e6, -7e4]
    got = npucc.compile(m).run({"x": x})
    with np.errstate(over="ignore"):
        want = x.astype(dtype).astype(np.float32)
    np.testing.assert_array_equal(got["f"], want)
    np.testing.assert_array_equal(got["f"], run_onnxruntime(m, {"x": x})["f"])


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        (F32, F16),
        (F16, F32),
        (F32, BF16),
        (BF16, F32),
        (F32, F64),
        (F64, F32),
        (F16, F64),
        (F64, F16),
    ],
)
def test_cast_at_the_graph_boundary(src, dst):
    m = model([helper.make_node("Cast", ["x"], ["y"], to=dst)], {"x": (src, [3, 50])}, {"y": dst})
    feeds = random_inputs({"x": (3, 50)}, model=m)
    got = npucc.compile(m).run(feeds)["y"]
    want = feeds["x"].astype(got.dtype)
    assert got.dtype == np.dtype(helper.tensor_dtype_to_np_dtype(dst))
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_half_input_feeds_float32_arithmetic_through_a_cast():
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=F32),
        helper.make_node("Mul", ["xf", "w"], ["p"]),
        helper.make_node("Cast", ["p"], ["y"], to=F16),
    ]
    m = model(nodes, {"x": (F16, [4, 33]), "w": (F32, [33])}, {"y": F16})
    check(m)


def test_other_float_types_outside_a_cast_are_clean_errors():
    add = model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": (F16, [4])}, {"y": F16})
    assert "tensor 'x' is f16; npucc needs f32" in error(add)
    same = model([helper.make_node("Cast", ["x"], ["y"], to=F64)], {"x": (F64, [4])}, {"y": F64})
    assert "double input 'x' would lose precision" in error(same)
    f8 = model(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)],
        {"x": (F32, [4])},
        {"y": TensorProto.FLOAT8E4M3FN},
    )
    assert "float8" in error(f8)


def test_a_half_input_must_be_passed_as_half():
    m = model([helper.make_node("Cast", ["x"], ["y"], to=F32)], {"x": (F16, [4])}, {"y": F32})
    with pytest.raises(NpuccError, match="has dtype float32, expected float16"):
        npucc.compile(m).run({"x": np.zeros(4, np.float32)})
