"""Graph IR: layers on static-shape tensors, weights attached, in topological order.

A layer is either canonical (its op is in the canonical op set: npucc.ir.graph_schema, which
documents each op and gives its operands, attributes and result shape rule) or ONNX-level
(`onnx.<Op>`, an ONNX node the frontend has not legalised yet). Any layer may carry a fused
activation: act="" | "relu" | "clip" with act_min/act_max.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import data_digest, dtype_name
from npucc.ir.graph_schema import check_layer, is_onnx_level

_IDENT = re.compile(r"[A-Za-z_][\w.]*\Z")


@dataclass(slots=True)
class Tensor:
    """A value: graph input, layer output, or constant (weights)."""

    name: str  # unique name (the ONNX tensor name)
    shape: tuple[int, ...]  # static shape
    dtype: str = "f32"  # element type
    data: np.ndarray | None = None  # constant contents; None for activations
    # an int8 program's graph input or output: (scale, zero point) of the int8 values its
    # float model tensor is quantized to (and read back from) by the host (docs/precision.md)
    quant: tuple[float, int] | None = None


@dataclass(slots=True)
class Layer:
    """One operation: a canonical op (npucc.ir.graph_schema) or an `onnx.<Op>` node.

    NOTE: once a layer is in a Graph, change its inputs and outputs only through the graph
    (set_inputs, set_outputs, replace_uses): the graph keeps the producer and users of each
    tensor from them.
    """

    name: str  # unique name (the ONNX node name, made unique by the frontend)
    op: str  # canonical op
    inputs: list[str]  # tensor names; "" for an absent optional input
    outputs: list[str]  # tensor names
    attrs: dict[str, Any] = field(default_factory=dict)  # op attributes (graph_schema)
    # provenance: the ONNX nodes (import's unique names) this layer computes, for the debug
    # map; replace_layer hands it on, fusions and folds merge it (not in the text form)
    src: tuple[str, ...] = ()

    @property
    def is_canonical(self) -> bool:
        """True for a layer of the canonical op set, False for an `onnx.<Op>` one."""
        return not is_onnx_level(self.op)


class _Link:
    """A layer's place in the graph's doubly linked layer order."""

    __slots__ = ("layer", "prev", "next")

    def __init__(self, layer: Layer | None) -> None:
        self.layer = layer  # None for the sentinel
        self.prev: _Link = self
        self.next: _Link = self


class Graph:
    """A model: tensors by name, layers in topological order, graph inputs and outputs.

    The graph keeps use lists (like onnx-ir's `Value.uses()`): the producer and the users of
    each tensor, and the layers by name, so that producer(), users(), has_layer() and
    layer_name_taken() take O(1), and inserting or removing a layer O(its operands).

    NOTE: `layers` is always topologically sorted and the use lists always match the layers'
    inputs and outputs; mutate only through add_layer/remove_layer/replace_layer/set_inputs/
    set_outputs/replace_uses (verify() checks the use lists).
    """

    __slots__ = (
        "name", "tensors", "inputs", "outputs", "opset",
        "_head", "_links", "_producer", "_users", "_names", "_order",
    )  # fmt: skip

    def __init__(self, name: str = "main", opset: int = 0) -> None:
        self.name = name  # model graph name
        self.tensors: dict[str, Tensor] = {}
        self.inputs: list[str] = []  # graph inputs (non-constant), in model order
        self.outputs: list[str] = []  # graph outputs, in model order
        self.opset = opset  # default-domain opset of the source model
        self._head = _Link(None)  # sentinel of the layer order (a ring)
        self._links: dict[int, _Link] = {}  # id(layer) -> its link
        self._producer: dict[str, Layer] = {}  # tensor -> the layer writing it
        self._users: dict[str, dict[int, Layer]] = {}  # tensor -> readers by id, in use order
        self._names: dict[str, int] = {}  # layer name -> how many layers carry it
        self._order: tuple[Layer, ...] | None = ()  # `layers`, None once a mutation staled it

    @property
    def layers(self) -> tuple[Layer, ...]:
        """The layers in topological order (rebuilt once after a mutation)."""
        if self._order is None:
            self._order = tuple(self._walk(self._head))
        return self._order

    def _walk(self, start: _Link) -> Iterator[Layer]:
        link = start.next
        while link.layer is not None:
            yield link.layer
            link = link.next

    def layers_after(self, layer: Layer) -> list[Layer]:
        """The layers following `layer`, in order."""
        return list(self._walk(self._links[id(layer)]))

    def add_tensor(self, tensor: Tensor) -> Tensor:
        """Register a tensor (its name must be new)."""
        if tensor.name in self.tensors:
            raise ValueError(f"duplicate tensor {tensor.name!r}")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_layer(self, layer: Layer, after: Layer | None = None) -> Layer:
        """Insert a layer right after `after` (default: at the end)."""
        self._insert(layer, self._head.prev if after is None else self._links[id(after)])
        return layer

    def _insert(self, layer: Layer, prev: _Link) -> _Link:
        if id(layer) in self._links:
            raise ValueError(f"layer {layer.name!r} is already in the graph")
        link = _Link(layer)
        link.prev, link.next = prev, prev.next
        prev.next.prev = link
        prev.next = link
        self._links[id(layer)] = link
        self._names[layer.name] = self._names.get(layer.name, 0) + 1
        self._use(layer)
        self._order = None
        return link

    def remove_layer(self, layer: Layer) -> None:
        """Remove a layer (its outputs must have no users left)."""
        link = self._links.pop(id(layer))
        link.prev.next, link.next.prev = link.next, link.prev
        count = self._names[layer.name] - 1
        if count:
            self._names[layer.name] = count
        else:
            del self._names[layer.name]
        self._unuse(layer)
        self._order = None

    def replace_layer(self, old: Layer, new: list[Layer]) -> None:
        """Put the layers `new` (in order) where `old` is, and remove `old`; a new layer without
        provenance takes `old`'s."""
        prev = self._links[id(old)].prev
        self.remove_layer(old)
        for layer in new:
            layer.src = layer.src or old.src
            prev = self._insert(layer, prev)

    def set_inputs(self, layer: Layer, inputs: list[str]) -> None:
        """Make `layer` (in the graph) read `inputs`."""
        self._unuse_inputs(layer)
        layer.inputs = inputs
        self._use_inputs(layer)

    def set_outputs(self, layer: Layer, outputs: list[str]) -> None:
        """Make `layer` (in the graph) write `outputs`."""
        self._unuse_outputs(layer)
        layer.outputs = outputs
        self._use_outputs(layer)

    def has_layer(self, layer: Layer) -> bool:
        """True when `layer` (this very object) is in the graph."""
        return id(layer) in self._links

    def layer_name_taken(self, name: str) -> bool:
        """True when a layer of the graph is called `name`."""
        return name in self._names

    def producer(self, tensor: str) -> Layer | None:
        """The layer that writes `tensor`, or None for inputs and constants."""
        return self._producer.get(tensor)

    def users(self, tensor: str) -> list[Layer]:
        """Layers that read `tensor` (each once), in the order their uses were made."""
        return list(self._users.get(tensor, {}).values())

    def replace_uses(self, old: str, new: str) -> None:
        """Make every reader of `old` (and the graph outputs) read `new` instead."""
        for layer in self.users(old):
            self.set_inputs(layer, [new if t == old else t for t in layer.inputs])
        self.outputs = [new if t == old else t for t in self.outputs]

    def is_const(self, tensor: str) -> bool:
        """True when `tensor` has constant data."""
        t = self.tensors.get(tensor)
        return t is not None and t.data is not None

    def to_text(self) -> str:
        """The text form (see npucc.ir.graph_text)."""
        return _graph_text(self)

    def _check_schema(self, layer: Layer) -> None:
        shapes = [self.tensors[t].shape for t in layer.inputs if t]
        out = [self.tensors[t].shape for t in layer.outputs if t in self.tensors]
        problem = check_layer(layer.op, layer.inputs, layer.attrs, shapes, out)
        if problem:
            raise NpuccError(f"layer '{layer.name}': {problem}")

    def _use(self, layer: Layer) -> None:
        self._use_inputs(layer)
        self._use_outputs(layer)

    def _unuse(self, layer: Layer) -> None:
        self._unuse_inputs(layer)
        self._unuse_outputs(layer)

    def _use_inputs(self, layer: Layer) -> None:
        for t in layer.inputs:
            if t:
                self._users.setdefault(t, {})[id(layer)] = layer

    def _unuse_inputs(self, layer: Layer) -> None:
        for t in layer.inputs:
            readers = self._users.get(t)
            if readers is not None:
                readers.pop(id(layer), None)
                if not readers:
                    del self._users[t]

    def _use_outputs(self, layer: Layer) -> None:
        for t in layer.outputs:
            self._producer[t] = layer

    def _unuse_outputs(self, layer: Layer) -> None:
        for t in layer.outputs:
            if self._producer.get(t) is layer:
                del self._producer[t]

    def verify(self) -> None:
        """Check topological order, known tensors, unique producers, the use lists and each
        canonical layer against its schema; NpuccError if broken."""
        defined = set(self.inputs) | {n for n, t in self.tensors.items() if t.data is not None}
        users: dict[str, dict[int, Layer]] = {}
        for layer in self.layers:
            for t in layer.inputs:
                if t and t not in defined:
                    raise NpuccError(f"layer '{layer.name}' reads undefined tensor '{t}'")
                if t:
                    users.setdefault(t, {})[id(layer)] = layer
            if layer.is_canonical:
                self._check_schema(layer)
            for t in layer.outputs:
                if t in defined:
                    raise NpuccError(f"tensor '{t}' is written twice (layer '{layer.name}')")
                if t not in self.tensors:
                    raise NpuccError(f"layer '{layer.name}' writes unknown tensor '{t}'")
                if self._producer.get(t) is not layer:
                    raise NpuccError(f"use lists: the producer of '{t}' is stale")
                defined.add(t)
        for t in self.outputs:
            if t not in defined:
                raise NpuccError(f"graph output '{t}' is never written")
        if len(self._producer) != sum(len(x.outputs) for x in self.layers) or {
            t: set(r) for t, r in users.items()
        } != {t: set(r) for t, r in self._users.items()}:
            raise NpuccError("use lists: a layer's inputs or outputs changed behind the graph")


def _name(name: str) -> str:
    return json.dumps(name)


def _ref(name: str) -> str:
    return f"%{_name(name)}" if name else "none"


def _type(t: Tensor) -> str:
    return f"{t.dtype}[{','.join(str(d) for d in t.shape)}]"


def _scalar(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        return repr(float(v))
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"cannot print attribute value {v!r}")


def _value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        items = ", ".join(_scalar(x) for x in v.reshape(-1).tolist())
        return f"dense<{dtype_name(v.dtype)}[{','.join(map(str, v.shape))}]>[{items}]"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return _scalar(v)


def _key(key: str) -> str:
    return key if _IDENT.match(key) and key not in ("inf", "nan") else _name(key)


def _attrs(attrs: dict[str, Any]) -> str:
    if not attrs:
        return ""
    keys = sorted(attrs)
    items = ", ".join(f"{_key(k)} = {_value(attrs[k])}" for k in keys)
    return f" {{{items}}}"


def _layer(g: Graph, layer: Layer) -> str:
    outs = ", ".join(_ref(t) for t in layer.outputs)
    ins = ", ".join(_ref(t) for t in layer.inputs)
    types = ", ".join(_type(g.tensors[t]) for t in layer.outputs)
    return f"  {outs} = {layer.op}({ins}){_attrs(layer.attrs)} : {types} loc({_name(layer.name)})"


def _graph_text(g: Graph) -> str:
    """`g` in the text form (see npucc.ir.graph_text; deterministic, ends with a newline)."""
    lines = [f"graph {_name(g.name)} opset={g.opset} {{"]
    lines += [f"  input {_ref(t)} : {_type(g.tensors[t])}" for t in g.inputs]
    for t in g.tensors.values():
        if t.data is not None:
            lines.append(f"  const {_ref(t.name)} : {_type(t)} sha256={data_digest(t.data)}")
    lines += [_layer(g, layer) for layer in g.layers]
    lines += [f"  output {_ref(t)}" for t in g.outputs]
    lines.append("}")
    return "\n".join(lines) + "\n"


def runs(indices: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """(first output position, first index, step, length) of arithmetic runs with step >= 1."""
    out: list[tuple[int, int, int, int]] = []
    pos = 0
    while pos < len(indices):
        length, step = 1, 1
        if pos + 1 < len(indices) and indices[pos + 1] > indices[pos]:
            step = indices[pos + 1] - indices[pos]
            while (
                pos + length < len(indices)
                and indices[pos + length] - indices[pos + length - 1] == step
            ):
                length += 1
        out.append((pos, indices[pos], step, length))
        pos += length
    return out


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a contiguous row-major array of `shape`."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))
