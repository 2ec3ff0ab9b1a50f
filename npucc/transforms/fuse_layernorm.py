"""fuse-layernorm: the decomposed LayerNorm of exported models -> one `layernorm` layer.

The statistics: m = mean(x), d = x - m, var = mean(d ** 2) (or d * d, as tf2onnx writes
SquaredDifference), sqrt(var + eps), where both means reduce the same trailing axes (a
`reduce` mean, or a `globalavgpool` over the spatial axes, as tf2onnx writes a spatial mean).
Then either form:
- centred (PyTorch, ONNX exporters): y = d / sqrt(...) or d * recip(sqrt(...)), then optional
  * gamma and + beta (constants);
- scaled (tf.nn.batch_normalization in tf.keras, Keras 3): inv = recip(sqrt(...)) [* gamma],
  y = x * inv + (beta - m * inv) or x * inv + (-m * inv + beta) (beta optional); d then feeds
  the variance only.
Every intermediate has only the readers the pattern names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.frontend.graph_edit import (
    Fusion,
    add_const,
    const,
    fuse_all,
    scalar_const,
    single_producer,
    single_user,
)
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass


def _mean_axes(g: Graph, layer: Layer | None) -> tuple[int, ...] | None:
    """The trailing axes a mean layer reduces: a `reduce` mean over the tail, or a
    `globalavgpool` (axes 2..), as tf2onnx writes a mean over the spatial axes."""
    if layer is None or layer.attrs.get("act"):
        return None
    rank = len(g.tensors[layer.inputs[0]].shape)
    if layer.op == "globalavgpool":
        return tuple(range(2, rank)) if rank > 2 else None
    if layer.op != "reduce" or layer.attrs["op"] != "mean":
        return None
    axes = tuple(layer.attrs["axes"])
    return axes if axes == tuple(range(rank - len(axes), rank)) else None


def _other(layer: Layer, tensor: str) -> str:
    """The operand of a binary layer that is not `tensor`."""
    return layer.inputs[1] if layer.inputs[0] == tensor else layer.inputs[0]


def _producer(g: Graph, tensor: str, op: str) -> Layer | None:
    """The `op` layer writing `tensor`, without a fused activation (any number of readers)."""
    layer = g.producer(tensor)
    return layer if layer is not None and layer.op == op and not layer.attrs.get("act") else None


@dataclass(slots=True)
class _Stats:
    """mean m = mean(x), d = x - m, var = mean(d*d) (or d**2), var + eps, its sqrt."""

    layers: list[Layer]  # mean, sub, square, mean, add eps, sqrt
    x: str
    m: str
    d: str
    square: Layer
    axes: tuple[int, ...]
    eps: float


def _stats(g: Graph, sd: str) -> _Stats | None:
    """The statistics ending at `sd` = sqrt(mean((x - mean(x))^2) + eps), each read once."""
    sqrt = single_producer(g, sd, "sqrt")
    add = sqrt and single_producer(g, sqrt.inputs[0], "add")
    if sqrt is None or add is None:
        return None
    var, eps_name = add.inputs if scalar_const(g, add.inputs[1]) is not None else add.inputs[::-1]
    eps = scalar_const(g, eps_name)
    red2 = g.producer(var) if single_user(g, var) else None
    axes = _mean_axes(g, red2)
    if eps is None or red2 is None or axes is None or not single_user(g, red2.inputs[0]):
        return None
    sq = g.producer(red2.inputs[0])
    if sq is None or sq.attrs.get("act"):
        return None
    if sq.op == "pows" and sq.attrs["scalar"] == 2.0:
        d = sq.inputs[0]
    elif sq.op == "mul" and sq.inputs[0] == sq.inputs[1]:
        d = sq.inputs[0]
    else:
        return None
    sub = _producer(g, d, "sub")
    if sub is None or d in g.outputs:
        return None
    x, m = sub.inputs
    red1 = g.producer(m)
    if red1 is None or red1.inputs[0] != x or _mean_axes(g, red1) != axes or m in g.outputs:
        return None
    return _Stats([red1, sub, sq, red2, add, sqrt], x, m, d, sq, axes, eps)


def _readers(g: Graph, tensor: str) -> set[str]:
    return {layer.name for layer in g.users(tensor)}


def _match_centered(
    g: Graph, norm: Layer
) -> tuple[list[Layer], str, tuple[int, ...], float] | None:
    """d / sqrt(var + eps) or d * recip(sqrt(var + eps)) ending at `norm` (div or mul)."""
    if norm.op == "div":
        d, sd = norm.inputs
        extra: list[Layer] = []
    else:
        recip = next((r for t in norm.inputs if (r := single_producer(g, t, "recip"))), None)
        if recip is None:
            return None
        d, sd, extra = _other(norm, recip.outputs[0]), recip.inputs[0], [recip]
    st = _stats(g, sd)
    if st is None or st.d != d or _readers(g, d) != {st.square.name, norm.name}:
        return None
    if _readers(g, st.m) != {st.layers[1].name}:
        return None
    return [*st.layers, *extra, norm], st.x, st.axes, st.eps


def _affine(g: Graph, y: str, op: str, norm: tuple[int, ...]) -> Layer | None:
    """A single-reader mul/add of `y` by a constant broadcastable over the normalised dims."""
    if not single_user(g, y):
        return None
    layer = g.users(y)[0]
    if layer.op != op or layer.attrs.get("act"):
        return None
    other = layer.inputs[1] if layer.inputs[0] == y else layer.inputs[0]
    shape = g.tensors[other].shape
    if not g.is_const(other) or len(shape) > len(norm):
        return None
    try:
        broadcast = np.broadcast_shapes(shape, norm)
    except ValueError:
        return None
    return layer if broadcast == tuple(norm) else None


def _gamma_beta(
    g: Graph, y: str, norm: tuple[int, ...], name: str
) -> tuple[list[Layer], list[str]]:
    """The optional mul by gamma and add of beta after `y`, and the layernorm's params."""
    layers: list[Layer] = []
    params = ["", ""]
    for k, op in enumerate(("mul", "add")):
        nxt = _affine(g, y, op, norm)
        if nxt is None:
            break
        data = np.broadcast_to(const(g, _other(nxt, y)), norm).astype(np.float32)
        params[k] = add_const(g, f"{name}.{'gamma' if op == 'mul' else 'beta'}", data)
        layers.append(nxt)
        y = nxt.outputs[0]
    if params[1] and not params[0]:
        params[0] = add_const(g, f"{name}.gamma", np.ones(norm, np.float32))
    return layers, [p for p in params if p]


