"""Seq, the layer-sequence builder, and helpers every ONNX legalisation uses."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from npucc.frontend.graph_edit import add_const, const, fresh_layer_name, fresh_name, node_error
from npucc.ir.graph import Graph, Layer, Tensor

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


def scalar_unary(s: Seq, op: str, x: str, value: float, out: str = "") -> str:
    return s.add(op, [x], out, scalar=float(value))


def need_const(g: Graph, layer: Layer, name: str, what: str) -> np.ndarray:
    """The data of constant input `name`; a one-line node error when it is not constant."""
    if not g.is_const(name):
        raise node_error(layer, f"{what} must be constant")
    return const(g, name)


def slice_seq(s: Seq, x: str, ranges: list[range], out: str) -> str:
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


def broadcast(s: Seq, x: str, out: str) -> str:
    in_shape, out_shape = s.g.tensors[x].shape, s.g.tensors[out].shape
    if math.prod(in_shape) == math.prod(out_shape):
        return s.add("reshape", [x], out)
    return s.add("expand", [x], out)


def single(layer: Layer, op: str, inputs: list[str], **attrs: object) -> list[Layer]:
    if len(layer.outputs) != 1:
        raise node_error(layer, "only the first output is supported")
    return [Layer(layer.name, op, inputs, list(layer.outputs), dict(attrs))]
