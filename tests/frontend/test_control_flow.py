"""If, Loop and Scan expanded by the frontend: compiled, interpreted and compared with ORT."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from frontend_testutil import import_error
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.errors import NpuccError
from npucc.frontend.onnx_control import MAX_ADDED_NODES
from npucc.transforms.graph_pipeline import import_model

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
    """A model from nodes, (name, type, shape) inputs, (name, shape) float outputs and
    initializers."""
    graph = helper.make_graph(
        nodes,
        "cf",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _body(nodes, inputs, outputs) -> onnx.GraphProto:
    """A subgraph from nodes and (name, type, shape) inputs and outputs."""
    return helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )


def _branch(name: str, nodes) -> onnx.GraphProto:
    """An If branch whose output is tensor `name`."""
    return _body(nodes, [], [(name, F, None)])


def _feeds(model: onnx.ModelProto, shapes: dict | None = None) -> dict[str, np.ndarray]:
    """Seeded random float inputs (shapes from `shapes`, else the declared ones)."""
    rng = np.random.default_rng(5)
    feeds = {}
    for v in model.graph.input:
        shape = (shapes or {}).get(v.name) or [d.dim_value for d in v.type.tensor_type.shape.dim]
        feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None, **shapes):
    """Compile and run with npucc; every output within 1e-5 (relative) of onnxruntime's."""
    feeds = feeds or _feeds(model, shapes)
    program = npucc.compile(model, input_shapes={k: v.shape for k, v in feeds.items()})
    got = program.run(feeds)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for v, ref in zip(model.graph.output, want, strict=True):
        assert got[v.name].shape == ref.shape, v.name
        np.testing.assert_allclose(got[v.name], ref, rtol=1e-5, atol=1e-6)


def _if_model(cond_nodes, inputs=(("x", F, [2, 3]),), inits=()) -> onnx.ModelProto:
    """y = relu(x) + 1 if `c` else -x, with `c` made by `cond_nodes`."""
    then = _branch(
        "t",
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Add", ["r", "one"], ["t"]),
        ],
    )
    other = _branch("e", [helper.make_node("Neg", ["x"], ["e"])])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)
    shape = inputs[-1][2]
    return _model(
        [*cond_nodes, node], list(inputs), [("y", shape)], [("one", np.float32(1)), *inits]
    )


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition_is_its_taken_branch(cond):
    model = _if_model([], inits=[("c", np.array(cond))])
    _check(model)
    ops = [layer.op for layer in import_model(model).layers]
    assert ops == (["relu", "add"] if cond else ["neg"])


SHAPE_COND = [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
    helper.make_node("Greater", ["n", "one_i"], ["c"]),
]


@pytest.mark.parametrize("rows", [1, 3])
def test_if_on_a_shape_is_decided_once_the_shape_is_static(rows):
    model = _if_model(
        SHAPE_COND,
        inputs=[("x", F, ["n", 3])],
        inits=[("zero", np.int64(0)), ("one_i", np.int64(1))],
    )
    _check(model, x=(rows, 3))


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_run_time_condition_computes_both_branches_and_selects(cond):
    model = _if_model([], inputs=[("c", BOOL, []), ("x", F, [2, 3])])
    feeds = {"c": np.array(cond), "x": _feeds(model, {"c": []})["x"]}
    _check(model, feeds)
    assert "where" in [layer.op for layer in import_model(model).layers]


def test_if_on_a_run_time_condition_with_different_branch_shapes_is_refused():
    then = _branch("t", [helper.make_node("Relu", ["x"], ["t"])])
    other = _branch("e", [helper.make_node("ReduceSum", ["x"], ["e"])])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)
    model = _model([node], [("c", BOOL, []), ("x", F, [2, 3])], [("y", ["a", "b"])])
    assert import_error(model) == (
        "node 'if' (If): the condition is not a compile-time constant and the branches' "
        "outputs do not have the same static shapes (or the opset has no Where)"
    )


