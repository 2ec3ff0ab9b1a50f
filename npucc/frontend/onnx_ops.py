"""Legalisations of the ONNX ops beyond the CNN core: activations, reductions, data movement.

Each function maps one `onnx.<Op>` layer onto canonical layers (see npucc.ir.graph), composing
the vector ops where no canonical op exists (LeakyRelu = max(x, alpha*x), Elu, HardSwish, ...).
Index and shape operands (Gather indices, Slice starts, Pad pads, Resize scales, ...) must be
constant after fold-constants: npucc moves float32 data only, at addresses known at compile time.
"""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from npucc.frontend.common import (
    add_const,
    const,
    fresh_layer_name,
    fresh_name,
    node_error,
    onnx_op,
)
from npucc.ir.dtypes import IR_INTS
from npucc.ir.graph import Graph, Layer, Tensor, row_major_strides, runs

Legalize = Callable[[Graph, Layer], list[Layer]]
INF = math.inf


class Seq:
    """Builds the canonical layers replacing one ONNX layer; the last one writes its output."""

    __slots__ = ("g", "layer", "layers")

    def __init__(self, g: Graph, layer: Layer) -> None:
        self.g = g
        self.layer = layer
        self.layers: list[Layer] = []

    def tmp(self, shape: tuple[int, ...], tag: str) -> str:
        """A new f32 intermediate tensor."""
        name = fresh_name(self.g, f"{self.layer.outputs[0]}.{tag}")
        self.g.add_tensor(Tensor(name, tuple(shape)))
        return name

    def add(self, op: str, inputs: list[str], out: str = "", /, **attrs: object) -> str:
        """Append a layer; without `out` it writes a new tensor of the layer's output shape."""
        out = out or self.tmp(self.g.tensors[self.layer.outputs[0]].shape, op)
        name = fresh_layer_name(self.g, f"{self.layer.name}.{op}")
        taken = {x.name for x in self.layers}
        while name in taken:
            name = fresh_layer_name(self.g, f"{name}_")
        self.layers.append(Layer(name, op, inputs, [out], dict(attrs)))
        return out

    def done(self) -> list[Layer]:
        """The layers, the last renamed after the ONNX node."""
        self.layers[-1].name = self.layer.name
        return self.layers

    @property
    def y(self) -> str:
        """The ONNX layer's (first) output."""
        return self.layer.outputs[0]

    def const(self, data: np.ndarray, tag: str) -> str:
        """A new constant tensor."""
        return add_const(self.g, f"{self.layer.name}.{tag}", np.asarray(data, np.float32))


def attr(layer: Layer, key: str, default: object) -> Any:
    """An attribute with its default (untyped, like Layer.attrs: int, float, str, list, ...)."""
    return layer.attrs.get(key, default)


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


def _scalar_unary(s: Seq, op: str, x: str, value: float, out: str = "") -> str:
    return s.add(op, [x], out, scalar=float(value))


def leaky_relu(g: Graph, layer: Layer) -> list[Layer]:
    """max(x, alpha*x) for alpha <= 1, min(x, alpha*x) otherwise."""
    alpha = float(attr(layer, "alpha", 0.01))
    s = Seq(g, layer)
    ax = _scalar_unary(s, "muls", layer.inputs[0], alpha)
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
        neg = _scalar_unary(s, "muls", neg, inner)
    e = _scalar_unary(s, "adds", s.add("exp", [neg]), -1.0)
    e = _scalar_unary(s, "muls", e, alpha)
    return s.add("add", [s.add("relu", [x]), e], out)


def elu(g: Graph, layer: Layer) -> list[Layer]:
    """Elu, and Selu (gamma times an Elu), and Celu (exp of x/alpha)."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    op = layer.op.removeprefix("onnx.")
    if op == "Selu":
        alpha = float(attr(layer, "alpha", 1.67326319217681884765625))
        gamma = float(attr(layer, "gamma", 1.05070102214813232421875))
        _scalar_unary(s, "muls", _elu_core(s, x, alpha, 1.0, ""), gamma, s.y)
    elif op == "Celu":
        alpha = float(attr(layer, "alpha", 1.0))
        _elu_core(s, x, alpha, 1.0 / alpha, s.y)
    else:
        _elu_core(s, x, float(attr(layer, "alpha", 1.0)), 1.0, s.y)
    return s.done()


def _hard_sigmoid(s: Seq, x: str, alpha: float, beta: float, out: str = "") -> str:
    t = _scalar_unary(s, "adds", _scalar_unary(s, "muls", x, alpha), beta)
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
    sp = s.add("log", [_scalar_unary(s, "adds", s.add("exp", [x]), 1.0)], "" if mish else s.y)
    if mish:
        s.add("mul", [x, s.add("tanh", [sp])], s.y)
    return s.done()


def softsign(g: Graph, layer: Layer) -> list[Layer]:
    """x / (1 + |x|)."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    s.add("div", [x, _scalar_unary(s, "adds", s.add("abs", [x]), 1.0)], s.y)
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
    raised = s.add("mask", [_scalar_unary(s, "adds", x, bias), low])
    lowered = s.add("mask", [_scalar_unary(s, "adds", x, -bias), high])
    s.add("add", [raised, lowered], s.y)
    return s.done()


def swish(g: Graph, layer: Layer) -> list[Layer]:
    """Swish: x * sigmoid(alpha * x); SwiGLU multiplies the Swish of a by b."""
    s = Seq(g, layer)
    x = layer.inputs[0]
    alpha = float(attr(layer, "alpha", 1.0))
    scaled = _scalar_unary(s, "muls", x, alpha) if alpha != 1.0 else x
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
        _scalar_unary(s, "pows", x, float(const(g, p).reshape(-1)[0]), s.y)
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
    _scalar_unary(s, "muls", acc, 1.0 / len(ins), s.y)
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


# ------------------------------------------------------------------------------ reductions

REDUCE = {  # ONNX op -> (pre-op, reduce op, post-op)
    "ReduceSum": ("", "sum", ""),
    "ReduceMean": ("", "mean", ""),
    "ReduceMax": ("", "max", ""),
    "ReduceMin": ("", "min", ""),
    "ReduceL1": ("abs", "sum", ""),
    "ReduceL2": ("square", "sum", "sqrt"),
    "ReduceSumSquare": ("square", "sum", ""),
    "ReduceLogSum": ("", "sum", "log"),
    "ReduceLogSumExp": ("exp", "sum", "log"),
    "ReduceProd": ("", "prod", ""),
}


def _reduce_axes(g: Graph, layer: Layer, rank: int) -> tuple[int, ...] | None:
    """The reduced axes (sorted, non-negative); None when there is nothing to reduce."""
    axes: tuple[int, ...] | None = None
    if "axes" in layer.attrs:
        axes = tuple(layer.attrs["axes"])
    elif len(layer.inputs) > 1 and layer.inputs[1]:
        if not g.is_const(layer.inputs[1]):
            raise node_error(layer, "axes must be constant")
        axes = tuple(int(a) for a in const(g, layer.inputs[1]).reshape(-1))
    if not axes:
        if int(attr(layer, "noop_with_empty_axes", 0)):
            return None
        axes = tuple(range(rank))
    return tuple(sorted({a % rank for a in axes}))


def reduce(g: Graph, layer: Layer) -> list[Layer]:
    """ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp over constant axes."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    pre, op, post = REDUCE[layer.op.removeprefix("onnx.")]
    axes = _reduce_axes(g, layer, len(shape))
    s = Seq(g, layer)
    if pre == "square":
        x = _scalar_unary(s, "pows", x, 2.0, s.tmp(shape, "sq"))
    elif pre:
        x = s.add(pre, [x], s.tmp(shape, pre))
    if axes is None:
        s.add(post or "reshape", [x], s.y)
        return s.done()
    out_shape = g.tensors[s.y].shape
    r = s.add("reduce", [x], "" if post else s.y, op=op, axes=axes)
    if post:
        g.tensors[r].shape = out_shape
        s.add(post, [r], s.y)
    return s.done()


def lp_normalization(g: Graph, layer: Layer) -> list[Layer]:
    """x / ||x||_p along one axis (p 1 or 2); a zero norm gives 0, like onnxruntime."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", -1)) % len(shape)
    p = int(attr(layer, "p", 2))
    if p not in (1, 2):
        raise node_error(layer, f"p must be 1 or 2, not {p}")
    s = Seq(g, layer)
    stat = tuple(1 if k == axis else d for k, d in enumerate(shape))
    mag = s.add("abs", [x]) if p == 1 else _scalar_unary(s, "pows", x, 2.0)
    norm = s.add("reduce", [mag], s.tmp(stat, "norm"), op="sum", axes=(axis,))
    if p == 2:
        norm = s.add("sqrt", [norm], s.tmp(stat, "l2"))
    # raised to the smallest subnormal: 0 / tiny = 0, and no other norm changes
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    norm = s.add("clip", [norm], s.tmp(stat, "nonzero"), min=tiny, max=INF)
    s.add("div", [x, norm], s.y)
    return s.done()


