"""fuse-gelu: the decomposed erf GELU, x * (erf(x / sqrt 2) + 1) * 0.5, -> one `gelu` layer.

Accepts x / sqrt(2) or x * (1/sqrt 2), 1 + e or e + 1, and the two final products in either
order or association ((x * h) * 0.5, x * (h * 0.5), ...); every intermediate read once.
"""

from __future__ import annotations

import math

from npucc.frontend.common import Fusion, fuse_all, scalar_const, single_producer
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, Pass, register

TOL = 1e-4


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= TOL * abs(want)


def _other(layer: Layer, tensor: str) -> str:
    return layer.inputs[1] if layer.inputs[0] == tensor else layer.inputs[0]


def _input_of_erf(g: Graph, erf: Layer) -> str | None:
    """x when erf reads x / sqrt 2 or x * (1/sqrt 2)."""
    for op, want in (("div", math.sqrt(2)), ("mul", math.sqrt(0.5))):
        scale = single_producer(g, erf.inputs[0], op)
        if scale is None:
            continue
        if _near(scalar_const(g, scale.inputs[1]), want):
            return scale.inputs[0]
        if op == "mul" and _near(scalar_const(g, scale.inputs[0]), want):
            return scale.inputs[1]
    return None


def _match(g: Graph, erf: Layer) -> list[Layer] | None:
    """The GELU layers around `erf`, in order, the last writing the result."""
    x = _input_of_erf(g, erf)
    if x is None or len(g.users(erf.outputs[0])) != 1:
        return None
    scale = g.producer(erf.inputs[0])  # the x / sqrt 2 or x * (1/sqrt 2) that gave x
    if scale is None:
        return None
    layers = [scale, erf]
    plus = g.users(erf.outputs[0])[0]
    if (
        plus.op != "add"
        or plus.attrs.get("act")
        or not _near(scalar_const(g, _other(plus, erf.outputs[0])), 1.0)
    ):
        return None
    layers.append(plus)
    cur, need = plus.outputs[0], {"x", "half"}
    for _ in range(2):
        users = g.users(cur)
        if cur in g.outputs or len(users) != 1 or users[0].op != "mul" or users[0].attrs.get("act"):
            return None
        mul = users[0]
        other = _other(mul, cur)
        if other == x and "x" in need:
            need.discard("x")
        elif _near(scalar_const(g, other), 0.5) and "half" in need:
            need.discard("half")
        else:
            return None
        layers.append(mul)
        cur = mul.outputs[0]
    return layers  # x * 0.5 first then * h is not matched (x has other readers)


@register
class FuseGelu(Pass):
    """Replace each decomposed erf GELU by a `gelu` layer."""

    name = "fuse-gelu"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every match; the final multiply becomes the gelu."""
        ctx.stats["fuse-gelu.fused"] = fuse_all(ir, "erf", _fusion)
        return ir


def _fusion(g: Graph, erf: Layer) -> Fusion | None:
    layers = _match(g, erf)
    if layers is None:
        return None
    x = _input_of_erf(g, erf)
    assert x is not None  # _match found it
    return Fusion(layers[-1], layers[:-1], "gelu", [x], {"approximate": "none"})
