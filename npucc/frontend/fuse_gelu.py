"""fuse-gelu: a decomposed GELU -> one `gelu` layer.

The erf form x * (erf(x / sqrt 2) + 1) * 0.5 (x / sqrt(2) or x * (1/sqrt 2)) becomes
approximate="none"; the tanh form x * (tanh(sqrt(2/pi) * (x + 0.044715 x^3)) + 1) * 0.5 (x^3 as
x ** 3, x * x * x in any association) becomes approximate="tanh". Both accept 1 + e or e + 1
and the final products in any order or association ((x * h) * 0.5, x * (h * 0.5),
(x * 0.5) * h, ...); every intermediate is read once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npucc.frontend.common import Fusion, fuse_all, scalar_const, single_producer
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass

TOL = 1e-4
TANH_SCALE = math.sqrt(2.0 / math.pi)
CUBE_COEFF = 0.044715


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= TOL * abs(want)


def _other(layer: Layer, tensor: str) -> str:
    return layer.inputs[1] if layer.inputs[0] == tensor else layer.inputs[0]


def _scaled(g: Graph, tensor: str, op: str, want: float) -> tuple[Layer, str] | None:
    """(the layer, its other operand) when `tensor` is read once and is op(other, ~want)."""
    layer = single_producer(g, tensor, op)
    if layer is None:
        return None
    for pos in (1, 0) if op == "mul" else (1,):
        if _near(scalar_const(g, layer.inputs[pos]), want):
            return layer, layer.inputs[1 - pos]
    return None


def _erf_input(g: Graph, erf: Layer) -> tuple[str, list[Layer]] | None:
    """x and the layers from x to erf's input when erf reads x / sqrt 2 or x * (1/sqrt 2)."""
    for op, want in (("div", math.sqrt(2)), ("mul", math.sqrt(0.5))):
        found = _scaled(g, erf.inputs[0], op, want)
        if found is not None:
            return found[1], [found[0]]
    return None


def _cube_of(g: Graph, tensor: str) -> tuple[str, list[Layer]] | None:
    """x and the layers making `tensor` = x ** 3 (pows, or two multiplies by x)."""
    layer = g.producer(tensor)
    if layer is None or layer.attrs.get("act") or len(g.users(tensor)) != 1:
        return None
    if layer.op == "pows" and _near(layer.attrs.get("scalar"), 3.0):
        return layer.inputs[0], [layer]
    if layer.op != "mul":
        return None
    for square, x in (layer.inputs, layer.inputs[::-1]):
        inner = single_producer(g, square, "mul")
        if inner is not None and inner.inputs == [x, x]:
            return x, [inner, layer]
    return None


def _tanh_input(g: Graph, tanh: Layer) -> tuple[str, list[Layer]] | None:
    """x and the layers from x to tanh's input when it reads sqrt(2/pi) (x + 0.044715 x^3)."""
    found = _scaled(g, tanh.inputs[0], "mul", TANH_SCALE)
    if found is None:
        return None
    scale, inner = found
    plus = single_producer(g, inner, "add")
    if plus is None:
        return None
    for x, term in (plus.inputs, plus.inputs[::-1]):
        coeff = _scaled(g, term, "mul", CUBE_COEFF)
        if coeff is None:
            continue
        cube = _cube_of(g, coeff[1])
        if cube is not None and cube[0] == x:
            return x, [*cube[1], coeff[0], plus, scale]
    return None


def _tail(g: Graph, x: str, plus: Layer) -> list[Layer] | None:
    """The two multiplies turning h = 1 + e (written by `plus`) into x * h * 0.5."""
    users = g.users(plus.outputs[0])
    if plus.outputs[0] in g.outputs or len(users) != 1 or users[0].attrs.get("act"):
        return None
    first = users[0]
    if first.op != "mul":
        return None
    other = _other(first, plus.outputs[0])
    half = _scaled(g, other, "mul", 0.5)
    if half is not None and half[1] == x:  # (x * 0.5) * h
        return [half[0], first]
    layers, cur, need = [], plus.outputs[0], {"x", "half"}
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
    return layers


def _match(
    g: Graph, core: Layer, head: tuple[str, list[Layer]] | None
) -> tuple[str, list[Layer]] | None:
    """x and the GELU layers around `core` (erf or tanh) in order, the last writing the
    result; `head` is x and the layers before `core`."""
    if head is None or len(g.users(core.outputs[0])) != 1:
        return None
    x, layers = head
    plus = g.users(core.outputs[0])[0]
    if (
        plus.op != "add"
        or plus.attrs.get("act")
        or not _near(scalar_const(g, _other(plus, core.outputs[0])), 1.0)
    ):
        return None
    tail = _tail(g, x, plus)
    return None if tail is None else (x, [*layers, core, plus, *tail])


@dataclass(frozen=True, slots=True)
class FuseGelu(GraphPass):
    """Replace each decomposed erf or tanh GELU by a `gelu` layer."""

    name = "fuse-gelu"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every match; the final multiply becomes the gelu."""
        erf = fuse_all(ir, "erf", _erf_fusion)
        ctx.stats["fuse-gelu.fused"] = erf + fuse_all(ir, "tanh", _tanh_fusion)
        return ir


def _erf_fusion(g: Graph, erf: Layer) -> Fusion | None:
    return _fusion(_match(g, erf, _erf_input(g, erf)), "none")


def _tanh_fusion(g: Graph, tanh: Layer) -> Fusion | None:
    return _fusion(_match(g, tanh, _tanh_input(g, tanh)), "tanh")


def _fusion(found: tuple[str, list[Layer]] | None, approximate: str) -> Fusion | None:
    if found is None:
        return None
    x, layers = found
    return Fusion(layers[-1], layers[:-1], "gelu", [x], {"approximate": approximate})