SCAN_IDENTITY = {"add": 0.0, "mul": 1.0, "max": 0.0}  # max: only of booleans (1.0/0.0)


def _shift(s: Seq, x: str, axis: int, k: int, value: float, reverse: bool) -> str:
    """x moved k places along `axis` (to the end, or the start if `reverse`), `value` behind."""
    shape = s.g.tensors[x].shape
    rank, n = len(shape), shape[axis]
    ranges = [range(d) for d in shape]
    ranges[axis] = range(k, n) if reverse else range(n - k)
    kept = tuple(len(r) for r in ranges)
    part = _slice_seq(s, x, ranges, s.tmp(kept, f"keep{k}"))
    pads = [0] * 2 * rank
    pads[axis + rank if reverse else axis] = k
    return s.add(
        "pad", [part], s.tmp(shape, f"shift{k}"), pads=tuple(pads), value=value, strides=(1,) * rank
    )


def _scan(s: Seq, x: str, axis: int, op: str, exclusive: bool, reverse: bool, out: str) -> str:
    """The running `op` (add, mul; max of booleans) of x along `axis`, in log2(n) steps."""
    shape = s.g.tensors[x].shape
    n = shape[axis]
    identity = SCAN_IDENTITY[op]
    if exclusive and n == 1:
        return s.add("copy", [s.const(np.full(shape, identity), "identity")], out)
    cur = _shift(s, x, axis, 1, identity, reverse) if exclusive else x
    k = 1
    while k < n:  # Hillis-Steele: combine each element with the one k places before it
        moved = _shift(s, cur, axis, k, identity, reverse)
        cur = s.add(op, [cur, moved], out if 2 * k >= n else s.tmp(shape, f"{op}{k}"))
        k *= 2
    if cur == x:
        return s.add("reshape", [x], out)
    return cur


def cumulative(g: Graph, layer: Layer) -> list[Layer]:
    """CumSum/CumProd along a constant axis, exclusive and reverse included."""
    x = layer.inputs[0]
    rank = len(g.tensors[x].shape)
    axis = int(need_const(g, layer, layer.inputs[1], "axis").reshape(-1)[0]) % rank
    op = "add" if layer.op == "onnx.CumSum" else "mul"
    s = Seq(g, layer)
    exclusive, reverse = bool(attr(layer, "exclusive", 0)), bool(attr(layer, "reverse", 0))
    _scan(s, x, axis, op, exclusive, reverse, s.y)
    return s.done()


