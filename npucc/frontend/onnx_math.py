"""Legalisations of element-wise ONNX ops: math, activations, comparisons, logic, Where and Cast.

Each function maps one `onnx.<Op>` layer onto canonical layers (see npucc.ir.graph), composing
the vector ops where no canonical op exists (LeakyRelu = max(x, alpha*x), Elu, HardSwish, ...).
"""

from __future__ import annotations

import math

import numpy as np

from npucc.frontend.graph_edit import const, node_error
from npucc.frontend.onnx_seq import INF, Legalize, Seq, attr, broadcast, scalar_unary
from npucc.ir.dtypes import IR_INTS
from npucc.ir.graph import Graph, Layer


def unary(op: str) -> Legalize:
    """ONNX op -> one canonical unary layer."""

    def lower(g: Graph, layer: Layer) -> list[Layer]:
        s = Seq(g, layer)
        s.add(op, layer.inputs[:1], s.y)
        return s.done()

    return lower


# ONNX ops that are one vector unary op of the same name, lower case
MATH_UNARY = (
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
    "Floor", "Ceil", "Round", "Sign",
)  # fmt: skip


def leaky_relu(g: Graph, layer: Layer) -> list[Layer]:
    """max(x, alpha*x) for alpha <= 1, min(x, alpha*x) otherwise."""
    alpha = float(attr(layer, "alpha", 0.01))
    s = Seq(g, layer)
    ax = scalar_unary(s, "muls", layer.inputs[0], alpha)
    s.add("max" if alpha <= 1 else "min", [layer.inputs[0], ax], s.y)
    return s.done()


def _negative_part(s: Seq, x: str) -> str:
    return s.add("clip", [x], min=-INF, max=0.0)


def prelu(g: Graph, layer: Layer) -> list[Layer]:
    """relu(x) + slope * min(x, 0)."""
    x, slope = layer.inputs[:2]
    s = Seq(g, layer)
    neg = s.add("mul", [_negative_part(s, x), slope])
    s.add("add", [s.add("relu", [x]), neg], s.y)
    return s.done()


def _elu_core(s: Seq, x: str, alpha: float, inner: float, out: str) -> str:
    """out = relu(x) + alpha * (exp(min(x, 0) * inner) - 1)."""
    neg = _negative_part(s, x)
    if inner != 1.0:
        neg = scalar_unary(s, "muls", neg, inner)
    e = scalar_unary(s, "adds", s.add("exp", [neg]), -1.0)
    e = scalar_unary(s, "muls", e, alpha)
    return s.add("add", [s.add("relu", [x]), e], out)


def elu(g: Graph, layer: Layer) -> list[Layer]:
    """Elu, and Selu (gamma times an Elu), and Celu (exp of x/alpha)."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    op = layer.op.removeprefix("onnx.")
    if op == "Selu":
        alpha = float(attr(layer, "alpha", 1.67326319217681884765625))
        gamma = float(attr(layer, "gamma", 1.05070102214813232421875))
        scalar_unary(s, "muls", _elu_core(s, x, alpha, 1.0, ""), gamma, s.y)
    elif op == "Celu":
        alpha = float(attr(layer, "alpha", 1.0))
        _elu_core(s, x, alpha, 1.0 / alpha, s.y)
    else:
        _elu_core(s, x, float(attr(layer, "alpha", 1.0)), 1.0, s.y)
    return s.done()


def _hard_sigmoid(s: Seq, x: str, alpha: float, beta: float, out: str = "") -> str:
    t = scalar_unary(s, "adds", scalar_unary(s, "muls", x, alpha), beta)
    return s.add("clip", [t], out, min=0.0, max=1.0)


def hard_sigmoid(g: Graph, layer: Layer) -> list[Layer]:
    """clip(alpha * x + beta, 0, 1)."""
    s = Seq(g, layer)
    alpha, beta = float(attr(layer, "alpha", 0.2)), float(attr(layer, "beta", 0.5))
    _hard_sigmoid(s, layer.inputs[0], alpha, beta, s.y)
    return s.done()


def hard_swish(g: Graph, layer: Layer) -> list[Layer]:
    """x * hardsigmoid(x; 1/6, 1/2)."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    s.add("mul", [x, _hard_sigmoid(s, x, 1 / 6, 0.5)], s.y)
    return s.done()


