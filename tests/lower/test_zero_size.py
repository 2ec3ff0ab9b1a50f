"""Zero-size tensors: known at compile time, folded away; the non-empty rest runs on the NPU."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc


def _model(nodes, inputs, outputs, consts=None, opset=18):
    """A float32 model over graph inputs {name: shape}; integer constants become int64."""
    inits = [
        numpy_helper.from_array(np.asarray(v, np.float32 if isinstance(v, float) else None), k)
        for k, v in (consts or {}).items()
    ]
    graph = helper.make_graph(
        nodes,
        "zero",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def check(model) -> list[int]:
    """Compile for one core and for a mesh, compare with onnxruntime; the tile ops per target."""
    rng = np.random.default_rng(0)
    feeds = {
        v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for v in model.graph.input
    }
    names = [v.name for v in model.graph.output]
    refs = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    ops = []
    for target in ("davinci-core", MESH2X2):
        program = npucc.compile(model, target=target, beam_width=4)
        got = program.run(feeds)
        for name, ref in zip(names, refs, strict=True):
            assert got[name].shape == ref.shape, name
            np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6)
        ops.append(program.stats["tile_ops"])
    return ops


def _slice(x, start, end, axis, y):
    consts = {f"{y}.s": [start], f"{y}.e": [end], f"{y}.a": [axis]}
    return helper.make_node("Slice", [x, *consts], [y]), consts


def test_empty_slice_output_is_an_empty_array_and_no_instruction():
    node, consts = _slice("x", 7, 9, 1, "y")
    assert check(_model([node], {"x": [3, 5, 4]}, ["y"], consts)) == [0, 0]


@pytest.mark.parametrize(
    ("op", "axes", "keepdims"),
    [
        ("ReduceSum", [1], 1),  # zeros
        ("ReduceMax", [1], 0),  # -inf
        ("ReduceMin", [0, 1], 1),  # +inf
        ("ReduceSum", [2], 1),  # an empty result
    ],
)
def test_reduction_over_an_empty_input_folds_to_its_identity(op, axes, keepdims):
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
    check(_model([node], {"x": [2, 0, 3]}, ["y"], {"axes": axes}))


def test_concat_drops_empty_inputs_and_the_rest_runs_on_the_npu():
    empty, consts = _slice("x", 0, 0, 1, "e")
    nodes = [
        empty,
        helper.make_node("Concat", ["e", "x", "z", "e"], ["c"], axis=1),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    ops = check(_model(nodes, {"x": [2, 3, 4], "z": [2, 0, 4]}, ["y"], consts))
    assert min(ops) > 0


def test_split_with_zero_size_parts():
    node = helper.make_node("Split", ["x", "sizes"], ["a", "b", "c", "d"], axis=1)
    ops = check(_model([node], {"x": [2, 5, 3]}, ["a", "b", "c", "d"], {"sizes": [0, 2, 0, 3]}))
    assert min(ops) > 0


def test_reshape_allowzero_of_an_empty_input():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    check(_model([node], {"x": [0, 3, 4]}, ["y"], {"shape": [3, 4, 0]}))


def test_a_model_computing_nothing_is_a_valid_empty_program():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    model = _model(nodes, {"x": [4, 0]}, ["y"])
    assert check(model) == [0, 0]
    program = npucc.compile(model)
    assert program.inputs == {"x": (4, 0)} and program.outputs == {"y": (4, 0)}
    assert program.execute({"x": np.zeros((4, 0), np.float32)}).makespan == 0


def test_a_symbolic_batch_of_a_zero_size_input_can_be_fixed():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": ["N", 0, 3]}, ["y"])
    assert npucc.compile(model, batch=2).outputs == {"y": (2, 0, 3)}


def test_fold_constants_turns_zero_size_tensors_into_constants():
    empty, consts = _slice("x", 0, 0, 1, "e")
    nodes = [empty, helper.make_node("Concat", ["x", "e"], ["y"], axis=1)]
    graph = npucc.compile_until(_model(nodes, {"x": [2, 3]}, ["y"], consts), "fold-constants")
    assert graph.tensors["e"].data is not None and graph.tensors["e"].data.shape == (2, 0)
    assert [layer.op for layer in graph.layers] == ["onnx.Concat"]