def _match(g: Graph, anchor: Layer) -> tuple[list[Layer], list[str], dict] | None:
    """A LayerNorm normalising d = x - mean(x) at `anchor` (div, or mul by a reciprocal),
    then optional * gamma and + beta."""
    found = _match_centered(g, anchor)
    if found is None:
        return None
    layers, x, axes, eps = found
    norm = g.tensors[x].shape[axes[0] :]
    more, params = _gamma_beta(g, anchor.outputs[0], norm, anchor.name)
    return [*layers, *more], [x, *params], {"axis": axes[0], "epsilon": eps}


def _const_over(g: Graph, name: str, norm: tuple[int, ...]) -> np.ndarray | None:
    """Constant `name` broadcast to the normalised dims, if it broadcasts so."""
    if not g.is_const(name) or len(g.tensors[name].shape) > len(norm):
        return None
    try:
        return np.broadcast_to(const(g, name), norm).astype(np.float32)
    except ValueError:
        return None


def _match_scaled(g: Graph, out: Layer) -> tuple[list[Layer], list[str], dict] | None:
    """tf.nn.batch_normalization's and Keras 3's LayerNorm, ending at add `out`:
    inv = recip(sqrt(var + eps)) [* gamma]; x * inv + (beta - mean * inv), or
    x * inv + (-mean * inv + beta); the centred d feeds only the variance."""
    for xs_name in out.inputs:
        xs = _producer(g, xs_name, "mul")
        if xs is None or not single_user(g, xs_name):
            continue
        for inv in xs.inputs:
            found = _scaled_rest(g, out, xs, inv)
            if found is not None:
                return found
    return None


