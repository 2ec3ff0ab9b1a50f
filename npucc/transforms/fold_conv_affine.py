"""fold-conv-affine: fold a per-channel constant mul/add/sub after a conv2d into its weights.

tf2onnx leaves the BatchNormalization of a depthwise conv as Mul + Add by [C, 1, 1] constants
(and fold-batchnorm lowers a BN it cannot fold to the same); any conv2d, depthwise or grouped
included, absorbs them: conv(x, w, b) * s = conv(x, w * s[co], b * s) and conv(x, w, b) + t =
conv(x, w, b + t). The constant must broadcast over the output channels only ([C, 1, 1],
[1, C, 1, 1], [1] or a scalar) and the conv's output have no other reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.frontend.graph_edit import add_const, const, merged_src, single_user
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass

FOLDABLE = ("mul", "add", "sub", "muls", "adds")


def _per_channel(g: Graph, conv: Layer, name: str) -> np.ndarray | None:
    """The constant `name` as one value per output channel (float64), if it broadcasts so."""
    if not g.is_const(name):
        return None
    co = g.tensors[conv.outputs[0]].shape[1]
    shape = g.tensors[name].shape
    if len(shape) > 4:
        return None
    n, c, h, w = (1,) * (4 - len(shape)) + tuple(shape)  # numpy's right-aligned broadcast
    if (n, h, w) != (1, 1, 1) or c not in (1, co):
        return None
    data = const(g, name).astype(np.float64).reshape(-1)
    return np.broadcast_to(data, (co,)).copy()


def _affine(g: Graph, conv: Layer, op: Layer, y: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) per output channel that `op` applies to `y`, if foldable."""
    co = g.tensors[conv.outputs[0]].shape[1]
    if op.op in ("muls", "adds"):
        value = np.full(co, float(op.attrs["scalar"]))
        return (value, np.zeros(co)) if op.op == "muls" else (np.ones(co), value)
    if len(op.inputs) != 2 or g.tensors[op.outputs[0]].shape != g.tensors[y].shape:
        return None
    if op.op == "sub" and op.inputs[0] != y:
        return None  # t - conv(x) would negate the weights too; left alone
    other = op.inputs[1] if op.inputs[0] == y else op.inputs[0]
    values = _per_channel(g, conv, other)
    if values is None:
        return None
    if op.op == "mul":
        return values, np.zeros(co)
    return np.ones(co), -values if op.op == "sub" else values


def scaled_weights(weights: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """A conv's `weights` (output channels first), each times its channel's `scale` (float64),
    as float32: `(weights.astype(float64) * scale).astype(float32)`.

    NOTE: the same values (each product taken in float64 and rounded once), computed a buffer
    at a time: no float64 copy of the weights (ResNet-50's fold-batchnorm: 25 M weights).
    """
    out = np.empty(weights.shape, np.float32)
    np.multiply(weights, scale.reshape(-1, *[1] * (weights.ndim - 1)), out=out,
                dtype=np.float64, casting="same_kind")  # fmt: skip
    return out


def _fold(g: Graph, conv: Layer, chain: list[Layer], scale: np.ndarray, shift: np.ndarray) -> None:
    """Rescale the conv's weights and bias once; the conv then writes the chain's output."""
    w = conv.inputs[1]
    b = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
    bias = (const(g, b).astype(np.float64) if b else 0.0) * scale + shift
    new_w = add_const(g, f"{w}.affine", scaled_weights(const(g, w), scale))
    new_b = add_const(g, f"{b or w}.affine_bias", bias.astype(np.float32))
    old = conv.outputs[0]
    for layer in chain:
        g.remove_layer(layer)
    conv.src = merged_src(conv, *chain)
    for layer in chain[:-1]:
        del g.tensors[layer.outputs[0]]
    g.set_inputs(conv, [conv.inputs[0], new_w, new_b])
    g.set_outputs(conv, list(chain[-1].outputs))
    del g.tensors[old]


def _next(g: Graph, conv: Layer, y: str) -> tuple[Layer, np.ndarray, np.ndarray] | None:
    """The foldable layer that alone reads `y` (the conv's output so far), its scale, shift."""
    if not single_user(g, y):
        return None
    op = g.users(y)[0]
    if op.op not in FOLDABLE or op.attrs.get("act"):
        return None
    found = _affine(g, conv, op, y)
    return None if found is None else (op, *found)


def _fold_chain(g: Graph, conv: Layer) -> int:
    """Fold the chain of foldable layers after `conv`; returns its length."""
    if conv.attrs.get("act") or not all(g.is_const(t) for t in conv.inputs[1:] if t):
        return 0
    co = g.tensors[conv.outputs[0]].shape[1]
    chain: list[Layer] = []
    scale, shift = np.ones(co), np.zeros(co)
    y = conv.outputs[0]
    while (found := _next(g, conv, y)) is not None:
        op, s, t = found
        scale, shift = scale * s, shift * s + t
        chain.append(op)
        y = op.outputs[0]
    if chain:
        _fold(g, conv, chain, scale, shift)
    return len(chain)


@dataclass(frozen=True, slots=True)
class FoldConvAffine(GraphPass):
    """Fold every chain of per-channel constant mul/add/sub after a conv2d into the conv."""

    name = "fold-conv-affine"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fold each conv's followers, in order, up to the first that is not foldable."""
        folded = 0
        for conv in list(ir.layers):
            if conv.op == "conv2d":
                folded += _fold_chain(ir, conv)
        ctx.stats["fold-conv-affine.folded"] = folded
        return ir