def _loop_body() -> onnx.GraphProto:
    """Carries h and a step count k; h = h * 0.5 + x * i, scan output h + k."""
    return _body(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=F),
            helper.make_node("Mul", ["h_in", "half"], ["hh"]),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("Add", ["hh", "xi"], ["h_out"]),
            helper.make_node("Add", ["k_in", "one"], ["k_out"]),
            helper.make_node("Add", ["h_out", "k_out"], ["s"]),
            helper.make_node("Less", ["i", "limit"], ["c_out"]),
        ],
        [("i", I64, []), ("c_in", BOOL, []), ("h_in", F, [2, 3]), ("k_in", F, [])],
        [("c_out", BOOL, []), ("h_out", F, [2, 3]), ("k_out", F, []), ("s", F, [2, 3])],
    )


def _loop_model(
    trips: list[str], inits, outputs=("h", "k", "scan"), read=("h", "k", "scan")
) -> onnx.ModelProto:
    """A Loop over `_loop_body` with inputs [M, cond] = `trips`; `read` are graph outputs."""
    node = helper.make_node(
        "Loop", [*trips, "h0", "k0"], list(outputs), name="loop", body=_loop_body()
    )
    shapes = {"h": [2, 3], "k": [], "scan": ["n", 2, 3]}
    return _model(
        [node],
        [("x", F, [2, 3]), ("h0", F, [2, 3])],
        [(o, shapes[o]) for o in outputs if o in read],
        [("half", np.float32(0.5)), ("one", np.float32(1)), ("k0", np.float32(0)), *inits],
    )


def test_loop_with_a_constant_trip_count_is_unrolled():
    model = _loop_model(
        ["m", ""], [("m", np.int64(4)), ("limit", np.int64(100))]
    )  # the condition is ignored without a cond input
    _check(model)


def test_loop_stops_where_its_condition_turns_false():
    inits = [("m", np.int64(10)), ("c", np.array(True)), ("limit", np.int64(2))]
    _check(_loop_model(["m", "c"], inits))  # iterations 0, 1, 2
    _check(_loop_model(["", "c"], inits))  # a while loop


def test_loop_outputs_may_be_absent_or_unused():
    inits = [("m", np.int64(3)), ("limit", np.int64(9))]
    _check(_loop_model(["m", ""], inits, read=("scan",)))
    _check(_loop_model(["m", ""], inits, read=("k",)))


def test_loop_with_a_run_time_trip_count_is_refused():
    model = _loop_model(["m", ""], [("limit", np.int64(9))])
    model.graph.node.insert(0, helper.make_node("ReduceMax", ["x"], ["r"], keepdims=0))
    model.graph.node.insert(1, helper.make_node("Cast", ["r"], ["m"], to=I64))
    message = "node 'loop' (Loop): the trip count is not a compile-time constant"
    assert import_error(model) == message


def test_loop_with_a_run_time_condition_is_refused():
    model = _loop_model(["m", "c"], [("m", np.int64(5))])
    model.graph.node.insert(0, helper.make_node("ReduceMax", ["x"], ["r"], keepdims=0))
    model.graph.node.insert(1, helper.make_node("Cast", ["r"], ["limit"], to=I64))
    model.graph.node.insert(2, helper.make_node("Greater", ["r", "half"], ["c"]))
    message = "node 'loop' (Loop): the loop condition is not a compile-time constant"
    assert import_error(model) == message


def test_loop_that_would_unroll_too_far_is_refused():
    model = _loop_model(["m", ""], [("m", np.int64(10**9)), ("limit", np.int64(9))])
    assert import_error(model) == (
        f"node 'loop' (Loop): expanding control flow would add more than {MAX_ADDED_NODES} "
        "nodes to the model"
    )


