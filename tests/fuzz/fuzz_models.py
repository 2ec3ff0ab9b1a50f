"""Random ONNX models for differential fuzzing: hypothesis strategies over small operator DAGs.

`models()` draws a model of 1..MAX_STEPS steps on one float32 input (an NCHW image or a
[batch, sequence, features] tensor). Each step applies one operator npucc supports to a tensor
made so far (fan-out: a tensor may be read many times), sometimes combined with another one of
the same shape (skip connections); every tensor no step reads becomes a graph output. Shapes
stay tiny (at most MAX_ELEMS elements a tensor) so that an example compiles and interprets in
well under a second. Weights come from a seeded numpy generator, so a model is a pure
function of the draws and shrinks with them.

NOTE: this module lives under tests/ (not in the npucc package) because it needs hypothesis,
a test-only dependency; bench/fuzz.py imports it through a sys.path entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

OPSET = 17  # LayerNormalization
MAX_STEPS = 6
MAX_ELEMS = 1024  # elements of the largest tensor a step may make

Shape = tuple[int, ...]
Draw = Callable[[st.SearchStrategy[Any]], Any]


class _Net:
    """A model under construction: nodes, initializers and the shape of every tensor."""

    def __init__(self, draw: Draw, seed: int) -> None:
        self.draw = draw
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.shapes: dict[str, Shape] = {}
        self.made: list[str] = []  # tensors a step may read, oldest first
        self.read: set[str] = set()

    def pick(self, shape_ok: Callable[[Shape], bool] = lambda s: True) -> str | None:
        """A tensor made so far whose shape passes `shape_ok` (the newest first when shrunk)."""
        options = [t for t in reversed(self.made) if shape_ok(self.shapes[t])]
        if not options:
            return None
        return str(options[self.draw(st.integers(0, len(options) - 1))])

    def const(self, shape: Shape, scale: float = 1.0) -> str:
        """A new float32 initializer of normal values times `scale`."""
        name = f"w{len(self.inits)}"
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def scalar(self, value: float) -> str:
        """A new float32 scalar initializer."""
        name = f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        return name

    def ints(self, values: list[int]) -> str:
        """A new int64 initializer (shape operands: Reshape, Slice, Split)."""
        name = f"i{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.array(values, np.int64), name))
        return name

    def node(self, op: str, inputs: list[str], shapes: list[Shape], **attrs: Any) -> list[str]:
        """Add a node with one output per shape; the outputs become readable tensors."""
        outs = [f"t{len(self.shapes) + i}" for i in range(len(shapes))]
        self.nodes.append(
            helper.make_node(op, inputs, outs, name=f"{op}_{len(self.nodes)}", **attrs)
        )
        self.read.update(inputs)
        for name, shape in zip(outs, shapes, strict=True):
            self.shapes[name] = tuple(shape)
        return outs

    def keep(self, *names: str) -> None:
        """Make `names` readable by later steps."""
        self.made.extend(names)


def _small(shape: Shape) -> bool:
    return 0 < math.prod(shape) <= MAX_ELEMS and all(d >= 1 for d in shape)


def _unary(net: _Net, x: str) -> None:
    op = net.draw(st.sampled_from(["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "LeakyRelu", "Clip"]))
    shape = net.shapes[x]
    if op == "LeakyRelu":
        out = net.node(op, [x], [shape], alpha=net.draw(st.sampled_from([0.01, 0.2, 1.5])))
    elif op == "Clip":
        lo, hi = net.draw(st.sampled_from([(-0.5, 0.5), (0.0, 6.0), (-2.0, 0.1)]))
        out = net.node(op, [x, net.scalar(lo), net.scalar(hi)], [shape])
    else:
        out = net.node(op, [x], [shape])
    net.keep(*out)


def _binary(net: _Net, x: str) -> None:
    op = net.draw(st.sampled_from(["Add", "Sub", "Mul", "Max", "Min"]))
    shape = net.shapes[x]
    other = net.pick(lambda s: s == shape) if net.draw(st.booleans()) else None
    if other is None:  # a constant broadcast along some dims (and maybe fewer of them)
        keep = net.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
        drop = net.draw(st.integers(0, len(shape) - 1))
        cshape = tuple(d if k else 1 for d, k in zip(shape, keep, strict=True))[drop:]
        other = net.const(cshape)
    pair = [other, x] if net.draw(st.booleans()) else [x, other]
    net.keep(*net.node(op, pair, [shape]))


def _conv(net: _Net, x: str) -> None:
    n, c, h, w = net.shapes[x]
    d = net.draw
    depthwise = d(st.booleans())
    group = c if depthwise else d(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
    co = group * d(st.integers(1, 3 if depthwise else max(1, 8 // group)))
    kh, kw = d(st.integers(1, 3)), d(st.integers(1, 3))
    sh, sw = d(st.integers(1, 2)), d(st.integers(1, 2))
    dh, dw = d(st.integers(1, 2)), d(st.integers(1, 2))
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    pads = [d(st.integers(0, e - 1)) for e in (ekh, ekw, ekh, ekw)]
    oh = (h + pads[0] + pads[2] - ekh) // sh + 1
    ow = (w + pads[1] + pads[3] - ekw) // sw + 1
    if oh < 1 or ow < 1 or not _small((n, co, oh, ow)):
        return
    fan_in = (c // group) * kh * kw
    inputs = [x, net.const((co, c // group, kh, kw), 1 / math.sqrt(fan_in))]
    if d(st.booleans()):
        inputs.append(net.const((co,), 0.1))
    attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], pads=pads)
    net.keep(*net.node("Conv", inputs, [(n, co, oh, ow)], group=group, **attrs))


def _pool(net: _Net, x: str) -> None:
    n, c, h, w = net.shapes[x]
    d = net.draw
    kind = d(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    if kind.startswith("Global"):
        net.keep(*net.node(kind, [x], [(n, c, 1, 1)]))
        return
    kh, kw = d(st.integers(1, min(3, h))), d(st.integers(1, min(3, w)))
    sh, sw = d(st.integers(1, 2)), d(st.integers(1, 2))
    pads = [d(st.integers(0, k - 1)) for k in (kh, kw, kh, kw)]
    axes = ((h, kh, sh, pads[0], pads[2]), (w, kw, sw, pads[1], pads[3]))
    ceil = d(st.integers(0, 1))
    # NOTE: where a ceil_mode window would start in the end padding, onnx's shape inference
    # and onnxruntime disagree about the output size: such a pool is drawn with ceil_mode 0
    if ceil and any(-(-(n + p0 + p1 - k) // s) * s >= n + p0 for n, k, s, p0, p1 in axes):
        ceil = 0
    dims = [(-(-span // s) if ceil else span // s) + 1 for span, s in
            ((n + p0 + p1 - k, s) for n, k, s, p0, p1 in axes)]  # fmt: skip
    attrs: dict[str, Any] = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=pads, ceil_mode=ceil)
    if kind == "AveragePool":
        attrs["count_include_pad"] = d(st.integers(0, 1))
    net.keep(*net.node(kind, [x], [(n, c, *dims)], **attrs))


def _concat(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    axis = net.draw(st.integers(0, len(shape) - 1))
    other = net.pick(
        lambda s: (
            len(s) == len(shape)
            and all(a == b for i, (a, b) in enumerate(zip(s, shape, strict=True)) if i != axis)
        )
    )
    assert other is not None  # x itself qualifies
    out = list(shape)
    out[axis] += net.shapes[other][axis]
    if _small(tuple(out)):
        net.keep(*net.node("Concat", [x, other], [tuple(out)], axis=axis))


def _split(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    axes = [i for i, dim in enumerate(shape) if dim >= 2]
    if not axes:
        return
    axis = net.draw(st.sampled_from(axes))
    first = net.draw(st.integers(1, shape[axis] - 1))
    parts = [first, shape[axis] - first]
    shapes = [tuple(p if i == axis else s for i, s in enumerate(shape)) for p in parts]
    net.keep(*net.node("Split", [x, net.ints(parts)], shapes, axis=axis))


def _slice(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    d = net.draw
    axis = d(st.integers(0, len(shape) - 1))
    size = shape[axis]
    step = d(st.sampled_from([1, 2, -1]))
    a, b = sorted((d(st.integers(0, size - 1)), d(st.integers(0, size - 1))))
    start, end = (a, b + 1) if step > 0 else (b, a - 1 if a > 0 else -size - 1)
    count = len(range(size)[start:end:step])  # ONNX clamps as Python slicing does
    out = tuple(count if i == axis else s for i, s in enumerate(shape))
    inputs = [x, net.ints([start]), net.ints([end]), net.ints([axis]), net.ints([step])]
    net.keep(*net.node("Slice", inputs, [out]))


def _reshape(net: _Net, x: str) -> None:
    total = math.prod(net.shapes[x])
    rank = net.draw(st.integers(1, 4))
    dims = []
    rest = total
    for _ in range(rank - 1):
        factors = [f for f in range(1, rest + 1) if rest % f == 0]
        f = net.draw(st.sampled_from(factors))
        dims.append(f)
        rest //= f
    dims.append(rest)
    net.keep(*net.node("Reshape", [x, net.ints(dims)], [tuple(dims)]))


def _transpose(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    perm = net.draw(st.permutations(range(len(shape))))
    out = tuple(shape[p] for p in perm)
    net.keep(*net.node("Transpose", [x], [out], perm=list(perm)))


def _softmax(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    axis = net.draw(st.integers(-len(shape), len(shape) - 1))
    net.keep(*net.node("Softmax", [x], [shape], axis=axis))


def _layernorm(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    axis = net.draw(st.integers(-len(shape), len(shape) - 1))
    norm = shape[axis:] if axis >= 0 else shape[len(shape) + axis :]
    inputs = [x, net.const(norm, 0.5)]
    if net.draw(st.booleans()):
        inputs.append(net.const(norm, 0.1))
    net.keep(*net.node("LayerNormalization", inputs, [shape], axis=axis, epsilon=1e-5))


def _matmul(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    k = shape[-1]
    if len(shape) >= 2 and net.draw(st.booleans()):  # x @ yᵀ with y like x: a score matrix
        other = net.pick(lambda s: s == shape)
        assert other is not None
        perm = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
        swapped = (*shape[:-2], shape[-1], shape[-2])
        out = (*shape[:-1], shape[-2])
        if _small(out):  # NOTE: before the Transpose, which a skipped step must not leave behind
            (yt,) = net.node("Transpose", [other], [swapped], perm=perm)
            net.keep(*net.node("MatMul", [x, yt], [out]))
        return
    n = net.draw(st.integers(1, 16))
    out = (*shape[:-1], n)
    if _small(out):
        net.keep(*net.node("MatMul", [x, net.const((k, n), 1 / math.sqrt(k))], [out]))


def _gemm(net: _Net, x: str) -> None:
    shape = net.shapes[x]
    d = net.draw
    m, k = shape[0], math.prod(shape[1:])
    if len(shape) != 2:
        (x,) = net.node("Flatten", [x], [(m, k)], axis=1)
    n = d(st.integers(1, 16))
    trans_b = d(st.integers(0, 1))
    inputs = [x, net.const((n, k) if trans_b else (k, n), 1 / math.sqrt(k))]
    bias = d(st.sampled_from([None, (n,), (1, n), (m, n), (m, 1)]))
    if bias is not None:
        inputs.append(net.const(bias, 0.1))
    alpha, beta = d(st.sampled_from([(1.0, 1.0), (0.5, 2.0), (1.0, 0.0)]))
    out = net.node("Gemm", inputs, [(m, n)], transB=trans_b, alpha=alpha, beta=beta)
    net.keep(*out)


def _attention(net: _Net, x: str) -> None:
    """softmax(x Wq (x Wk)ᵀ / sqrt(dk) [+ mask]) x Wv: what fuse-attention recognises."""
    b, s, dm = net.shapes[x]
    d = net.draw
    dk, dv = d(st.integers(1, 8)), d(st.integers(1, 8))
    scale = 1 / math.sqrt(dm)
    (q,) = net.node("MatMul", [x, net.const((dm, dk), scale)], [(b, s, dk)])
    (k,) = net.node("MatMul", [x, net.const((dm, dk), scale)], [(b, s, dk)])
    (v,) = net.node("MatMul", [x, net.const((dm, dv), scale)], [(b, s, dv)])
    (kt,) = net.node("Transpose", [k], [(b, dk, s)], perm=[0, 2, 1])
    (scores,) = net.node("MatMul", [q, kt], [(b, s, s)])
    (scores,) = net.node("Mul", [scores, net.scalar(1 / math.sqrt(dk))], [(b, s, s)])
    if d(st.booleans()):
        (scores,) = net.node("Add", [scores, net.const((s, s))], [(b, s, s)])
    (probs,) = net.node("Softmax", [scores], [(b, s, s)], axis=-1)
    net.keep(*net.node("MatMul", [probs, v], [(b, s, dv)]))


# op -> (its builder, the input shapes it accepts)
STEPS: dict[str, tuple[Callable[[_Net, str], None], Callable[[Shape], bool]]] = {
    "unary": (_unary, lambda s: True),
    "binary": (_binary, lambda s: True),
    "conv": (_conv, lambda s: len(s) == 4),
    "pool": (_pool, lambda s: len(s) == 4),
    "concat": (_concat, lambda s: True),
    "split": (_split, lambda s: max(s) >= 2),
    "slice": (_slice, lambda s: True),
    "reshape": (_reshape, lambda s: True),
    "transpose": (_transpose, lambda s: len(s) >= 2),
    "softmax": (_softmax, lambda s: True),
    "layernorm": (_layernorm, lambda s: True),
    "matmul": (_matmul, lambda s: len(s) >= 2),
    "gemm": (_gemm, lambda s: len(s) >= 2),
    "attention": (_attention, lambda s: len(s) == 3),
}


@st.composite
def input_shapes(draw: Draw) -> Shape:
    """An NCHW image or a [batch, sequence, features] input, a few hundred elements at most."""
    if draw(st.booleans()):
        return (draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 8)),
                draw(st.integers(1, 8)))  # fmt: skip
    return (draw(st.integers(1, 2)), draw(st.integers(1, 8)), draw(st.integers(1, 16)))


@st.composite
def models(draw: Draw, ops: tuple[str, ...] = tuple(STEPS)) -> onnx.ModelProto:
    """A valid opset-17 model of a few random steps on one float32 input named 'x'."""
    net = _Net(draw, draw(st.integers(0, 2**16)))
    shape = draw(input_shapes())
    net.shapes["x"] = shape
    net.keep("x")
    for _ in range(draw(st.integers(1, MAX_STEPS))):
        shapes = [net.shapes[t] for t in net.made]
        usable = [op for op in ops if any(map(STEPS[op][1], shapes))]
        build, accepts = STEPS[draw(st.sampled_from(usable))]
        src = net.pick(accepts)
        assert src is not None
        build(net, src)
    if not net.nodes:  # every step was skipped: one Relu keeps the model non-empty
        net.keep(*net.node("Relu", ["x"], [shape]))
    outputs = [t for t in net.made if t not in net.read and t != "x"]
    # NOTE: a step that skips itself leaves no node, so every node output is read or kept
    # (and the newest kept tensor is unread: a model always has an output)
    dangling = {o for n in net.nodes for o in n.output} - net.read - set(outputs)
    assert outputs and not dangling, f"the generator left {sorted(dangling)} unread"
    graph = helper.make_graph(
        net.nodes,
        "fuzz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, net.shapes[t]) for t in outputs],
        net.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model
