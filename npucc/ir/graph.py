"""Graph IR: layers on static-shape tensors, weights attached, in topological order.

Canonical layer ops and their attributes (the contract between frontend and lowering); every
tensor is float32 with a static shape, activations are NCHW, except graph inputs of int64
indices (dtype "i64"), which only a take reads, and tensors of dtype f16, bf16 or f64 (graph
inputs and outputs, or between two Casts), held as float32 values, which only the layers of a
Cast read or write. Integers and booleans are float32 values (booleans 1.0/0.0); a graph input
or output of them has its host type (int64, ..., bool: npucc.ir.dtypes):

  conv2d     in [x, w, b?]   strides=(sh,sw) pads=(top,left,bottom,right) dilations=(dh,dw)
                             group=int; w constant [Co, C/group, kh, kw]; b constant [Co]
  gemm       in [a, b, c?]   trans_a, trans_b (0/1), alpha, beta: Y = alpha*A'@B' + beta*C,
                             A' [M,K], B' [K,N], C broadcastable to [M,N]
  matmul     in [a, b]       numpy matmul semantics (batch dims broadcast)
  add sub mul div max min pow mod fmod in [a, b] numpy broadcasting to the output shape
                             (mod: the sign of b, like Python's %; fmod: the sign of a)
  lt gt le ge eq ne in [a, b] numpy broadcasting: 1.0 where `a OP b` holds, else 0.0
  mask maskn in [a, b]       numpy broadcasting: a where b != 0 (b == 0), else 0.0
  where      in [c, x, y]    numpy broadcasting: x where c != 0, else y
  relu exp neg sqrt recip tanh erf sigmoid abs log not f16 bf16   in [x]  element-wise (not:
                             1.0 where x == 0; f16, bf16: round to the nearest float16/bfloat16)
  sin cos tan asin acos atan sinh cosh asinh acosh atanh floor ceil round sign   in [x]
                             element-wise, numpy's float32 functions (round: half to even)
  muls adds pows in [x]      scalar: x * scalar, x + scalar, x ** scalar
  clip       in [x]          min, max (floats; +-inf when absent)
  gelu       in [x]          approximate="none" (erf) | "tanh"
  reduce     in [x]          op=sum|mean|max|min|prod, axes (sorted, non-negative); the output
                             shape (kept dims or not) comes from the tensor
  layernorm  in [x, s?, b?]  axis, epsilon: normalise over x.shape[axis:], then * s + b
                             (s, b broadcastable to x.shape[axis:]; "" when absent)
  attention  in [q, k, v, m?] scale, q_strides, k_strides, v_strides: out [..., Sq, Dv] =
                             softmax(scale * q @ kᵀ + m) @ v, q/k/v read from their tensors
                             through element strides over the logical dims [..., S, D] (k as
                             [..., Sk, D]); mask m additive, broadcastable to [..., Sq, Sk]
  slice      in [x]          starts, steps (>= 1) per dim: out[i] = x[starts + i * steps]
  take       in [x]          axis, indices (ints in range): numpy take along the axis
             in [x, ids]     axis; ids an i64 graph input (embedding lookup) or integers held
                             as float32: out = np.take(x, ids.ravel(), axis); an id outside
                             [-n, n) (n = x.shape[axis]; negative ones count from the end) is a
                             run-time error of the interpreter
  expand     in [x]          numpy broadcast to the output shape
  copy       in [x]          out = x (a distinct output tensor)
  pad        in [x]          pads=(begin..., end...) >= 0, value, strides (per dim): out =
                             value, then out[begin + i * strides] = x[i] (strides > 1 insert
                             gaps: the zero insertion of a transposed convolution)
  maxpool avgpool in [x]     kernel=(kh,kw) strides pads=(t,l,b,r) dilations count_include_pad
                             (ceil_mode already folded into pads and the output shape);
                             avgpool ceil_pads=(b,r): the part of the bottom/right pads
                             ceil_mode added, never counted (absent: none)
  globalavgpool globalmaxpool in [x]  (any number of spatial dims)
  concat     in [x...]       axis (non-negative)
  reshape    in [x]          pure view: output shape from the tensor (Flatten becomes reshape)
  transpose  in [x]          perm
  softmax    in [x]          axis (non-negative; normalised over that one axis)
  lrn        in [x]          size, alpha, beta, bias
Any layer may carry a fused activation: act="" | "relu" | "clip" with act_min/act_max.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npucc.errors import NpuccError


@dataclass(slots=True)
class Tensor:
    """A value: graph input, layer output, or constant (weights)."""

    name: str  # unique name (the ONNX tensor name)
    shape: tuple[int, ...]  # static shape
    dtype: str = "f32"  # element type
    data: np.ndarray | None = None  # constant contents; None for activations


@dataclass(slots=True)
class Layer:
    """One operation of the canonical op set (see the module docstring)."""

    name: str  # unique name (the ONNX node name, made unique by the frontend)
    op: str  # canonical op
    inputs: list[str]  # tensor names; "" for an absent optional input
    outputs: list[str]  # tensor names
    attrs: dict[str, Any] = field(default_factory=dict)  # op attributes, see module docstring


class Graph:
    """A model: tensors by name, layers in topological order, graph inputs and outputs.

    NOTE: `layers` is always topologically sorted; mutate through add_layer/remove_layer/
    replace_uses so that the producer and user maps stay consistent.
    """

    __slots__ = ("name", "tensors", "layers", "inputs", "outputs", "opset")

    def __init__(self, name: str = "main", opset: int = 0) -> None:
        self.name = name  # model graph name
        self.tensors: dict[str, Tensor] = {}
        self.layers: list[Layer] = []
        self.inputs: list[str] = []  # graph inputs (non-constant), in model order
        self.outputs: list[str] = []  # graph outputs, in model order
        self.opset = opset  # default-domain opset of the source model

    def add_tensor(self, tensor: Tensor) -> Tensor:
        """Register a tensor (its name must be new)."""
        if tensor.name in self.tensors:
            raise ValueError(f"duplicate tensor {tensor.name!r}")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_layer(self, layer: Layer, index: int | None = None) -> Layer:
        """Insert a layer at `index` (default: the end)."""
        self.layers.insert(len(self.layers) if index is None else index, layer)
        return layer

    def remove_layer(self, layer: Layer) -> None:
        """Remove a layer (its outputs must have no users left)."""
        self.layers.remove(layer)

    def producer(self, tensor: str) -> Layer | None:
        """The layer that writes `tensor`, or None for inputs and constants."""
        for layer in self.layers:
            if tensor in layer.outputs:
                return layer
        return None

    def users(self, tensor: str) -> list[Layer]:
        """Layers that read `tensor`, in order."""
        return [layer for layer in self.layers if tensor in layer.inputs]

    def replace_uses(self, old: str, new: str) -> None:
        """Make every reader of `old` (and the graph outputs) read `new` instead."""
        for layer in self.layers:
            layer.inputs = [new if t == old else t for t in layer.inputs]
        self.outputs = [new if t == old else t for t in self.outputs]

    def is_const(self, tensor: str) -> bool:
        """True when `tensor` has constant data."""
        t = self.tensors.get(tensor)
        return t is not None and t.data is not None

    def to_text(self) -> str:
        """The text form (see npucc.ir.graph_text)."""
        from npucc.ir.graph_text import graph_to_text

        return graph_to_text(self)

    def verify(self) -> None:
        """Check topological order, known tensors and unique producers; NpuccError if broken."""
        defined = set(self.inputs) | {n for n, t in self.tensors.items() if t.data is not None}
        for layer in self.layers:
            for t in layer.inputs:
                if t and t not in defined:
                    raise NpuccError(f"layer '{layer.name}' reads undefined tensor '{t}'")
            for t in layer.outputs:
                if t in defined:
                    raise NpuccError(f"tensor '{t}' is written twice (layer '{layer.name}')")
                if t not in self.tensors:
                    raise NpuccError(f"layer '{layer.name}' writes unknown tensor '{t}'")
                defined.add(t)
        for t in self.outputs:
            if t not in defined:
                raise NpuccError(f"graph output '{t}' is never written")


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