def softplus(g: Graph, layer: Layer) -> list[Layer]:
    """log(1 + exp(x)); Mish multiplies x by its tanh."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    mish = layer.op == "onnx.Mish"
    sp = s.add("log", [scalar_unary(s, "adds", s.add("exp", [x]), 1.0)], "" if mish else s.y)
    if mish:
        s.add("mul", [x, s.add("tanh", [sp])], s.y)
    return s.done()


def softsign(g: Graph, layer: Layer) -> list[Layer]:
    """x / (1 + |x|)."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    s.add("div", [x, scalar_unary(s, "adds", s.add("abs", [x]), 1.0)], s.y)
    return s.done()


def thresholded_relu(g: Graph, layer: Layer) -> list[Layer]:
    """x where x > alpha, else 0."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    above = s.add("gt", [x, s.const(np.asarray(attr(layer, "alpha", 1.0)), "alpha")])
    s.add("mask", [x, above], s.y)
    return s.done()


def shrink(g: Graph, layer: Layer) -> list[Layer]:
    """x + bias where x < -lambd, x - bias where x > lambd, else 0."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    lambd, bias = float(attr(layer, "lambd", 0.5)), float(attr(layer, "bias", 0.0))
    low = s.add("lt", [x, s.const(np.asarray(-lambd), "low")])
    high = s.add("gt", [x, s.const(np.asarray(lambd), "high")])
    raised = s.add("mask", [scalar_unary(s, "adds", x, bias), low])
    lowered = s.add("mask", [scalar_unary(s, "adds", x, -bias), high])
    s.add("add", [raised, lowered], s.y)
    return s.done()


