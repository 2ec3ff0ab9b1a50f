"""A tiny numpy evaluator of the canonical graph IR, used as the frontend tests' oracle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from npucc.ir.graph import Graph, Layer

Array = np.ndarray


def _windows(x: Array, attrs: dict[str, Any], kernel: tuple[int, int], fill: float) -> Array:
    """[N, C, OH, OW, KH, KW] windows of the padded input."""
    t, l, b, r = attrs["pads"]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=fill)
    span = ((kernel[0] - 1) * dh + 1, (kernel[1] - 1) * dw + 1)
    return sliding_window_view(xp, span, axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]


def _conv2d(
    x: Array, w: Array, b: Array | None = None, r: Array | None = None, s: Array | None = None, **a
) -> Array:
    if s is not None:  # a second image (fuse-shortcut): more channels, read at its strides
        sh, sw = a.pop("s_strides")
        x = np.concatenate([x, s[:, :, ::sh, ::sw]], axis=1)
    co, cg, kh, kw = w.shape
    g = a["group"]
    win = _windows(x, a, (kh, kw), 0.0)
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, g, cg, oh, ow, kh, kw)
    y = np.einsum("ngcxyij,gocij->ngoxy", win, w.reshape(g, co // g, cg, kh, kw), optimize=True)
    y = y.reshape(n, co, oh, ow)
    y = y if b is None else y + b.reshape(1, co, 1, 1)
    return y if r is None else y + r  # a fused residual (fuse-residual)


def _pool(x: Array, op: str, **a: Any) -> Array:
    kernel = a["kernel"]
    if op == "maxpool":
        return _windows(x, a, kernel, -np.inf).max(axis=(4, 5))
    total = _windows(x, a, kernel, 0.0).sum(axis=(4, 5))
    ones = np.ones((1, 1, *x.shape[2:]), x.dtype)
    if a["count_include_pad"]:  # the declared pads count, ceil_mode's extra end pads do not
        t, l, b, r = a["pads"]
        cb, cr = a.get("ceil_pads", (0, 0))
        ones = np.pad(ones, ((0, 0), (0, 0), (t, b - cb), (l, r - cr)), constant_values=1)
        a = {**a, "pads": (0, 0, cb, cr)}
    return total / _windows(ones, a, kernel, 0.0).sum(axis=(4, 5))


def _gemm(a: Array, b: Array, c: Array | None = None, r: Array | None = None, **at: Any) -> Array:
    a = a.T if at["trans_a"] else a
    b = b.T if at["trans_b"] else b
    y = at["alpha"] * (a @ b)
    y = y if c is None else y + at["beta"] * c
    return y if r is None else y + r  # a fused residual (fuse-residual)


def _softmax(x: Array, axis: int) -> Array:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _lrn(x: Array, size: int, alpha: float, beta: float, bias: float) -> Array:
    c = x.shape[1]
    sq = np.pad(x * x, ((0, 0), ((size - 1) // 2, size // 2), (0, 0), (0, 0)))
    total = sum(sq[:, i : i + c] for i in range(size))
    return x / (bias + alpha / size * total) ** beta


def _erf(x: Array) -> Array:
    from math import erf

    return np.vectorize(erf)(x.astype(np.float64))


def _gelu(x: Array, approximate: str) -> Array:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


def _reduce(x: Array, op: str, axes: tuple[int, ...]) -> Array:
    return {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op](x, axis=axes)


def _layernorm(x: Array, s: Array | None, b: Array | None, axis: int, epsilon: float) -> Array:
    axes = tuple(range(axis, x.ndim))
    d = x - x.mean(axis=axes, keepdims=True)
    y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + epsilon)
    return (y if s is None else y * s) + (0 if b is None else b)


def _view(x: Array, strides: tuple[int, ...]) -> Array:
    """The logical operand an attention layer reads from `x` through element strides."""
    flat = np.ascontiguousarray(x).reshape(-1)
    order = sorted(range(len(strides)), key=lambda i: -strides[i])
    shape = [0] * len(strides)
    for i in order:  # each logical dim spans (next larger stride) / (its stride) elements
        bigger = [strides[j] for j in order if strides[j] > strides[i]]
        shape[i] = (min(bigger) if bigger else flat.size) // strides[i]
    return np.lib.stride_tricks.as_strided(flat, shape, [s * 4 for s in strides])


def _attention(q, k, v, m=None, *, scale, q_strides, k_strides, v_strides) -> Array:
    q, k, v = _view(q, q_strides), _view(k, k_strides), _view(v, v_strides)
    s = scale * (q @ np.swapaxes(k, -1, -2)) + (0 if m is None else m)
    return _softmax(s, -1) @ v


def _slice(x: Array, starts: tuple[int, ...], steps: tuple[int, ...], shape) -> Array:
    return x[tuple(slice(b, b + n * st, st) for b, n, st in zip(starts, shape, steps, strict=True))]


def _pad(x: Array, pads, value, strides, shape) -> Array:
    y = np.full(shape, value, np.float32)
    r = x.ndim
    y[
        tuple(
            slice(pads[i], pads[i] + (x.shape[i] - 1) * strides[i] + 1, strides[i])
            for i in range(r)
        )
    ] = x
    return y


UNARY = {
    "exp": np.exp, "neg": np.negative, "sqrt": np.sqrt, "recip": np.reciprocal, "tanh": np.tanh,
    "erf": _erf, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs, "log": np.log,
}  # fmt: skip
SHAPED = {  # ops that need the output shape
    "slice": _slice,
    "pad": _pad,
    "expand": lambda x, shape: np.broadcast_to(x, shape),
}

OPS: dict[str, Callable[..., Array]] = {
    **UNARY,
    "pow": np.power,
    "muls": lambda x, scalar: x * scalar,
    "adds": lambda x, scalar: x + scalar,
    "pows": lambda x, scalar: x**scalar,
    "gelu": _gelu,
    "reduce": _reduce,
    "layernorm": _layernorm,
    "attention": _attention,
    "take": lambda x, axis, indices: np.take(x, indices, axis=axis),
    "copy": lambda x: x.copy(),
    "conv2d": _conv2d,
    "gemm": _gemm,
    "matmul": lambda a, b: a @ b,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "relu": lambda x: np.maximum(x, 0),
    "clip": lambda x, min, max: np.clip(x, min, max),
    "maxpool": lambda x, **a: _pool(x, "maxpool", **a),
    "avgpool": lambda x, **a: _pool(x, "avgpool", **a),
    "globalavgpool": lambda x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True),
    "globalmaxpool": lambda x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True),
    "concat": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "transpose": lambda x, perm: x.transpose(perm),
    "softmax": _softmax,
    "lrn": _lrn,
    "lt": np.less,
    "gt": np.greater,
    "le": np.less_equal,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
    "not": lambda x: x == 0,
    "where": lambda c, x, y: np.where(c != 0, x, y),
    "f16": lambda x: x.astype(np.float16),
    "bf16": lambda x: x.astype(ml_dtypes.bfloat16),
}


def _run(g: Graph, layer: Layer, args: list[Array]) -> Array:
    attrs = {k: v for k, v in layer.attrs.items() if not k.startswith("act")}
    shape = g.tensors[layer.outputs[0]].shape
    if layer.op == "reshape":
        y = args[0].reshape(shape)
    elif layer.op in SHAPED:
        y = SHAPED[layer.op](*args, **attrs, shape=shape)
    elif layer.op == "reduce":
        y = _reduce(*args, **attrs).reshape(shape)
    else:
        y = OPS[layer.op](*args, **attrs)
    act = layer.attrs.get("act", "")
    if act == "relu":
        y = np.maximum(y, 0)
    elif act == "clip":
        y = np.clip(y, layer.attrs["act_min"], layer.attrs["act_max"])
    elif act in ("gelu", "gelu_tanh"):
        y = _gelu(y, "tanh" if act == "gelu_tanh" else "none")
    else:
        assert not act, f"{layer.name}: unknown fused activation {act!r}"
    assert y.shape == g.tensors[layer.outputs[0]].shape, layer.name
    return y.astype(np.float32)


def evaluate(g: Graph, feeds: dict[str, Array]) -> list[Array]:
    """Run `g` on `feeds`; returns the graph outputs in order."""
    env: dict[str, Array] = {n: t.data for n, t in g.tensors.items() if t.data is not None}
    env.update(feeds)
    for layer in g.layers:
        (out,) = layer.outputs
        env[out] = _run(g, layer, [env[t] if t else None for t in layer.inputs])
    return [env[t] for t in g.outputs]