def _scaled_rest(
    g: Graph, out: Layer, xs: Layer, inv: str
) -> tuple[list[Layer], list[str], dict] | None:
    """The rest of `_match_scaled` once x * inv is `xs`."""
    x = _other(xs, inv)
    gmul = _producer(g, inv, "mul")
    recip_name, gamma_name = inv, ""
    if gmul is not None:
        recip_name = next((t for t in gmul.inputs if _producer(g, t, "recip")), "")
        gamma_name = _other(gmul, recip_name) if recip_name else ""
        if not recip_name:
            return None
    recip = _producer(g, recip_name, "recip")  # inv itself when there is no gamma
    st = _stats(g, recip.inputs[0]) if recip is not None else None
    if recip is None or st is None or st.x != x or _readers(g, st.d) != {st.square.name}:
        return None
    norm = g.tensors[x].shape[st.axes[0] :]
    gamma = _const_over(g, gamma_name, norm) if gamma_name else np.ones(norm, np.float32)
    res = _other(out, xs.outputs[0])
    shift = _shift(g, res, st.m, inv)
    if gamma is None or shift is None or not single_user(g, res):
        return None
    shift_layers, beta_name = shift
    beta = _const_over(g, beta_name, norm) if beta_name else np.zeros(norm, np.float32)
    if beta is None or inv in g.outputs or _readers(g, inv) != {xs.name, shift_layers[0].name}:
        return None
    if not _readers(g, st.m) <= {st.layers[1].name, *(layer.name for layer in shift_layers)}:
        return None
    if gmul is not None and not single_user(g, recip_name):
        return None
    layers = [*st.layers, recip, *([gmul] if gmul else []), xs, *shift_layers, out]
    inputs = [x, add_const(g, f"{out.name}.gamma", gamma), add_const(g, f"{out.name}.beta", beta)]
    return layers, inputs, {"axis": st.axes[0], "epsilon": st.eps}


def _shift(g: Graph, res: str, m: str, inv: str) -> tuple[list[Layer], str] | None:
    """The layers of beta - m * inv, -m * inv + beta or -m * inv at `res` (the first one reads
    inv), and beta's name ('' when absent)."""
    layer = g.producer(res)
    if layer is None or layer.attrs.get("act"):
        return None
    beta = ""
    tail: list[Layer] = []
    if layer.op in ("sub", "add") and any(g.is_const(t) for t in layer.inputs):
        beta = next(t for t in layer.inputs if g.is_const(t))
        prod = _other(layer, beta)
        if (layer.op == "sub") != (layer.inputs[0] == beta) or not single_user(g, prod):
            return None
        tail, layer = [layer], g.producer(prod)
        if layer is None or layer.op != "mul" or layer.attrs.get("act"):
            return None
        negated = tail[0].op == "add"
    else:
        negated = True
    if layer.op != "mul" or inv not in layer.inputs:
        return None
    mean = _other(layer, inv)
    if negated:
        neg = single_producer(g, mean, "neg")
        if neg is None or neg.inputs[0] != m:
            return None
        return [layer, neg, *tail], beta
    return ([layer, *tail], beta) if mean == m else None


@dataclass(frozen=True, slots=True)
class FuseLayerNorm(GraphPass):
    """Replace each decomposed LayerNorm by a `layernorm` layer."""

    name = "fuse-layernorm"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every match; the last layer of the pattern becomes the layernorm."""
        fused = fuse_all(ir, "div", _fusion) + fuse_all(ir, "mul", _fusion)
        fused += fuse_all(ir, "add", _scaled_fusion)
        ctx.stats["fuse-layernorm.fused"] = fused
        return ir


def _fusion(g: Graph, anchor: Layer) -> Fusion | None:
    found = _match(g, anchor)
    if found is None:
        return None
    layers, inputs, attrs = found
    return Fusion(layers[-1], layers[:-1], "layernorm", inputs, attrs)


def _scaled_fusion(g: Graph, out: Layer) -> Fusion | None:
    found = _match_scaled(g, out)
    if found is None:
        return None
    layers, inputs, attrs = found
    return Fusion(out, layers[:-1], "layernorm", inputs, attrs)
