"""The canonical op set of the graph IR: per op its operands, attributes and result shape.

Canonical layer ops and their attributes (the contract between frontend and lowering); every
tensor is float32 with a static shape, activations are NCHW, except graph inputs of int64
indices (dtype "i64"), which only a take reads, and tensors of dtype f16, bf16 or f64 (graph
inputs and outputs, or between two Casts), held as float32 values, which only the layers of a
Cast read or write. Integers and booleans are float32 values (booleans 1.0/0.0); a graph input
or output of them has its host type (int64, ..., bool: npucc.ir.dtypes):

  conv2d     in [x, w, b?, r?, s?]  strides=(sh,sw) pads=(top,left,bottom,right)
                             dilations=(dh,dw) group=int; w constant [Co, C/group, kh, kw];
                             b constant [Co] ("" when absent); r: a residual of the output's
                             shape added before the activation (fuse-residual); s: a second
                             image of a 1x1 conv (fuse-shortcut), its channels K after x's
                             (w [Co, Cx + Cs, 1, 1]), read at s_strides=(sh,sw); dense=int:
                             an int8 depthwise conv as dense groups of `dense` channels, w
                             zero off the diagonal (its MACs and weights: the model's times
                             dense)
  gemm       in [a, b, c?, r?]  trans_a, trans_b (0/1), alpha, beta: Y = alpha*A'@B' + beta*C
                             (+ r), A' [M,K], B' [K,N], C broadcastable to [M,N] ("" when
                             absent), r a residual [M,N] added before the activation
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
  host       in [x...]       host: the original ONNX node as canonical JSON (npucc.frontend.
                             host_fallback); any number of inputs and outputs; the host runs it
                             (--fallback host), the NPU does not
Any layer may carry a fused activation: act="" | "relu" | "clip" with act_min/act_max; a float
gemm, matmul or group-1 conv2d also act="gelu" | "gelu_tanh" (erf form, tanh approximation).

Layers of the other level, `onnx.<Op>` (ONNX_PREFIX), are ONNX nodes not yet legalised: the
frontend's import writes them and legalize-onnx replaces them; they have no schema here.
Graph.verify() checks every canonical layer against SCHEMAS (check_layer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ONNX_PREFIX = "onnx."  # op prefix of layers not yet legalised to the canonical op set
# NOTE: a view op only reinterprets a contiguous tensor: the lowering aliases its output to its
# input's DDR tensor, so the planner, the on-chip plan and the estimate treat it as no work.
VIEW_OPS = ("reshape",)
HOST_OP = "host"  # a host segment: an ONNX node the host runs (--fallback host)

Shape = tuple[int, ...]
Attrs = Mapping[str, Any]
# the result shape a layer's input shapes and attributes imply; None: not determined by them
ShapeRule = Callable[[list[Shape], Attrs], Shape | None]


def is_onnx_level(op: str) -> bool:
    """True for an `onnx.<Op>` layer (not yet legalised), False for a canonical one."""
    return op.startswith(ONNX_PREFIX)


@dataclass(frozen=True, slots=True)
class OpSchema:
    """What a canonical op reads, which attributes it takes and the shape it writes."""

    operands: tuple[int, int]  # fewest and most inputs ("" counts: an absent optional one)
    # name -> kind; "?" suffix: optional (the lowering's default applies)
    attrs: Mapping[str, str] = field(default_factory=dict)
    shape: ShapeRule | None = None  # None: the output shape comes from its tensor


def _same(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    return shapes[0]


def _broadcast(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return ()  # no shape: never equal to a rank >= 1 output


def _window(n: int, k: int, stride: int, dilation: int, before: int, after: int) -> int:
    return (n + before + after - ((k - 1) * dilation + 1)) // stride + 1


def _conv2d(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    (n, _, h, w), (co, _, kh, kw) = shapes[0], shapes[1]
    (sh, sw), (dh, dw) = attrs.get("strides", (1, 1)), attrs.get("dilations", (1, 1))
    t, left, b, r = attrs.get("pads", (0, 0, 0, 0))
    return (n, co, _window(h, kh, sh, dh, t, b), _window(w, kw, sw, dw, left, r))


def _pool(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    n, c, h, w = shapes[0]
    (kh, kw), (sh, sw) = attrs["kernel"], attrs.get("strides", (1, 1))
    (dh, dw), (t, left, b, r) = attrs.get("dilations", (1, 1)), attrs.get("pads", (0, 0, 0, 0))
    return (n, c, _window(h, kh, sh, dh, t, b), _window(w, kw, sw, dw, left, r))


def _gemm(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    a, b = shapes[0], shapes[1]
    m = a[1] if attrs.get("trans_a", 0) else a[0]
    n = b[0] if attrs.get("trans_b", 0) else b[1]
    return (m, n)


def _matmul(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        return None  # a vector operand: numpy drops its dim
    try:
        batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
    except ValueError:
        return ()
    return (*batch, a[-2], b[-1])


def _global_pool(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    x = shapes[0]
    return (*x[:2], *(1,) * (len(x) - 2))


def _concat(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    axis = attrs["axis"]
    first = shapes[0]
    return (*first[:axis], sum(s[axis] for s in shapes), *first[axis + 1 :])


def _transpose(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    return tuple(shapes[0][p] for p in attrs["perm"])


def _pad(shapes: list[Shape], attrs: Attrs) -> Shape | None:
    x, pads = shapes[0], attrs["pads"]
    strides = attrs["strides"]
    rank = len(x)
    return tuple(pads[i] + pads[rank + i] + (n - 1) * strides[i] + 1 for i, n in enumerate(x))


BINARY_OPS = (
    "add", "sub", "mul", "div", "max", "min", "pow", "mod", "fmod",
    "lt", "gt", "le", "ge", "eq", "ne", "mask", "maskn",
)  # fmt: skip
UNARY_OPS = (
    "relu", "exp", "neg", "sqrt", "recip", "tanh", "erf", "sigmoid", "abs", "log", "not",
    "f16", "bf16", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
    "acosh", "atanh", "floor", "ceil", "round", "sign", "copy",
)  # fmt: skip
# an int8 layer's requantization (npucc.frontend.onnx_qdq): input zero point, output zero point
# and saturation bounds, and a fused residual add's `q` (fuse-residual); its input 2 holds the
# per-channel requant records
QUANT = {"qin": "int?", "qzp": "int?", "qlo": "int?", "qhi": "int?", "res_q": "floats?"}
# an int8 vector layer (add, softmax, average pools): its instructions' `q` (isa.QUANT_ARITY)
VQUANT = {"q": "floats?"}
ACT = {"act": "str?", "act_min": "float?", "act_max": "float?"}  # any layer's fused activation
_UNARY = OpSchema((1, 1), {}, _same)
_BINARY = OpSchema((2, 2), {}, _broadcast)
_SCALAR = OpSchema((1, 1), {"scalar": "float"}, _same)
_POOL = {"kernel": "ints", "strides": "ints?", "pads": "ints?", "dilations": "ints?",
         "count_include_pad": "int?"}  # fmt: skip

SCHEMAS: dict[str, OpSchema] = {
    "conv2d": OpSchema(
        (2, 5),
        {
            "strides": "ints?",
            "s_strides": "ints?",
            "pads": "ints?",
            "dilations": "ints?",
            "group": "int?",
            **QUANT,
            "dense": "int?",
        },
        _conv2d,
    ),
    "gemm": OpSchema(
        (2, 4),
        {"trans_a": "int?", "trans_b": "int?", "alpha": "float?", "beta": "float?", **QUANT},
        _gemm,
    ),
    "matmul": OpSchema((2, 2), {}, _matmul),
    **{op: _BINARY for op in BINARY_OPS},
    "add": OpSchema((2, 2), VQUANT, _broadcast),
    "where": OpSchema((3, 3), {}, _broadcast),
    **{op: _UNARY for op in UNARY_OPS},
    "softmax": OpSchema((1, 1), {"axis": "int", **VQUANT}, _same),
    "lrn": OpSchema(
        (1, 1), {"size": "int", "alpha": "float", "beta": "float", "bias": "float?"}, _same
    ),
    "muls": _SCALAR,
    "adds": _SCALAR,
    "pows": _SCALAR,
    "clip": OpSchema((1, 1), {"min": "float?", "max": "float?"}, _same),
    "gelu": OpSchema((1, 1), {"approximate": "str?"}, _same),
    "reduce": OpSchema((1, 1), {"op": "str", "axes": "ints"}),
    "layernorm": OpSchema((1, 3), {"axis": "int", "epsilon": "float"}, _same),
    "attention": OpSchema(
        (3, 4),
        {"scale": "float", "q_strides": "ints", "k_strides": "ints", "v_strides": "ints"},
    ),
    "slice": OpSchema((1, 1), {"starts": "ints", "steps": "ints"}),
    "take": OpSchema((1, 2), {"axis": "int", "indices": "ints?"}),
    "expand": OpSchema((1, 1), {}),
    "pad": OpSchema((1, 1), {"pads": "ints", "value": "float", "strides": "ints"}, _pad),
    "maxpool": OpSchema((1, 1), _POOL, _pool),
    "avgpool": OpSchema((1, 1), {**_POOL, "ceil_pads": "ints?", **VQUANT}, _pool),
    "globalavgpool": OpSchema((1, 1), VQUANT, _global_pool),
    "globalmaxpool": OpSchema((1, 1), {}, _global_pool),
    "concat": OpSchema((1, 1 << 30), {"axis": "int"}, _concat),
    "reshape": OpSchema((1, 1), {}),
    "transpose": OpSchema((1, 1), {"perm": "ints"}, _transpose),
    HOST_OP: OpSchema((0, 1 << 30), {"host": "str"}),
}


def _kind_ok(kind: str, value: Any) -> bool:
    if kind == "int":
        return isinstance(value, int | np.integer)
    if kind == "float":
        return isinstance(value, int | float | np.integer | np.floating)
    if kind == "str":
        return isinstance(value, str)
    if kind == "floats":
        return isinstance(value, tuple | list) and all(_kind_ok("float", v) for v in value)
    return isinstance(value, tuple | list) and all(isinstance(v, int | np.integer) for v in value)


def check_layer(
    op: str, inputs: list[str], attrs: Attrs, shapes: list[Shape], out: list[Shape]
) -> str:
    """What is wrong with a canonical layer (its input names, attributes, present inputs'
    shapes and output shapes) against its schema; "" when nothing is."""
    schema = SCHEMAS.get(op)
    if schema is None:
        return f"unknown canonical op '{op}'"
    low, high = schema.operands
    if not low <= len(inputs) <= high:
        return f"{op} takes {low}..{high} inputs, not {len(inputs)}"
    if len(out) != 1 and not (op == HOST_OP and out):
        return f"{op} writes one output, not {len(out)}"
    kinds = {**schema.attrs, **ACT}
    for key, value in attrs.items():
        kind = kinds.get(key)
        if kind is None:
            return f"{op} has no attribute '{key}'"
        if not _kind_ok(kind.rstrip("?"), value):
            return f"attribute {key}={value!r} of {op} is not of kind {kind.rstrip('?')}"
    missing = [k for k, kind in schema.attrs.items() if not kind.endswith("?") and k not in attrs]
    if missing:
        return f"{op} needs attribute '{missing[0]}'"
    want = schema.shape(shapes, attrs) if schema.shape is not None else None
    if want is not None and tuple(want) != tuple(out[0]):
        return f"{op} of {[list(s) for s in shapes]} gives {list(want)}, not {list(out[0])}"
    return ""