def test_loop_over_a_sequence_is_refused():
    model = _loop_model(["m", ""], [("m", np.int64(2)), ("limit", np.int64(9))])
    body = model.graph.node[0].attribute[0].g
    body.output[3].type.CopyFrom(helper.make_sequence_type_proto(body.output[3].type))
    message = "node 'loop' (Loop): sequence and optional values are not supported"
    with pytest.raises(NpuccError, match="^" + re.escape(message) + "$"):
        npucc.frontend.onnx_control.expand_control_flow(model)


def test_if_inside_a_loop_body_is_decided_per_iteration():
    then = _branch("t", [helper.make_node("Add", ["acc", "x"], ["t"])])
    other = _branch("e", [helper.make_node("Sub", ["acc", "x"], ["e"])])
    body = _body(
        [
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Equal", ["r", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["acc_out"], then_branch=then, else_branch=other),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("i", I64, []), ("c_in", BOOL, []), ("acc", F, [2, 3])],
        [("c_out", BOOL, []), ("acc_out", F, [2, 3])],
    )
    node = helper.make_node("Loop", ["m", "", "x"], ["y"], name="loop", body=body)
    inits = [("m", np.int64(5)), ("two", np.int64(2)), ("zero", np.int64(0))]
    model = _model([node], [("x", F, [2, 3])], [("y", [2, 3])], inits)
    _check(model)
    assert [layer.op for layer in import_model(model).layers] == ["add", "sub"] * 2 + ["add"]


def _scan_model(opset: int, **attrs) -> onnx.ModelProto:
    """A Scan summing the rows of two scan inputs into a state, scanning out state and a*b."""
    body = _body(
        [
            helper.make_node("Add", ["s_in", "a"], ["t"]),
            helper.make_node("Add", ["t", "b"], ["s_out"]),
            helper.make_node("Mul", ["a", "b"], ["p"]),
        ],
        [("s_in", F, [4]), ("a", F, [4]), ("b", F, [4])],
        [("s_out", F, [4]), ("s_scan", F, [4]), ("p", F, [4])],
    )
    body.node.append(helper.make_node("Identity", ["s_out"], ["s_scan"]))
    node = helper.make_node(
        "Scan", ["s0", "xa", "xb"], ["s", "ys", "ps"], name="scan", num_scan_inputs=2, body=body,
        **attrs,
    )  # fmt: skip
    inputs = [("s0", F, [4]), ("xa", F, [3, 4]), ("xb", F, [4, 3])]
    return _model([node], inputs, [("s", [4]), ("ys", ["a", "b"]), ("ps", ["c", "d"])], opset=opset)


@pytest.mark.parametrize(
    "attrs",
    [
        {"scan_input_axes": [0, 1]},
        {
            "scan_input_axes": [0, -1],
            "scan_input_directions": [1, 0],
            "scan_output_axes": [1, -2],
            "scan_output_directions": [0, 1],
        },
    ],
)
def test_scan_is_unrolled_over_its_axes_and_directions(attrs):
    _check(_scan_model(16, **attrs))


def test_opset_8_scan_is_unrolled_per_batch_entry():
    body = _body(
        [helper.make_node("Add", ["s_in", "a"], ["s_out"])],
        [("s_in", F, [2]), ("a", F, [2])],
        [("s_out", F, [2])],
    )
    node = helper.make_node(
        "Scan", ["", "s0", "x"], ["s"], name="scan", num_scan_inputs=1, body=body, directions=[1]
    )
    _check(_model([node], [("s0", F, [3, 2]), ("x", F, [3, 4, 2])], [("s", [3, 2])], opset=8))


def test_expansion_is_deterministic_and_renames_per_iteration():
    inits = [("m", np.int64(2)), ("limit", np.int64(9))]
    texts = {import_model(_loop_model(["m", ""], inits)).to_text() for _ in range(2)}
    assert len(texts) == 1
    assert '%"loop/1/hh" = mul(%"loop/0/h_out", %"half")' in texts.pop()
