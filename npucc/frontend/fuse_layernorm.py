"""fuse-layernorm: the decomposed LayerNorm of exported models -> one `layernorm` layer.

Matches d = x - mean(x); y = d / sqrt(mean(d ** 2) + eps), then optional * gamma and + beta
(constants), where both means reduce the same trailing axes and d has no other reader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.frontend.common import (
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


def _mean_over_tail(g: Graph, layer: Layer | None) -> bool:
    if layer is None or layer.op != "reduce" or layer.attrs["op"] != "mean":
        return False
    rank = len(g.tensors[layer.inputs[0]].shape)
    axes = tuple(layer.attrs["axes"])
    return axes == tuple(range(rank - len(axes), rank))


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


def _match(g: Graph, div: Layer) -> tuple[list[Layer], list[str], dict] | None:
    """The layers of a decomposed LayerNorm ending at `div`, the layernorm's inputs and attrs."""
    d, sd = div.inputs
    sqrt = single_producer(g, sd, "sqrt")
    add = sqrt and single_producer(g, sqrt.inputs[0], "add")
    if sqrt is None or add is None:
        return None
    var, eps_name = add.inputs if scalar_const(g, add.inputs[1]) is not None else add.inputs[::-1]
    eps = scalar_const(g, eps_name)
    red2 = single_producer(g, var, "reduce")
    if eps is None or red2 is None or not _mean_over_tail(g, red2):
        return None
    sq = single_producer(g, red2.inputs[0], "pows")
    if sq is None or sq.attrs["scalar"] != 2.0 or sq.inputs[0] != d:
        return None
    sub = g.producer(d)
    if sub is None or sub.op != "sub" or sub.attrs.get("act") or d in g.outputs:
        return None
    if {layer.name for layer in g.users(d)} != {sq.name, div.name}:
        return None
    x, m = sub.inputs
    red1 = single_producer(g, m, "reduce")
    if (
        red1 is None
        or not _mean_over_tail(g, red1)
        or red1.inputs[0] != x
        or red1.attrs["axes"] != red2.attrs["axes"]
    ):
        return None
    axes = red1.attrs["axes"]
    shape = g.tensors[x].shape
    norm = shape[axes[0] :]
    layers = [red1, sub, sq, red2, add, sqrt, div]
    params = ["", ""]
    y = div.outputs[0]
    for k, op in enumerate(("mul", "add")):
        nxt = _affine(g, y, op, norm)
        if nxt is None:
            break
        other = nxt.inputs[1] if nxt.inputs[0] == y else nxt.inputs[0]
        data = np.broadcast_to(const(g, other), norm).astype(np.float32)
        params[k] = add_const(g, f"{div.name}.{'gamma' if op == 'mul' else 'beta'}", data)
        layers.append(nxt)
        y = nxt.outputs[0]
    if params[1] and not params[0]:
        params[0] = add_const(g, f"{div.name}.gamma", np.ones(norm, np.float32))
    inputs = [x, *[p for p in params if p]]
    return layers, inputs, {"axis": axes[0], "epsilon": eps}


@dataclass(frozen=True, slots=True)
class FuseLayerNorm(GraphPass):
    """Replace each decomposed LayerNorm by a `layernorm` layer."""

    name = "fuse-layernorm"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every match; the last layer of the pattern becomes the layernorm."""
        ctx.stats["fuse-layernorm.fused"] = fuse_all(ir, "div", _fusion)
        return ir


def _fusion(g: Graph, div: Layer) -> Fusion | None:
    found = _match(g, div)
    if found is None:
        return None
    layers, inputs, attrs = found
    return Fusion(layers[-1], layers[:-1], "layernorm", inputs, attrs)