def swish(g: Graph, layer: Layer) -> list[Layer]:
    """Swish: x * sigmoid(alpha * x); SwiGLU multiplies the Swish of a by b."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    alpha = float(attr(layer, "alpha", 1.0))
    scaled = scalar_unary(s, "muls", x, alpha) if alpha != 1.0 else x
    gated = layer.op == "onnx.SwiGLU"
    swished = s.add("mul", [x, s.add("sigmoid", [scaled])], "" if gated else s.y)
    if gated:
        s.add("mul", [swished, layer.inputs[1]], s.y)
    return s.done()


def mod(g: Graph, layer: Layer) -> list[Layer]:
    """Mod: fmod=1 truncates (C's fmod), fmod=0 floors (the divisor's sign)."""
    s = Seq(g, layer)
    s.add("fmod" if int(attr(layer, "fmod", 0)) else "mod", list(layer.inputs[:2]), s.y)
    return s.done()


def gelu(g: Graph, layer: Layer) -> list[Layer]:
    """The fused gelu layer (exact erf form, or the tanh approximation)."""
    s = Seq(g, layer)
    approximate = str(attr(layer, "approximate", "none"))
    if approximate not in ("none", "tanh"):
        raise node_error(layer, f"unknown approximate={approximate!r}")
    s.add("gelu", layer.inputs[:1], s.y, approximate=approximate)
    return s.done()


def pow_(g: Graph, layer: Layer) -> list[Layer]:
    """x ** y: a scalar constant exponent becomes pows, anything else the binary pow."""
    x, p = layer.inputs[:2]
    s = Seq(g, layer)
    if g.is_const(p) and const(g, p).size == 1 and g.tensors[s.y].shape == g.tensors[x].shape:
        scalar_unary(s, "pows", x, float(const(g, p).reshape(-1)[0]), s.y)
    else:
        s.add("pow", [x, p], s.y)
    return s.done()


def mean(g: Graph, layer: Layer) -> list[Layer]:
    """Variadic Mean: a chain of adds, then a scale by 1/n."""
    s = Seq(g, layer)
    ins = list(layer.inputs)
    acc = ins[0]
    for t in ins[1:]:
        acc = s.add(
            "add",
            [acc, t],
            s.tmp(np.broadcast_shapes(g.tensors[acc].shape, g.tensors[t].shape), "sum"),
        )
    scalar_unary(s, "muls", acc, 1.0 / len(ins), s.y)
    return s.done()


def log_softmax(g: Graph, layer: Layer) -> list[Layer]:
    """log(softmax(x)) over one axis (opset < 13: the flattened trailing dims, when they are 1)."""
    shape = g.tensors[layer.inputs[0]].shape
    axis = int(attr(layer, "axis", -1 if g.opset >= 13 else 1)) % len(shape)
    if g.opset < 13 and math.prod(shape[axis + 1 :]) != 1:
        raise node_error(layer, "opset < 13 LogSoftmax over several axes is not supported")
    s = Seq(g, layer)
    s.add("log", [s.add("softmax", layer.inputs[:1], axis=axis)], s.y)
    return s.done()


def where(g: Graph, layer: Layer) -> list[Layer]:
    """Where: the canonical where layer (a constant condition is a constant 1.0/0.0 mask)."""
    cond, a, b = layer.inputs
    s = Seq(g, layer)
    if g.is_const(cond):
        c = const(g, cond).astype(bool)
        if c.all() or not c.any():
            broadcast(s, a if c.all() else b, s.y)
            return s.done()
    s.add("where", [_boolean(s, cond), a, b], s.y)
    return s.done()


COMPARISONS = {
    "Less": "lt",
    "Greater": "gt",
    "LessOrEqual": "le",
    "GreaterOrEqual": "ge",
    "Equal": "eq",
}


LOGIC = {"And": "mul", "Or": "max", "Xor": "ne"}  # on booleans held as 1.0/0.0


def _boolean(s: Seq, name: str) -> str:
    """A boolean operand as float 1.0/0.0: a constant is converted, a run-time one is held so."""
    if s.g.is_const(name):
        return s.const(const(s.g, name).astype(bool).astype(np.float32), "bool")
    return name


def compare(g: Graph, layer: Layer) -> list[Layer]:
    """Less/Greater/LessOrEqual/GreaterOrEqual/Equal: 1.0 where true, else 0.0."""
    s = Seq(g, layer)
    s.add(COMPARISONS[layer.op.removeprefix("onnx.")], list(layer.inputs), s.y)
    return s.done()


def logic(g: Graph, layer: Layer) -> list[Layer]:
    """Not/And/Or/Xor on booleans held as 1.0/0.0: not, mul, max, ne."""
    s = Seq(g, layer)
    ins = [_boolean(s, t) for t in layer.inputs]
    op = layer.op.removeprefix("onnx.")
    s.add("not" if op == "Not" else LOGIC[op], ins, s.y)
    return s.done()


CAST_TYPES = ("f32", "f64", "f16", "bf16")  # FLOAT, DOUBLE, FLOAT16, BFLOAT16


INTEGER_TYPES = tuple(t for t in IR_INTS if t != "bool")  # held as float32 (npucc.ir.dtypes)


def trunc(s: Seq, x: str, out: str) -> str:
    """out = x truncated toward zero: x - fmod(x, 1), exact (NaN and inf give NaN)."""
    one = s.const(np.ones((), np.float32), "one")
    frac = s.add("fmod", [x, one], s.tmp(s.g.tensors[x].shape, "frac"))
    return s.add("sub", [x, frac], out)


ROUNDING = {"f16": "f16", "bf16": "bf16"}  # a narrowing cast rounds with this vector op


def cast(g: Graph, layer: Layer) -> list[Layer]:
    """Cast/CastLike: to BOOL `ne 0` (booleans are held as 1.0/0.0), a float to an integer type
    truncated toward zero (as onnxruntime), to float16/bfloat16 a rounding, else a view.

    Values live as float32: a cast to FLOAT or DOUBLE is exact, as is one of an integer or a
    boolean, but a DOUBLE graph input is rounded to float32 when it is loaded, so it may only
    be cast to a narrower float type. Other types (float8, ...) are rejected by legalize-onnx's
    type check.
    """
    x, y = layer.inputs[0], layer.outputs[0]
    src, dst = g.tensors[x].dtype, g.tensors[y].dtype
    if src == "f64" and dst not in ("f32", *ROUNDING) and x in g.inputs:
        raise node_error(layer, f"double input '{x}' would lose precision (npucc computes in "
                         "float32); only a cast to a narrower float type may read it")  # fmt: skip
    s = Seq(g, layer)
    if dst == "bool":
        s.add("ne", [x, s.const(np.zeros((), np.float32), "zero")], s.y)  # 1.0 unless 0
    elif dst in INTEGER_TYPES and src in CAST_TYPES:
        trunc(s, x, s.y)
    elif dst in ROUNDING and src != dst:
        s.add(ROUNDING[dst], [x], s.y)
    else:
        s.add("reshape", [x], s.y)
    return s.done()
