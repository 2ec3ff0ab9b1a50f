"""Differential fuzzing of run-time integer graphs: random chains of integer ONNX operators on
int32/int64 inputs must agree with onnxruntime bit for bit, or be refused with an NpuccError;
never a wrong number, never another exception."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.errors import NpuccError

SHAPE = [2, 3]
BINARY = ("Add", "Sub", "Mul", "Min", "Max")
DIVIDING = ("Div", "Mod")  # by |y| + 1, negated or not: never by zero
UNARY = ("Neg", "Abs")
OPS = (*BINARY, *DIVIDING, *UNARY, "CumSum", "Where", "CastHalf", "Clip")

# one step: op, two operand picks (indexes wrap over the tensors made so far), two flags
STEP = st.tuples(st.sampled_from(OPS), st.integers(0, 99), st.integers(0, 99), st.booleans(),
                 st.booleans())  # fmt: skip


class _Chain:
    """A graph under construction: nodes, initializers, the integer tensors made so far."""

    def __init__(self, elem: int) -> None:
        self.elem, self.numpy = elem, helper.tensor_dtype_to_np_dtype(elem)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.made = ["a", "b"]

    def const(self, value: object, dtype: object = None) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, dtype or self.numpy), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def step(self, op: str, i: int, j: int, flag: bool, other: bool) -> None:
        x, y = self.made[i % len(self.made)], self.made[j % len(self.made)]
        if op in BINARY:
            out = self.node(op, [x, y])
        elif op in DIVIDING:
            d = self.node("Add", [self.node("Abs", [y]), self.const(1)])
            d = self.node("Neg", [d]) if flag else d
            out = self.node(op, [x, d], **({"fmod": int(other)} if op == "Mod" else {}))
        elif op in UNARY:
            out = self.node(op, [x])
        elif op == "CumSum":
            axis = self.const(int(flag), np.int64)
            out = self.node("CumSum", [x, axis], exclusive=int(flag), reverse=int(other))
        elif op == "Where":
            cond = self.node("Greater" if flag else "Equal", [x, y])
            out = self.node("Where", [cond, x, y])
        elif op == "CastHalf":  # float -> integer truncates toward zero
            f = self.node("Cast", [x], to=TensorProto.FLOAT)
            out = self.node("Cast", [self.node("Mul", [f, self.const(0.37, np.float32)])],
                            to=self.elem)  # fmt: skip
        else:
            out = self.node("Clip", [x, self.const(-7), self.const(9)])
        self.made.append(out)

    def model(self) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "y"
        graph = helper.make_graph(
            self.nodes,
            "integer_chain",
            [helper.make_tensor_value_info(n, self.elem, SHAPE) for n in ("a", "b")],
            [helper.make_tensor_value_info("y", self.elem, SHAPE)],
            self.inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model


@settings(
    max_examples=40,
    derandomize=True,  # the same examples every run, no example database
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    elem=st.sampled_from((TensorProto.INT64, TensorProto.INT32)),
    steps=st.lists(STEP, min_size=1, max_size=6),
    seed=st.integers(0, 2**31),
)
def test_integer_chains_agree_with_onnxruntime_or_are_refused(elem, steps, seed):
    chain = _Chain(elem)
    for step in steps:
        chain.step(*step)
    model = chain.model()
    rng = np.random.default_rng(seed)
    feeds = {n: rng.integers(-40, 40, SHAPE).astype(chain.numpy) for n in ("a", "b")}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    try:
        got = npucc.compile(model).run(feeds)["y"]
    except NpuccError:
        return  # refused (an intermediate beyond float32's exact integers): allowed
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
