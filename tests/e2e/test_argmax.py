"""ArgMax/ArgMin/TopK at run time: float32 positions, int64 graph outputs converted by the host."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.errors import NpuccError
from npucc.ir.stream_parse import parse_stream


def _model(op, axis, keepdims, last, shape, cast=False) -> onnx.ModelProto:
    out = list(shape)
    if keepdims:
        out[axis] = 1
    else:
        out.pop(axis)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),  # many ties at 0
        helper.make_node(op, ["r"], ["i"], axis=axis, keepdims=keepdims, select_last_index=last),
    ]
    y_type = TensorProto.INT64
    if cast:  # the indices used inside the graph
        nodes += [
            helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["f", "f"], ["y"]),
        ]
        y_type = TensorProto.FLOAT
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        nodes,
        "arg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", y_type, out)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    ("op", "axis", "keepdims", "last", "shape"),
    [
        ("ArgMax", 1, 1, 0, (2, 7, 5)),
        ("ArgMax", -1, 0, 1, (3, 40)),
        ("ArgMin", 0, 1, 1, (6, 4)),
        ("ArgMin", 2, 0, 0, (2, 3, 33)),
    ],
)
@pytest.mark.parametrize("cast", [False, True])
def test_arg_extreme_matches_onnxruntime(op, axis, keepdims, last, shape, cast):
    model = _model(op, axis, keepdims, last, shape, cast)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    program = npucc.compile(model)
    got = program.run({"x": x})["y"]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)
    if not cast:
        assert "int64[" in next(x for x in program.stream.splitlines() if '"y"' in x)


def test_int64_is_a_type_of_inputs_and_outputs_only():
    model = _model("ArgMax", 1, 1, 0, (2, 7, 5))
    stream = npucc.compile(model).stream
    bad = "\n".join(
        line.replace("f32[", "int64[") if line.startswith("tensor temp") else line
        for line in stream.splitlines()
    )
    with pytest.raises(NpuccError, match="int64, .* for inputs and outputs"):
        parse_stream(bad)


@pytest.mark.parametrize(
    ("shape", "k", "axis", "largest", "outputs"),
    [
        ((3, 10), 3, 1, 1, ("v", "i")),
        ((3, 10), 4, -1, 0, ("v", "i")),  # smallest first; ties (Relu zeros) to the lower index
        ((6, 4, 5), 2, 0, 1, ("v", "i")),
        ((2, 9), 1, 1, 1, ("v", "i")),
        ((2, 9), 3, 1, 1, ("i",)),  # only the indices leave the graph
    ],
)
def test_top_k_matches_onnxruntime(shape, k, axis, largest, outputs):
    out_shape = list(shape)
    out_shape[axis] = k
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("TopK", ["r", "k"], ["v", "i"], axis=axis, largest=largest),
    ]
    types = {"v": TensorProto.FLOAT, "i": TensorProto.INT64}
    graph = helper.make_graph(
        nodes,
        "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(o, types[o], out_shape) for o in outputs],
        [numpy_helper.from_array(np.array([k], np.int64), "k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    refs = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    got = npucc.compile(model).run({"x": x})
    for name, ref in zip(outputs, refs, strict=True):
        assert got[name].dtype == ref.dtype
        np.testing.assert_array_equal(got[name], ref)