def hardmax(g: Graph, layer: Layer) -> list[Layer]:
    """1.0 at the first maximum along the axis (opset < 13: the flattened dims from it), else 0."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", -1 if g.opset >= 13 else 1)) % len(shape)
    s = Seq(g, layer)
    if g.opset < 13:
        flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        x, axis = s.add("reshape", [x], s.tmp(flat, "flat")), 1
    view = s.g.tensors[x].shape
    stat = tuple(1 if k == axis else d for k, d in enumerate(view))
    top = s.add("reduce", [x], s.tmp(stat, "max"), op="max", axes=(axis,))
    hits = s.add("eq", [x, top], s.tmp(view, "hits"))
    earlier = _scan(s, hits, axis, "max", True, False, s.tmp(view, "earlier"))
    first = s.add("maskn", [hits, earlier], s.tmp(view, "first") if g.opset < 13 else s.y)
    if g.opset < 13:
        s.add("reshape", [first], s.y)
    return s.done()


# --------------------------------------------------------------------------- data movement


def need_const(g: Graph, layer: Layer, name: str, what: str) -> np.ndarray:
    """The data of constant input `name`; a one-line node error when it is not constant."""
    if not g.is_const(name):
        raise node_error(layer, f"{what} must be constant")
    return const(g, name)


def _slice_seq(s: Seq, x: str, ranges: list[range], out: str) -> str:
    """out = x[ranges]: one positive-step slice, then a take per reversed axis."""
    shape = s.g.tensors[x].shape
    starts, steps, reversed_axes = [], [], []
    for axis, r in enumerate(ranges):
        if r.step > 0 or len(r) <= 1:
            starts.append(r.start if len(r) else 0)
            steps.append(abs(r.step) if len(r) > 1 else 1)
        else:
            starts.append(r[-1])
            steps.append(-r.step)
            reversed_axes.append(axis)
    sizes = tuple(len(r) for r in ranges)
    if not reversed_axes and sizes == shape:
        return s.add("reshape", [x], out)
    cur = x
    if sizes != shape or any(st != 1 for st in steps):
        cur = s.add(
            "slice",
            [x],
            out if not reversed_axes else s.tmp(sizes, "slice"),
            starts=tuple(starts),
            steps=tuple(steps),
        )
    for k, axis in enumerate(reversed_axes):
        last = k == len(reversed_axes) - 1
        idx = tuple(range(sizes[axis] - 1, -1, -1))
        cur = s.add("take", [cur], out if last else s.tmp(sizes, "rev"), axis=axis, indices=idx)
    return cur


def slice_(g: Graph, layer: Layer) -> list[Layer]:
    """Slice with constant starts/ends/axes/steps (attributes before opset 10)."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    if "starts" in layer.attrs:
        starts, ends = list(layer.attrs["starts"]), list(layer.attrs["ends"])
        axes = list(attr(layer, "axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        ins = [*layer.inputs, "", "", ""]
        vals = [
            [int(v) for v in need_const(g, layer, t, "starts/ends/axes/steps").reshape(-1)]
            if t
            else None
            for t in ins[1:5]
        ]
        # starts and ends are required inputs of Slice from opset 10
        starts, ends = typing.cast(list[int], vals[0]), typing.cast(list[int], vals[1])
        axes = vals[2] if vals[2] is not None else list(range(len(starts)))
        steps = vals[3] if vals[3] is not None else [1] * len(starts)
    ranges = [range(d) for d in shape]
    for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
        if st == 0:
            raise node_error(layer, "a step of 0")
        a %= len(shape)
        ranges[a] = range(*slice(b, e, st).indices(shape[a]))
    s = Seq(g, layer)
    _slice_seq(s, x, ranges, s.y)
    return s.done()


def split(g: Graph, layer: Layer) -> list[Layer]:
    """Split into slices along an axis (sizes from the input, the attribute, or equal parts).

    A zero-size part is an empty constant (fold-constants) and needs no slice.
    """
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", 0)) % len(shape)
    s = Seq(g, layer)
    start = 0
    for out in layer.outputs:
        n = g.tensors[out].shape[axis]
        if n == 0:
            continue
        ranges = [range(d) for d in shape]
        ranges[axis] = range(start, start + n)
        _slice_seq(s, x, ranges, out)
        start += n
    return s.done()


def gather(g: Graph, layer: Layer) -> list[Layer]:
    """Gather with constant indices: a take along the axis, reshaped to the indices' shape."""
    x, idx_name = layer.inputs[:2]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", 0)) % len(shape)
    if not g.is_const(idx_name):
        return _gather_ids(g, layer, axis)
    idx = const(g, idx_name).astype(np.int64).reshape(-1)
    if np.any((idx < -shape[axis]) | (idx >= shape[axis])):
        raise node_error(layer, "index out of range")
    flat = tuple(int(i) % shape[axis] for i in idx)
    s = Seq(g, layer)
    taken = (*shape[:axis], len(flat), *shape[axis + 1 :])
    if len(runs(flat)) > SCATTERED_RUNS and math.prod(taken) * shape[axis] <= ONE_HOT_LIMIT:
        _gather_one_hot(s, x, axis, flat)
    elif taken == g.tensors[s.y].shape:
        s.add("take", [x], s.y, axis=axis, indices=flat)
    else:
        t = s.add("take", [x], s.tmp(taken, "take"), axis=axis, indices=flat)
        s.add("reshape", [t], s.y)
    return s.done()


ONE_HOT_LIMIT = 1 << 22  # elements of a constant one-hot selector (16 MB)
SCATTERED_RUNS = 256  # a take of more runs of evenly spaced indices selects with a one-hot


def _gather_one_hot(s: Seq, x: str, axis: int, flat: tuple[int, ...]) -> None:
    """s.y = x taken at `flat` along `axis`: x masked by a constant one-hot, summed over it."""
    shape = s.g.tensors[x].shape
    pre, n, post = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    view = s.add("reshape", [x], s.tmp((pre, 1, n, post), "view"))
    hot = (np.asarray(flat)[:, None] == np.arange(n))[:, :, None]
    picked = s.add(
        "mask", [view, s.const(hot, "one_hot")], s.tmp((pre, len(flat), n, post), "picked")
    )
    total = s.add("reduce", [picked], s.tmp((pre, len(flat), 1, post), "sum"), op="sum", axes=(2,))
    s.add("reshape", [total], s.y)


def gather_elements(g: Graph, layer: Layer) -> list[Layer]:
    """GatherElements: with constant indices a sum over the axis of x masked by a one-hot, with
    run-time ones an indirect take (_gather_elements_ids)."""
    x, idx_name = layer.inputs[:2]
    axis = int(attr(layer, "axis", 0)) % len(g.tensors[x].shape)
    s = Seq(g, layer)
    if not g.is_const(idx_name):
        _gather_elements_ids(s, x, idx_name, axis)
        return s.done()
    idx = const(g, idx_name).astype(np.int64)
    s.add("reshape", [_select(s, x, axis, idx)], s.y)
    return s.done()


def _gather_elements_ids(s: Seq, x: str, idx: str, axis: int) -> None:
    """s.y = GatherElements(x, idx) for run-time idx: with `axis` moved first, x as [n, R] rows
    and idx as [m, R], an indirect take of the row of every index ([m*R, R], each index checked
    by the interpreter), of which the output keeps its own column (an identity mask summed)."""
    shape, ishape = s.g.tensors[x].shape, s.g.tensors[idx].shape
    n, m = shape[axis], ishape[axis]
    ranges = [range(d if k == axis else ishape[k]) for k, d in enumerate(shape)]
    kept = tuple(len(r) for r in ranges)
    part = _slice_seq(s, x, ranges, s.tmp(kept, "part")) if kept != shape else x
    perm = (axis, *(k for k in range(len(shape)) if k != axis))
    rest = tuple(ishape[k] for k in perm[1:])
    width = math.prod(rest)
    if m * width * width > ONE_HOT_LIMIT:
        raise node_error(s.layer, f"{m * width} run-time indices into rows of {width} are too many")
    table = s.add("transpose", [part], s.tmp((n, *rest), "rows"), perm=perm)
    ids = s.add("transpose", [idx], s.tmp((m, *rest), "ids"), perm=perm)
    flat = s.add("reshape", [table], s.tmp((n, width), "table"))
    taken = s.add("take", [flat, ids], s.tmp((m * width, width), "taken"), axis=0)
    rows = s.add("reshape", [taken], s.tmp((m, width, width), "rows"))
    if width > 1:
        eye = s.const(np.eye(width, dtype=bool), "own_column")
        picked = s.add("mask", [rows, eye], s.tmp((m, width, width), "picked"))
        rows = s.add("reduce", [picked], s.tmp((m, width), "column"), op="sum", axes=(2,))
    moved = s.add("reshape", [rows], s.tmp((m, *rest), "moved"))
    s.add("transpose", [moved], s.y, perm=tuple(int(k) for k in np.argsort(perm)))


def _select(s: Seq, x: str, axis: int, idx: np.ndarray) -> str:
    """x at idx along `axis` (GatherElements), shaped like idx with a 1 inserted after the axis."""
    shape = s.g.tensors[x].shape
    n = shape[axis]
    if np.any((idx < -n) | (idx >= n)):
        raise node_error(s.layer, "index out of range")
    if idx.size * n > ONE_HOT_LIMIT:
        raise node_error(s.layer, f"{idx.size} indices into {n} positions are too many")
    ranges = [range(d) for d in idx.shape]
    ranges[axis] = range(n)
    kept = tuple(len(r) for r in ranges)
    part = _slice_seq(s, x, ranges, s.tmp(kept, "part")) if kept != shape else x
    # x[..., k, ...] seen as [..., 1, k, ...] against one_hot[..., j, k, ...] = (idx[..., j] == k)
    wide = (*idx.shape[: axis + 1], n, *idx.shape[axis + 1 :])
    view = s.add("reshape", [part], s.tmp((*kept[:axis], 1, *kept[axis:]), "view"))
    hot = np.expand_dims(idx % n, axis + 1) == np.arange(n).reshape(
        (n,) + (1,) * (idx.ndim - axis - 1)
    )
    picked = s.add("mask", [view, s.const(hot, "one_hot")], s.tmp(wide, "picked"))
    return s.add("reduce", [picked], s.tmp((*wide[: axis + 1], 1, *wide[axis + 2 :]), "sum"),
                 op="sum", axes=(axis + 1,))  # fmt: skip


def _nll(s: Seq, logp: str, target: str, weight: str, out: str) -> None:
    """out = the negative log-likelihood of the constant targets under log-probabilities logp."""
    layer = s.layer
    t = need_const(s.g, layer, target, "target").astype(np.int64)
    c = s.g.tensors[logp].shape[1]
    w = need_const(s.g, layer, weight, "weight") if weight else np.ones(c, np.float32)
    ignore = attr(layer, "ignore_index", None)
    valid = t != int(ignore) if ignore is not None else np.ones(t.shape, bool)
    if np.any(valid & ((t < 0) | (t >= c))):
        raise node_error(layer, "target out of range")
    safe = np.where(valid, t, 0)
    per = np.where(valid, w[safe], 0).astype(np.float32)  # each position's weight
    picked = s.add("reshape", [_select(s, logp, 1, safe[:, None])], s.tmp(t.shape, "picked"))
    reduction = str(attr(layer, "reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise node_error(layer, f"unknown reduction {reduction!r}")
    loss = s.add(
        "mul",
        [picked, s.const(-per, "weights")],
        out if reduction == "none" else s.tmp(t.shape, "loss"),
    )
    if reduction == "none":
        return
    axes = tuple(range(t.ndim))
    if reduction == "sum":
        s.add("reduce", [loss], out, op="sum", axes=axes)
        return
    total = s.add("reduce", [loss], s.tmp((), "total"), op="sum", axes=axes)
    with np.errstate(divide="ignore"):  # every target ignored: 0 * inf = NaN, as 0 / 0
        scale = float(np.float64(1.0) / per.sum(dtype=np.float64))
    s.add("muls", [total], out, scalar=scale)


def nll_loss(g: Graph, layer: Layer) -> list[Layer]:
    """NegativeLogLikelihoodLoss with constant targets and weights."""
    s = Seq(g, layer)
    ins = [*layer.inputs, ""]
    _nll(s, ins[0], ins[1], ins[2], s.y)
    return s.done()


def softmax_cross_entropy(g: Graph, layer: Layer) -> list[Layer]:
    """SoftmaxCrossEntropyLoss: the NLL of log(softmax over axis 1); log_prob if read."""
    s = Seq(g, layer)
    scores, labels, weights = [*layer.inputs, ""][:3]
    shape = g.tensors[scores].shape
    log_prob = layer.outputs[1] if len(layer.outputs) > 1 and layer.outputs[1] else ""
    prob = s.add("softmax", [scores], s.tmp(shape, "prob"), axis=1)
    logp = s.add("log", [prob], log_prob or s.tmp(shape, "log_prob"))
    _nll(s, logp, labels, weights, s.y)
    return s.done()


def compress(g: Graph, layer: Layer) -> list[Layer]:
    """Compress with a constant condition: a take of the selected positions (of x flattened)."""
    x, cond = layer.inputs[:2]
    keep = tuple(int(i) for i in np.flatnonzero(need_const(g, layer, cond, "condition")))
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    if "axis" in layer.attrs:
        src, axis = x, int(layer.attrs["axis"]) % len(shape)
    else:
        src, axis = s.add("reshape", [x], s.tmp((math.prod(shape),), "flat")), 0
    if any(i >= s.g.tensors[src].shape[axis] for i in keep):
        raise node_error(layer, "the condition selects beyond the axis")
    s.add("take", [src], s.y, axis=axis, indices=keep)
    return s.done()


def _gather_ids(g: Graph, layer: Layer, axis: int) -> list[Layer]:
    """Gather with run-time indices (an int64 input, or integers held as float32): an indirect
    take along `axis`, every index checked by the interpreter."""
    x, ids = layer.inputs[:2]
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    taken = (*shape[:axis], math.prod(g.tensors[ids].shape), *shape[axis + 1 :])
    if taken == g.tensors[s.y].shape:
        s.add("take", [x, ids], s.y, axis=axis)
    else:
        s.add("reshape", [s.add("take", [x, ids], s.tmp(taken, "take"), axis=axis)], s.y)
    return s.done()


def expand(g: Graph, layer: Layer) -> list[Layer]:
    """Expand to a constant shape: a broadcasting copy."""
    need_const(g, layer, layer.inputs[1], "shape")
    s = Seq(g, layer)
    _broadcast(s, layer.inputs[0], s.y)
    return s.done()


def _broadcast(s: Seq, x: str, out: str) -> str:
    in_shape, out_shape = s.g.tensors[x].shape, s.g.tensors[out].shape
    if math.prod(in_shape) == math.prod(out_shape):
        return s.add("reshape", [x], out)
    return s.add("expand", [x], out)


def tile(g: Graph, layer: Layer) -> list[Layer]:
    """Tile with constant repeats: reshape to (1, d0, 1, d1, ...), expand, reshape."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    reps = [int(r) for r in need_const(g, layer, layer.inputs[1], "repeats").reshape(-1)]
    s = Seq(g, layer)
    spread = s.add("reshape", [x], s.tmp(tuple(v for d in shape for v in (1, d)), "spread"))
    big = s.add(
        "expand",
        [spread],
        s.tmp(tuple(v for r, d in zip(reps, shape, strict=True) for v in (r, d)), "tiled"),
    )
    s.add("reshape", [big], s.y)
    return s.done()


def where(g: Graph, layer: Layer) -> list[Layer]:
    """Where: the canonical where layer (a constant condition is a constant 1.0/0.0 mask)."""
    cond, a, b = layer.inputs
    s = Seq(g, layer)
    if g.is_const(cond):
        c = const(g, cond).astype(bool)
        if c.all() or not c.any():
            _broadcast(s, a if c.all() else b, s.y)
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


def pad(g: Graph, layer: Layer) -> list[Layer]:
    """Pad: constant mode as the canonical pad, edge/reflect/wrap as takes along each axis."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    mode = str(attr(layer, "mode", "constant"))
    ins = [*layer.inputs, "", "", ""]
    if "pads" in layer.attrs:
        pads = [int(p) for p in layer.attrs["pads"]]
        value = float(attr(layer, "value", 0.0))
    else:
        pads = [int(p) for p in need_const(g, layer, ins[1], "pads").reshape(-1)]
        value = float(need_const(g, layer, ins[2], "value").reshape(-1)[0]) if ins[2] else 0.0
    axes = list(range(rank))
    if ins[3]:
        axes = [int(a) % rank for a in need_const(g, layer, ins[3], "axes").reshape(-1)]
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    s = Seq(g, layer)
    # negative pads crop first
    ranges = [range(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(shape, begin, end, strict=True)]
    cropped = tuple(len(r) for r in ranges)
    begin, end = [max(b, 0) for b in begin], [max(e, 0) for e in end]
    cur = x
    if cropped != shape:
        cur = _slice_seq(s, x, ranges, s.tmp(cropped, "crop") if any(begin + end) else s.y)
    if not any(begin + end):
        if cur == x:
            s.add("reshape", [x], s.y)
        return s.done()
    if mode == "constant":
        s.add("pad", [cur], s.y, pads=tuple(begin + end), value=value, strides=(1,) * rank)
        return s.done()
    if mode not in ("edge", "reflect", "wrap"):
        raise node_error(layer, f"unknown mode {mode!r}")
    padded_axes = [a for a in range(rank) if begin[a] or end[a]]
    dims = list(cropped)
    for k, a in enumerate(padded_axes):
        n = dims[a]
        idx = [_pad_index(i - begin[a], n, mode) for i in range(n + begin[a] + end[a])]
        if mode == "reflect" and n == 1:
            idx = [0] * len(idx)
        dims[a] = len(idx)
        last = k == len(padded_axes) - 1
        out = s.y if last else s.tmp(tuple(dims), "pad")
        cur = s.add("take", [cur], out, axis=a, indices=tuple(idx))
    return s.done()


def _pad_index(i: int, n: int, mode: str) -> int:
    if mode == "edge":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1)
    i = abs(i) % period if period else 0
    return period - i if i >= n else i


def depth_to_space(g: Graph, layer: Layer) -> list[Layer]:
    """DepthToSpace / SpaceToDepth as reshape, transpose, reshape."""
    n, c, h, w = g.tensors[layer.inputs[0]].shape
    b = int(layer.attrs["blocksize"])
    s = Seq(g, layer)
    crd = str(attr(layer, "mode", "DCR")) == "CRD"
    if layer.op == "onnx.SpaceToDepth":
        split_shape = (n, c, h // b, b, w // b, b)
        perm = (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)
    elif not crd:
        split_shape, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split_shape, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    r = s.add("reshape", layer.inputs[:1], s.tmp(split_shape, "split"))
    t = s.add("transpose", [r], s.tmp(tuple(split_shape[p] for p in perm), "perm"), perm=perm)
    s.add("reshape", [t], s.y)
    return s.done()


# ---------------------------------------------------------------------- normalisation


def layer_norm(g: Graph, layer: Layer) -> list[Layer]:
    """LayerNormalization over the trailing dims from `axis`; Mean and InvStdDev if read."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    axis = int(attr(layer, "axis", -1)) % rank
    eps = float(attr(layer, "epsilon", 1e-5))
    s = Seq(g, layer)
    ins = [*layer.inputs, ""][:3]
    if len(layer.outputs) > 1:
        axes = tuple(range(axis, rank))
        stat = (*shape[:axis], *(1,) * (rank - axis))
        mean = s.add("reduce", [x], layer.outputs[1] or s.tmp(stat, "mean"), op="mean", axes=axes)
    if len(layer.outputs) > 2:
        d = s.add("sub", [x, mean], s.tmp(shape, "centered"))
        sq = _scalar_unary(s, "pows", d, 2.0, s.tmp(shape, "sq"))
        var = s.add("reduce", [sq], s.tmp(stat, "var"), op="mean", axes=axes)
        std = s.add(
            "sqrt", [_scalar_unary(s, "adds", var, eps, s.tmp(stat, "var_eps"))], s.tmp(stat, "std")
        )
        s.add("recip", [std], layer.outputs[2])
    s.add("layernorm", ins, s.y, axis=axis, epsilon=eps)
    return s.done()


def instance_norm(g: Graph, layer: Layer) -> list[Layer]:
    """InstanceNormalization: a layernorm over the spatial dims, then per-channel scale/bias."""
    x, scale, bias = layer.inputs
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    flat = (shape[0], shape[1], math.prod(shape[2:]))
    xf = s.add("reshape", [x], s.tmp(flat, "flat"))
    eps = float(attr(layer, "epsilon", 1e-5))
    norm = s.add("layernorm", [xf, "", ""], s.tmp(flat, "norm"), axis=2, epsilon=eps)
    col = (shape[1], 1)
    sc = s.add("reshape", [scale], s.tmp(col, "scale"))
    bi = s.add("reshape", [bias], s.tmp(col, "bias"))
    scaled = s.add("mul", [norm, sc], s.tmp(flat, "scaled"))
    shifted = s.add("add", [scaled, bi], s.tmp(flat, "shifted"))
    s.add("reshape", [shifted], s.y)
    return s.done()


def group_norm(g: Graph, layer: Layer) -> list[Layer]:
    """GroupNormalization (opset 21): a layernorm per group, then scale and bias per channel."""
    x, scale, bias = layer.inputs[:3]
    shape = g.tensors[x].shape
    n, c = shape[:2]
    groups = int(attr(layer, "num_groups", 1))
    if groups <= 0 or c % groups:
        raise node_error(layer, f"{c} channels do not split into {groups} groups")
    size = math.prod(shape[2:])
    s = Seq(g, layer)
    flat = (n, groups, c // groups * size)
    xf = s.add("reshape", [x], s.tmp(flat, "flat"))
    eps = float(attr(layer, "epsilon", 1e-5))
    norm = s.add("layernorm", [xf, "", ""], s.tmp(flat, "norm"), axis=2, epsilon=eps)
    view = (n, groups, c // groups, size)
    grouped = s.add("reshape", [norm], s.tmp(view, "grouped"))
    param = (groups, c // groups, 1)
    sc = s.add("reshape", [scale], s.tmp(param, "scale"))
    bi = s.add("reshape", [bias], s.tmp(param, "bias"))
    scaled = s.add("mul", [grouped, sc], s.tmp(view, "scaled"))
    s.add("reshape", [s.add("add", [scaled, bi], s.tmp(view, "shifted"))], s.y)
    return s.done()


def mean_variance_norm(g: Graph, layer: Layer) -> list[Layer]:
    """MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default 0, 2, 3)."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axes = tuple(sorted({int(a) % len(shape) for a in attr(layer, "axes", (0, 2, 3))}))
    stat = tuple(1 if k in axes else d for k, d in enumerate(shape))
    s = Seq(g, layer)
    mean = s.add("reduce", [x], s.tmp(stat, "mean"), op="mean", axes=axes)
    centered = s.add("sub", [x, mean], s.tmp(shape, "centered"))
    sq = _scalar_unary(s, "pows", centered, 2.0, s.tmp(shape, "sq"))
    var = s.add("reduce", [sq], s.tmp(stat, "var"), op="mean", axes=axes)
    std = _scalar_unary(
        s, "adds", s.add("sqrt", [var], s.tmp(stat, "std")), 1e-9, s.tmp(stat, "den")
    )
    s.add("div", [centered, std], s.y)
    return s.done()


# -------------------------------------------------------------------------- resampling


def _resize_axes(g: Graph, layer: Layer) -> list[int]:
    """The axes Resize acts on (its `axes` attribute, else every axis), non-negative."""
    rank = len(g.tensors[layer.inputs[0]].shape)
    return [int(x) % rank for x in attr(layer, "axes", range(rank))]


def _resize_matrix(
    g: Graph, layer: Layer, axis: int, n_in: int, n_out: int
) -> tuple[np.ndarray, np.ndarray]:
    """Resize along one axis as y = w @ x + extrapolation_value * outside (reference evaluator's).

    w is the [n_out, n_in] interpolation matrix; outside is 1 where tf_crop_and_resize samples
    outside the input (w's row is zero there), else 0. A probe row of zeros below the identity
    finds those samples: it resizes to 0 everywhere but where the extrapolation value lands.
    """
    a = dict(layer.attrs)
    axes = _resize_axes(g, layer)
    if axis not in axes:
        raise node_error(layer, f"axis {axis} changes size but is not in axes {axes}")
    pos, count = axes.index(axis), len(axes)
    a.pop("axes", None)
    a.pop("keep_aspect_ratio_policy", None)
    a["extrapolation_value"] = 1.0
    probe = np.concatenate([np.eye(n_in), np.zeros((1, n_in))]).astype(np.float32)
    ins = [*layer.inputs, "", "", ""]
    roi = const(g, ins[1]).reshape(-1) if ins[1] and g.is_const(ins[1]) else None
    model_inputs = {"X": probe}
    names = ["X", "", "", "sizes"]
    if roi is not None and roi.size == 2 * count:
        names[1] = "roi"
        model_inputs["roi"] = np.array([0, roi[pos], 1, roi[count + pos]], np.float32)
    model_inputs["sizes"] = np.array([n_in + 1, n_out], np.int64)
    if ins[2] and g.is_const(ins[2]) and const(g, ins[2]).size:
        names[2], names[3] = "scales", ""
        model_inputs.pop("sizes")
        model_inputs["scales"] = np.array([1.0, const(g, ins[2]).reshape(-1)[pos]], np.float32)
    node = onnx.helper.make_node("Resize", names, ["Y"], **a)
    inputs = [
        onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, probe.shape),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in model_inputs.items() if k != "X"]
    graph = onnx.helper.make_graph(
        [node], "m", inputs, [onnx.helper.make_empty_tensor_value_info("Y")], inits
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])
    try:
        # a list of the outputs: run() returns a dict only with intermediate=True
        y = typing.cast(list[Any], ReferenceEvaluator(model).run(None, {"X": probe}))[0]
    except Exception as exc:  # the evaluator raises many types
        raise node_error(layer, f"cannot build the interpolation matrix: {exc}") from None
    if y.shape != (n_in + 1, n_out):
        raise node_error(layer, "this Resize configuration is not supported")
    outside = y[n_in].astype(np.float32)
    return (y[:n_in] * (1 - outside)).T.astype(np.float32), outside


def resize(g: Graph, layer: Layer) -> list[Layer]:
    """Resize as one matmul per resized axis with a constant interpolation matrix.

    tf_crop_and_resize adds extrapolation_value where a sample falls outside the input; its
    crop may change an axis of unchanged size, so every axis it acts on is resized.
    """
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    out_shape = g.tensors[s.y].shape
    crop = str(attr(layer, "coordinate_transformation_mode", "")) == "tf_crop_and_resize"
    roi = [*layer.inputs, ""][1]
    if crop and not (roi and g.is_const(roi)):
        raise node_error(layer, "roi must be constant")
    if any(s_ < 0 for s_ in out_shape):
        raise node_error(layer, "the output shape must be static")
    cropped = _resize_axes(g, layer) if crop else []
    value = float(attr(layer, "extrapolation_value", 0.0))
    steps = []
    for a in range(len(shape)):
        if shape[a] != out_shape[a] or a in cropped:
            w, outside = _resize_matrix(g, layer, a, shape[a], out_shape[a])
            if w.shape != (shape[a], shape[a]) or (w != np.eye(shape[a])).any() or outside.any():
                steps.append((a, w, value * outside))
    if not steps:
        s.add("reshape", [x], s.y)
        return s.done()
    cur, dims = x, list(shape)
    for k, (a, w, bias) in enumerate(steps):
        before, after = math.prod(dims[:a]), math.prod(dims[a + 1 :])
        view = s.add("reshape", [cur], s.tmp((before, dims[a], after), "view"))
        dims[a] = out_shape[a]
        box = (before, dims[a], after)
        res = s.add("matmul", [s.const(w, f"resize{a}"), view], s.tmp(box, "resized"))
        if bias.any():
            shift = s.const(bias.reshape(-1, 1), f"extrapolate{a}")
            res = s.add("add", [res, shift], s.tmp(box, "extrapolated"))
        last = k == len(steps) - 1
        cur = s.add("reshape", [res], s.y if last else s.tmp(tuple(dims), "axis"))
    return s.done()


# ------------------------------------------------------------------------------- conv


def conv_transpose(g: Graph, layer: Layer) -> list[Layer]:
    """ConvTranspose (2-D or 3-D) as a zero-inserting pad and a stride-1 conv, flipped weights."""
    x, w, *rest = layer.inputs
    xs = g.tensors[x].shape
    if len(xs) not in (4, 5):
        raise node_error(layer, f"input must have rank 4 or 5, not {len(xs)}")
    if not g.is_const(w) or (rest and rest[0] and not g.is_const(rest[0])):
        raise node_error(layer, "weights and bias must be constant")
    wt = const(g, w)
    c, cog, *kernel = wt.shape
    spatial = len(kernel)
    group = int(attr(layer, "group", 1))
    strides = tuple(attr(layer, "strides", (1,) * spatial))
    dil = tuple(attr(layer, "dilations", (1,) * spatial))
    out_pad = tuple(attr(layer, "output_padding", (0,) * spatial))
    out = g.tensors[layer.outputs[0]].shape
    begin, end = [], []
    auto = str(attr(layer, "auto_pad", "NOTSET"))
    for i, k in enumerate(kernel):
        full = strides[i] * (xs[2 + i] - 1) + out_pad[i] + (k - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER") or "output_shape" in layer.attrs:
            total = full - out[2 + i]
            half = total // 2  # a negative total (a larger output) extends the end
            b, e = (half, total - half) if auto == "SAME_UPPER" else (total - half, half)
        elif auto == "VALID":
            b, e = 0, 0
        else:
            pads = attr(layer, "pads", (0,) * 2 * spatial)
            b, e = pads[i], pads[i + spatial]
        begin.append((k - 1) * dil[i] - b)
        end.append((k - 1) * dil[i] - e + out_pad[i])
    if min(begin + end) < 0:
        raise node_error(layer, "pads larger than the dilated kernel are not supported")
    cg = c // group
    flipped = np.flip(wt, axis=tuple(range(2, 2 + spatial))).reshape(group, cg, cog, *kernel)
    weights = np.ascontiguousarray(flipped.swapaxes(1, 2).reshape(group * cog, cg, *kernel))
    s = Seq(g, layer)
    dims = list(xs)
    for i in range(spatial):
        dims[2 + i] = (xs[2 + i] - 1) * strides[i] + 1 + begin[i] + end[i]
    padded = s.add(
        "pad",
        [x],
        s.tmp(tuple(dims), "dilated"),
        pads=(0, 0, *begin, 0, 0, *end),
        value=0.0,
        strides=(1, 1, *strides),
    )
    bias = rest[0] if rest and rest[0] else ""
    if spatial == 3:
        _conv_3d(s, padded, weights, bias, dil, group)
        return s.done()
    ins = [padded, s.const(weights, "weight"), *([bias] if bias else [])]
    s.add("conv2d", ins, s.y, strides=(1, 1), pads=(0, 0, 0, 0), dilations=dil, group=group)
    return s.done()


def _conv_3d(
    s: Seq, x: str, weights: np.ndarray, bias: str, dil: tuple[int, ...], group: int
) -> None:
    """s.y = a stride-1, unpadded 3-D conv of x, as one 2-D conv.

    The kd depth-shifted slices of x [n, c, d, h, w] become the channels (ordered group, tap,
    channel, so that groups stay contiguous) of an [n*od, ...] batch of planes; the weights
    [co, c/group, kd, kh, kw] become [co, kd*c/group, kh, kw] to match.
    """
    n, c, d, h, w = s.g.tensors[x].shape
    co, cg, kd, kh, kw = weights.shape
    od, oh, ow = s.g.tensors[s.y].shape[2:]
    taps = [
        _slice_seq(
            s,
            x,
            [range(n), range(c), range(j * dil[0], j * dil[0] + od), range(h), range(w)],
            s.tmp((n, c, od, h, w), f"depth{j}"),
        )
        for j in range(kd)
    ]
    stacked = (
        s.add("concat", taps, s.tmp((n, kd * c, od, h, w), "taps"), axis=1) if kd > 1 else taps[0]
    )
    view = s.add("reshape", [stacked], s.tmp((n, kd, group, cg, od, h, w), "taps_view"))
    moved = s.add(
        "transpose",
        [view],
        s.tmp((n, od, group, kd, cg, h, w), "planes_view"),
        perm=(0, 4, 2, 1, 3, 5, 6),
    )
    planes = s.add("reshape", [moved], s.tmp((n * od, group * kd * cg, h, w), "planes"))
    w2 = weights.reshape(group, co // group, cg, kd, kh, kw).transpose(0, 1, 3, 2, 4, 5)
    ins = [planes, s.const(w2.reshape(co, kd * cg, kh, kw), "weight2d"), *([bias] if bias else [])]
    conv = s.add(
        "conv2d",
        ins,
        s.tmp((n * od, co, oh, ow), "conv2d"),
        strides=(1, 1),
        pads=(0, 0, 0, 0),
        dilations=dil[1:],
        group=group,
    )
    batched = s.add("reshape", [conv], s.tmp((n, od, co, oh, ow), "depth_major"))
    s.add("transpose", [batched], s.y, perm=(0, 2, 1, 3, 4))


_SPATIAL_ATTRS = ("kernel_shape", "strides", "dilations", "output_padding", "output_shape")


def one_d(lower: Legalize) -> Legalize:
    """Run a 2-D conv/pool legalisation on a 1-D (rank 3) input through a height-1 view."""

    def wrapped(g: Graph, layer: Layer) -> list[Layer]:
        x, *rest = layer.inputs
        shape = g.tensors[x].shape
        if len(shape) != 3:
            return lower(g, layer)
        s = Seq(g, layer)
        ins = [s.add("reshape", [x], s.tmp((shape[0], shape[1], 1, shape[2]), "2d"))]
        for t in rest:
            if t and g.is_const(t) and len(g.tensors[t].shape) == 3:
                ins.append(s.const(const(g, t)[:, :, None, :], "w2d"))
            else:
                ins.append(t)
        attrs = {k: (1, *v) if k in _SPATIAL_ATTRS else v for k, v in layer.attrs.items()}
        if "pads" in attrs:
            attrs["pads"] = (0, attrs["pads"][0], 0, attrs["pads"][1])
        y = g.tensors[s.y].shape
        out = s.tmp((y[0], y[1], 1, y[2]), "2d_out")
        s.layers += lower(g, Layer(f"{layer.name}.2d", layer.op, ins, [out], attrs))
        s.add("reshape", [out], s.y)
        return s.done()

    return wrapped


LIMITATIONS = {
    "Attention": "no softcap, sliding window, nonpad_kv_seqlen or qk_matmul_output; masks "
    "constant (or float, full length, not causal); no fully masked rows",
    "Trilu": "k must be constant",
    "Einsum": "no repeated subscript within an operand (diagonals); no size-1 broadcasting",
    "CenterCropPad": "the shape must be constant",
    "Tile": "repeats must be constant",
    "Split": "split sizes must be constant",
    "ReduceSum": "axes must be constant",
    "ReduceMean": "axes must be constant",
    "ReduceMax": "axes must be constant",
    "ReduceMin": "axes must be constant",
    "Gather": "run-time indices: an index outside [-size, size) is a run-time error",
    "Slice": "starts, ends, axes and steps must be constant",
    "Where": "a selected -0.0 becomes +0.0",
    "Expand": "the shape must be constant",
    "Pad": "pads, value and axes must be constant",
    "Resize": "sizes/scales (and tf_crop_and_resize's roi) constant",
    "ConvTranspose": "1-D, 2-D and 3-D; pads at most the dilated kernel extent",
    "Conv": "1-D and 2-D; constant weights",
    "Cast": "float, double, float16, bfloat16, bool and integers up to 2^24 (no uint32/uint64); "
    "a double graph input is rounded to float32 and may only be cast to a narrower float type",
    "CastLike": "as Cast",
    "BatchNormalization": "training mode only with training_mode=1 (opset 14+)",
    "Dropout": "training mode only with ratio 0; no mask output",
    "LogSoftmax": "opset < 13: one axis only",
    "Softplus": "overflows to inf for x > 88",
    "MaxPool": "1-D, 2-D and 3-D; ceil_mode follows onnxruntime; no Indices output",
    "AveragePool": "1-D, 2-D and 3-D; ceil_mode follows onnxruntime",
    "LpPool": "1-D, 2-D and 3-D; no ceil_mode",
    "LpNormalization": "p 1 or 2",
    "CumSum": "axis must be constant",
    "CumProd": "axis must be constant",
    "GatherElements": "run-time indices: at most 2^22 gathered row elements",
    "Compress": "the condition must be constant",
    "NegativeLogLikelihoodLoss": "target and weight must be constant",
    "SoftmaxCrossEntropyLoss": "labels and weights must be constant",
    "QuantizeLinear": "float32 to uint8, int8, uint16 and int16; a blocked scale constant; a NaN "
    "gives NaN (onnxruntime: the type's minimum)",
    "DequantizeLinear": "8-, 16- and 32-bit integers to float32; a blocked scale constant",
    "DynamicQuantizeLinear": "as onnxruntime: scale 1 (not 1/255) for an all-zero input",
}


# ------------------------------------------------------------------------- attention


def _heads_4d(s: Seq, x: str, heads: int, tag: str) -> str:
    """A [B, S, H*D] tensor as [B, H, S, D] (reshape + transpose layers); 4-D passes through."""
    shape = s.g.tensors[x].shape
    if len(shape) == 4:
        return x
    b, n, hd = shape
    r = s.add("reshape", [x], s.tmp((b, n, heads, hd // heads), f"{tag}.split"))
    return s.add(
        "transpose", [r], s.tmp((b, heads, n, hd // heads), f"{tag}.heads"), perm=(0, 2, 1, 3)
    )


def _grouped(strides: tuple[int, ...], groups: int, shared: bool) -> tuple[int, ...]:
    """[B, H, S, D] strides as [B, Hkv, G, S, D]: K/V repeat over G (stride 0)."""
    sb, sh, ss, sd = strides
    return (sb, sh, 0, ss, sd) if shared else (sb, groups * sh, sh, ss, sd)


def _grouped_mask(shape: tuple[int, ...], groups: int) -> tuple[int, ...]:
    """A mask shape broadcastable to [B, H, Sq, Sk] as [B, Hkv, G, Sq, Sk] (h = kv * G + g)."""
    full = (1,) * (4 - len(shape)) + tuple(shape)
    heads = (full[1] // groups, groups) if full[1] > 1 else (1, 1)
    return (full[0], *heads, *full[2:])


def _attention_bias(g: Graph, layer: Layer, mask: str, sq: int, sk: int, past: int) -> np.ndarray:
    """The constant additive bias: the (padded) mask plus the causal frontier."""
    bias = np.zeros((sq, sk), np.float32)
    if mask:
        m = const(g, mask)
        if m.dtype == bool:
            m = np.where(m, 0.0, -np.inf)
        pad = sk - m.shape[-1]
        if pad > 0:
            m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        bias = bias + m.astype(np.float32)
    if int(attr(layer, "is_causal", 0)):
        allowed = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + past
        bias = bias + np.where(allowed, 0.0, -np.inf).astype(np.float32)
    if np.any(np.all(np.isneginf(bias), axis=-1)):
        raise node_error(layer, "fully masked query rows are not supported")
    return bias


def attention(g: Graph, layer: Layer) -> list[Layer]:
    """The ONNX Attention op (opset 23+) as the fused `attention` layer.

    Supports 3-D and 4-D inputs, grouped-query heads (K/V read with a zero head-group stride),
    a past KV cache (concatenated; present outputs), a constant or float mask and is_causal.
    """
    ins = [*layer.inputs, *[""] * 7][:7]
    q, k, v, mask, past_k, past_v, nonpad = ins
    if nonpad or float(attr(layer, "softcap", 0.0)) or len(layer.outputs) > 3:
        raise node_error(layer, "softcap, nonpad_kv_seqlen and qk_matmul_output are not supported")
    if any(int(attr(layer, k_, -1)) >= 0 for k_ in ("left_window_size", "right_window_size")):
        raise node_error(layer, "sliding windows are not supported")
    s = Seq(g, layer)
    rank3 = len(g.tensors[q].shape) == 3
    hq = int(attr(layer, "q_num_heads", 0)) if rank3 else g.tensors[q].shape[1]
    hkv = int(attr(layer, "kv_num_heads", 0)) if rank3 else g.tensors[k].shape[1]
    k4, v4 = _heads_4d(s, k, hkv, "k"), _heads_4d(s, v, hkv, "v")
    past = g.tensors[past_k].shape[2] if past_k else 0
    outs = [*layer.outputs, "", ""][:3]
    for i, (cur, old) in enumerate(((k4, past_k), (v4, past_v)), start=1):
        if old:
            shape = g.tensors[old].shape
            cat = (*shape[:2], shape[2] + g.tensors[cur].shape[2], shape[3])
            cur = s.add("concat", [old, cur], outs[i] or s.tmp(cat, "present"), axis=2)
        elif outs[i]:
            s.add("copy", [cur], outs[i])
        if i == 1:
            k4 = cur
        else:
            v4 = cur
    b, _, sk, d = g.tensors[k4].shape
    dv = g.tensors[v4].shape[3]
    qshape = g.tensors[q].shape
    sq = qshape[1] if rank3 else qshape[2]
    groups = hq // hkv
    q_st: tuple[int, ...]
    if rank3:
        q_st = (sq * hq * d, d, hq * d, 1)
    else:
        q_st = row_major_strides(qshape)
    attrs = {
        "scale": float(attr(layer, "scale", 1.0 / math.sqrt(d))),
        "q_strides": _grouped(q_st, groups, False),
        "k_strides": _grouped(row_major_strides(g.tensors[k4].shape), groups, True),
        "v_strides": _grouped(row_major_strides(g.tensors[v4].shape), groups, True),
    }
    inputs = [q, k4, v4]
    if mask and not g.is_const(mask):
        mshape = g.tensors[mask].shape
        if int(attr(layer, "is_causal", 0)) or mshape[-1] != sk or g.tensors[mask].dtype != "f32":
            raise node_error(layer, "a run-time mask must be float, full length and not causal")
        inputs.append(s.add("reshape", [mask], s.tmp(_grouped_mask(mshape, groups), "mask")))
    elif mask or int(attr(layer, "is_causal", 0)):
        bias = _attention_bias(g, layer, mask, sq, sk, past)
        inputs.append(s.const(bias.reshape(_grouped_mask(bias.shape, groups)), "bias"))
    out5 = s.add("attention", inputs, s.tmp((b, hkv, groups, sq, dv), "heads"), **attrs)
    if rank3:
        o4 = s.add("reshape", [out5], s.tmp((b, hq, sq, dv), "o4"))
        t = s.add("transpose", [o4], s.tmp((b, sq, hq, dv), "merge"), perm=(0, 2, 1, 3))
        s.add("reshape", [t], s.y)
    else:
        s.add("reshape", [out5], s.y)
    return s.done()


def rms_norm(g: Graph, layer: Layer) -> list[Layer]:
    """RMSNormalization: x / sqrt(mean(x ** 2 over the dims from axis) + eps) * scale."""
    x, scale = layer.inputs[:2]
    shape = g.tensors[x].shape
    rank = len(shape)
    axis = int(attr(layer, "axis", -1)) % rank
    stat = (*shape[:axis], *(1,) * (rank - axis))
    s = Seq(g, layer)
    sq = _scalar_unary(s, "pows", x, 2.0, s.tmp(shape, "sq"))
    ms = s.add("reduce", [sq], s.tmp(stat, "ms"), op="mean", axes=tuple(range(axis, rank)))
    ms = _scalar_unary(s, "adds", ms, float(attr(layer, "epsilon", 1e-5)), s.tmp(stat, "eps"))
    inv = s.add("recip", [s.add("sqrt", [ms], s.tmp(stat, "rms"))], s.tmp(stat, "inv"))
    s.add("mul", [s.add("mul", [x, inv], s.tmp(shape, "normed")), scale], s.y)
    return s.done()


def trilu(g: Graph, layer: Layer) -> list[Layer]:
    """Trilu with a constant k: a product with the constant 0/1 triangle."""
    x = layer.inputs[0]
    k = 0
    if len(layer.inputs) > 1 and layer.inputs[1]:
        k = int(need_const(g, layer, layer.inputs[1], "k").reshape(-1)[0])
    rows, cols = g.tensors[x].shape[-2:]
    tri = np.triu if int(attr(layer, "upper", 1)) else np.tril
    s = Seq(g, layer)
    s.add("mul", [x, s.const(tri(np.ones((rows, cols), np.float32), k), "triangle")], s.y)
    return s.done()


def center_crop_pad(g: Graph, layer: Layer) -> list[Layer]:
    """CenterCropPad with a constant shape: a centred slice, then a centred zero pad."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    want = [int(v) for v in need_const(g, layer, layer.inputs[1], "shape").reshape(-1)]
    axes = [int(a) % rank for a in attr(layer, "axes", range(rank))]
    target = list(shape)
    for a, n in zip(axes, want, strict=True):
        target[a] = n
    ranges = []
    for d, n in zip(shape, target, strict=True):
        start = (d - n) // 2 if d > n else 0
        ranges.append(range(start, start + min(d, n)))
    s = Seq(g, layer)
    cropped = tuple(len(r) for r in ranges)
    grow = [(n - c) for n, c in zip(target, cropped, strict=True)]
    if not any(grow):
        _slice_seq(s, x, ranges, s.y)
        return s.done()
    cur = _slice_seq(s, x, ranges, s.tmp(cropped, "crop")) if cropped != shape else x
    pads = tuple(gr // 2 for gr in grow) + tuple(gr - gr // 2 for gr in grow)
    s.add("pad", [cur], s.y, pads=pads, value=0.0, strides=(1,) * rank)
    return s.done()


# ------------------------------------------------------------------------------ einsum


def _einsum_terms(layer: Layer, ranks: list[int]) -> tuple[list[str], str]:
    """Each operand's subscripts and the output's, with '...' spelled out as letters of its
    own (aligned from the right, as ONNX broadcasts them) and an implicit output made explicit."""
    equation = str(attr(layer, "equation", "")).replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node_error(layer, f"equation '{equation}' names {len(terms)} operands")
    letters = set(equation) - set(".,->")
    spare = (c for c in map(chr, range(0x100, 0x200)) if c not in letters)
    ellipsis = "".join(next(spare) for _ in range(max(ranks, default=0)))
    ell_rank = 0
    out_terms = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            n = rank - (len(term) - 3)
            ell_rank = max(ell_rank, n)
            term = term.replace("...", ellipsis[len(ellipsis) - n :] if n else "")
        if len(term) != rank or not all(c.isalpha() or ord(c) >= 0x100 for c in term):
            raise node_error(layer, f"subscripts '{term}' do not fit an operand of rank {rank}")
        out_terms.append(term)
    if arrow:
        out = rhs.replace("...", ellipsis[len(ellipsis) - ell_rank :])
    else:  # implicit: the broadcast dims, then the letters used once, in alphabetical order
        counts = "".join(out_terms)
        once = sorted(c for c in set(counts) if counts.count(c) == 1 and ord(c) < 0x100)
        out = ellipsis[len(ellipsis) - ell_rank :] + "".join(once)
    return out_terms, out


def einsum(g: Graph, layer: Layer) -> list[Layer]:
    """Einsum as transposes, sums and batched matmuls, contracting the operands left to right:
    per pair, the shared letters still needed are batch dims, the other shared ones are summed
    by the matmul, the rest are its rows and columns."""
    ins = list(layer.inputs)
    shapes = [g.tensors[t].shape for t in ins]
    terms, out = _einsum_terms(layer, [len(sh) for sh in shapes])
    size: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if len(set(term)) != len(term):
            shown = re.sub("[\u0100-\u01ff]+", "...", term)
            raise node_error(
                layer, f"repeated subscript in '{shown}' (a diagonal) is not supported"
            )
        for c, d in zip(term, shape, strict=True):
            if size.setdefault(c, d) != d:
                raise node_error(layer, f"subscript '{c}' has sizes {size[c]} and {d}")
    if set(out) - set(size) or len(set(out)) != len(out):
        raise node_error(layer, f"output subscripts '{out}' are not a set of input subscripts")
    s = Seq(g, layer)

    def sum_out(x: str, term: str, keep: set[str]) -> tuple[str, str]:
        """Sum the axes of `x` whose letters nothing later needs."""
        axes = tuple(k for k, c in enumerate(term) if c not in keep)
        if not axes:
            return x, term
        kept = "".join(c for c in term if c in keep)
        full = tuple(1 if c not in keep else size[c] for c in term)
        r = s.add("reduce", [x], s.tmp(full, "sum"), op="sum", axes=axes)
        return s.add("reshape", [r], s.tmp(tuple(size[c] for c in kept), "summed")), kept

    def arrange(x: str, term: str, order: str) -> str:
        """`x` with its axes in the order of `order` (a permutation of `term`)."""
        if order == term:
            return x
        perm = tuple(term.index(c) for c in order)
        return s.add("transpose", [x], s.tmp(tuple(size[c] for c in order), "t"), perm=perm)

    def needed(k: int) -> set[str]:
        """Letters the output or operands after the k-th still use."""
        return set(out).union(*(set(t) for t in terms[k + 1 :]))

    acc, acc_term = sum_out(ins[0], terms[0], needed(0))
    for k in range(1, len(ins)):
        keep = needed(k)
        b, b_term = sum_out(ins[k], terms[k], keep | set(acc_term))
        acc, acc_term = sum_out(acc, acc_term, keep | set(b_term))
        batch = "".join(c for c in acc_term if c in b_term and c in keep)
        summed = "".join(c for c in acc_term if c in b_term and c not in keep)
        left = "".join(c for c in acc_term if c not in b_term)
        right = "".join(c for c in b_term if c not in acc_term)
        n_batch, n_left, n_sum, n_right = (
            math.prod(size[c] for c in part) for part in (batch, left, summed, right)
        )
        a3 = s.add(
            "reshape",
            [arrange(acc, acc_term, batch + left + summed)],
            s.tmp((n_batch, n_left, n_sum), "lhs"),
        )
        b3 = s.add(
            "reshape",
            [arrange(b, b_term, batch + summed + right)],
            s.tmp((n_batch, n_sum, n_right), "rhs"),
        )
        product = s.add("matmul", [a3, b3], s.tmp((n_batch, n_left, n_right), "mm"))
        acc_term = batch + left + right
        acc = s.add("reshape", [product], s.tmp(tuple(size[c] for c in acc_term), "prod"))
    acc, acc_term = sum_out(acc, acc_term, set(out))
    s.add("reshape", [arrange(acc, acc_term, out)], s.y)
    return s.done()


# ------------------------------------------------------------------------------ arg max / min


def _extreme_marks(s: Seq, shape: tuple[int, ...], axis: int, last: bool) -> tuple[str, str]:
    """Constants of an extreme-position search: every position along `axis` as float32, and
    the value of a position that is not a hit (past the end, or -1 when the last hit wins)."""
    n = shape[axis]
    if n >= 1 << 24:
        raise node_error(s.layer, f"axis of {n} elements: float32 cannot hold every index")
    along = tuple(n if k == axis else 1 for k in range(len(shape)))
    positions = s.const(np.arange(n, dtype=np.float32).reshape(along), "positions")
    return positions, s.const(np.array(-1.0 if last else n, np.float32), "elsewhere")


def _first_extreme(
    s: Seq,
    x: str,
    axis: int,
    extreme: str,
    last: bool,
    marks: tuple[str, str],
    free: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """The extreme of `x` along `axis` (kept as a size-1 axis) and the float32 position where it
    is first (last) attained; with `free` (a 1.0/0.0 mask of open positions and the value
    that blocks the others) only among the open positions."""
    shape = s.g.tensors[x].shape
    kept = tuple(1 if k == axis else d for k, d in enumerate(shape))
    positions, elsewhere = marks
    source = x
    if free is not None:  # taken positions can never be the extreme
        source = s.add("where", [free[0], x, free[1]], s.tmp(shape, "open"))
    peak = s.add("reduce", [source], s.tmp(kept, extreme), op=extreme, axes=(axis,))
    hit = s.add("eq", [source, peak], s.tmp(shape, "hit"))
    if free is not None:
        hit = s.add("mul", [hit, free[0]], s.tmp(shape, "free_hit"))
    candidates = s.add("where", [hit, positions, elsewhere], s.tmp(shape, "candidates"))
    pick = "max" if last else "min"
    index = s.add("reduce", [candidates], s.tmp(kept, "index"), op=pick, axes=(axis,))
    return peak, index


def arg_extreme(g: Graph, layer: Layer) -> list[Layer]:
    """ArgMax/ArgMin as reductions: the extreme along the axis, a 1.0/0.0 mask of where it is
    attained, the positions there (others pushed past the end) and their minimum (maximum with
    select_last_index). Indices are float32 values, exact below 2**24."""
    x = layer.inputs[0]
    axis = int(attr(layer, "axis", 0)) % len(g.tensors[x].shape)
    last = bool(int(attr(layer, "select_last_index", 0)))
    s = Seq(g, layer)
    extreme = "max" if onnx_op(layer) == "ArgMax" else "min"
    marks = _extreme_marks(s, g.tensors[x].shape, axis, last)
    _, index = _first_extreme(s, x, axis, extreme, last, marks)
    s.add("reshape", [index], s.y)
    return s.done()


def top_k(g: Graph, layer: Layer) -> list[Layer]:
    """TopK with a constant k: k rounds of (extreme among the positions not taken yet, its
    first position, mark it taken); values and indices concatenated along the axis, sorted
    (largest first, or smallest with largest=0), ties to the lower index as onnxruntime."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", -1)) % len(shape)
    if len(layer.inputs) > 1 and layer.inputs[1]:
        k = int(need_const(g, layer, layer.inputs[1], "k").reshape(-1)[0])
    else:
        k = int(attr(layer, "k", 1))
    if not 1 <= k <= shape[axis]:
        raise node_error(layer, f"k = {k} outside [1, {shape[axis]}]")
    extreme = "max" if int(attr(layer, "largest", 1)) else "min"
    s = Seq(g, layer)
    marks = _extreme_marks(s, shape, axis, False)
    blocked = s.const(np.array(-INF if extreme == "max" else INF, np.float32), "blocked")
    free: tuple[str, str] | None = None  # every position is open in the first round
    values, indices = [], []
    for round_ in range(k):
        peak, index = _first_extreme(s, x, axis, extreme, False, marks, free)
        values.append(peak)
        indices.append(index)
        if round_ == k - 1:
            break
        if free is None:
            open_ = s.add("ne", [marks[0], index], s.tmp(shape, "free"))
        else:
            taken = s.add("eq", [marks[0], index], s.tmp(shape, "taken"))
            open_ = s.add("sub", [free[0], taken], s.tmp(shape, "free"))
        free = (open_, blocked)
    values_out, indices_out = (*layer.outputs, "", "")[:2]
    for out, parts in ((values_out, values), (indices_out, indices)):
        if out and k > 1:
            s.add("concat", parts, out, axis=axis)
        elif out:
            s.add("reshape", parts, out)
    return s.done()
