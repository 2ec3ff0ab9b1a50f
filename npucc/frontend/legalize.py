"""legalize-onnx: map the remaining `onnx.<Op>` layers onto the canonical op set."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from npucc.errors import NpuccError
from npucc.frontend import onnx_ints as ints
from npucc.frontend import onnx_ops as ops
from npucc.frontend import onnx_rnn as rnn
from npucc.frontend.common import (
    const,
    fresh_layer_name,
    fresh_name,
    node_error,
    onnx_op,
    unsupported,
)
from npucc.ir.dtypes import HOST_INTS, INDEX_DTYPE, IR_INTS
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.isa import COMPARE_OPS
from npucc.passes import CompileContext, GraphPass

Pads = tuple[int, int, int, int]


def _rank(g: Graph, layer: Layer, rank: int) -> tuple[int, ...]:
    shape = g.tensors[layer.inputs[0]].shape
    if len(shape) != rank:
        raise node_error(layer, f"input must have rank {rank}, not {len(shape)}")
    return shape


def _pads(layer: Layer, spatial: tuple[int, ...], kernel: tuple[int, ...]) -> Pads:
    """(top, left, bottom, right) from `pads` or `auto_pad`."""
    begin, end = _pad_lists(layer, spatial, kernel)
    return (begin[0], begin[1], end[0], end[1])


def _pad_lists(
    layer: Layer, spatial: tuple[int, ...], kernel: tuple[int, ...]
) -> tuple[list[int], list[int]]:
    """Begin and end pads of each spatial axis from `pads` or `auto_pad`."""
    a = layer.attrs
    rank = len(spatial)
    strides, dilations = a.get("strides", (1,) * rank), a.get("dilations", (1,) * rank)
    auto = a.get("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = list(a.get("pads", (0,) * 2 * rank))
        return pads[:rank], pads[rank:]
    if auto == "VALID":
        return [0] * rank, [0] * rank
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise node_error(layer, f"unknown auto_pad {auto!r}")
    begin, end = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin, end


def _single(layer: Layer, op: str, inputs: list[str], **attrs: object) -> list[Layer]:
    if len(layer.outputs) != 1:
        raise node_error(layer, "only the first output is supported")
    return [Layer(layer.name, op, inputs, list(layer.outputs), dict(attrs))]


def _conv(g: Graph, layer: Layer) -> list[Layer]:
    _rank(g, layer, 4)
    x, w, *rest = layer.inputs
    b = rest[0] if rest else ""
    if not g.is_const(w) or (b and not g.is_const(b)):
        raise node_error(layer, "weights and bias must be constant")
    kernel = g.tensors[w].shape[2:]
    a = layer.attrs
    group = int(a.get("group", 1))
    w, group = _block_depthwise(g, w, group)
    return _single(
        layer,
        "conv2d",
        [x, w, b] if b else [x, w],
        strides=tuple(a.get("strides", (1, 1))),
        pads=_pads(layer, g.tensors[x].shape[2:], kernel),
        dilations=tuple(a.get("dilations", (1, 1))),
        group=group,
    )


# NOTE: channels per group of a depthwise conv after _block_depthwise (the cube's 16 lanes)
DEPTHWISE_BLOCK = 16


def _block_depthwise(g: Graph, w: str, group: int) -> tuple[str, int]:
    """A depthwise conv (one input and one output channel per group) as groups of B channels.

    Each group of B channels gets block-diagonal weights [B, B, kh, kw] (zeros off the
    diagonal), so the cube does B channels per tile instead of one: B times fewer tiles, at
    B times the MACs (the zeros add nothing). B is the largest divisor of the channel count
    up to DEPTHWISE_BLOCK; the weights and groups are returned unchanged otherwise.
    """
    weights = g.tensors[w]
    co, cg = weights.shape[:2]
    if group <= 1 or cg != 1 or co != group or weights.data is None:
        return w, group
    block = max(d for d in range(1, DEPTHWISE_BLOCK + 1) if group % d == 0)
    if block == 1:
        return w, group
    data = np.asarray(weights.data, dtype=np.float32).reshape(co, *weights.shape[2:])
    blocked = np.zeros((co, block, *weights.shape[2:]), np.float32)
    blocked[np.arange(co), np.arange(co) % block] = data
    name = f"{w}.block{block}"
    while name in g.tensors:
        name += "_"
    g.add_tensor(Tensor(name, blocked.shape, weights.dtype, blocked))
    return name, group // block


class _PoolAxis(NamedTuple):
    """One spatial axis of a pooling window."""

    kernel: int
    stride: int
    dilation: int
    begin: int  # pad before
    end: int  # pad after, ceil_mode's extra included
    ceil: int  # the extra end pad ceil_mode adds (never counted by an average)


_UNIT_AXIS = _PoolAxis(1, 1, 1, 0, 0, 0)


def _pool_attrs(op: str, rows: _PoolAxis, cols: _PoolAxis, count_include_pad: int) -> dict:
    """Attributes of a canonical 2-D maxpool/avgpool over `rows` and `cols`."""
    attrs = {
        "kernel": (rows.kernel, cols.kernel),
        "strides": (rows.stride, cols.stride),
        "pads": (rows.begin, cols.begin, rows.end, cols.end),
        "dilations": (rows.dilation, cols.dilation),
        "count_include_pad": count_include_pad,
    }
    if op == "avgpool" and count_include_pad and (rows.ceil or cols.ceil):
        attrs["ceil_pads"] = (rows.ceil, cols.ceil)
    return attrs


def _pool(g: Graph, layer: Layer) -> list[Layer]:
    """MaxPool/AveragePool over 2 or 3 spatial axes.

    A 3-D box pool is separable: an (h, w) pool of the [n, c*d, h, w] view, then a (d, 1) pool
    of the [n, c, d, oh*ow] view. The max of maxes is the max; an average of averages is exact
    too, since a box's tap count is the product of the per-axis counts.
    """
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    if len(shape) not in (4, 5):
        raise node_error(layer, f"input must have rank 4 or 5, not {len(shape)}")
    if len(layer.outputs) != 1:
        raise node_error(layer, "only the first output is supported")
    a = layer.attrs
    if a.get("storage_order", 0) != 0:
        raise node_error(layer, "storage_order must be 0")
    kernel = tuple(a["kernel_shape"])
    rank = len(kernel)
    strides = tuple(a.get("strides", (1,) * rank))
    dilations = tuple(a.get("dilations", (1,) * rank))
    begin, end = _pad_lists(layer, shape[2:], kernel)
    out = g.tensors[layer.outputs[0]].shape[2:]
    axes = []
    for i in range(rank):  # ceil_mode: the inferred output may need extra end padding
        window = (kernel[i] - 1) * dilations[i] + 1
        extra = (out[i] - 1) * strides[i] + window - (shape[2 + i] + begin[i] + end[i])
        ceil = max(extra, 0)
        axes.append(_PoolAxis(kernel[i], strides[i], dilations[i], begin[i], end[i] + ceil, ceil))
    op = "maxpool" if onnx_op(layer) == "MaxPool" else "avgpool"
    include = int(a.get("count_include_pad", 0))
    if rank == 2:
        return _single(layer, op, [x], **_pool_attrs(op, axes[0], axes[1], include))
    n, c, d, h, w = shape
    od, oh, ow = out
    s = ops.Seq(g, layer)
    planes = s.add("reshape", [x], s.tmp((n, c * d, h, w), "hw_view"))
    hw = s.add(
        op,
        [planes],
        s.tmp((n, c * d, oh, ow), "hw_pool"),
        **_pool_attrs(op, axes[1], axes[2], include),
    )
    rows = s.add("reshape", [hw], s.tmp((n, c, d, oh * ow), "d_view"))
    pooled = s.add(
        op,
        [rows],
        s.tmp((n, c, od, oh * ow), "d_pool"),
        **_pool_attrs(op, axes[0], _UNIT_AXIS, include),
    )
    s.add("reshape", [pooled], s.y)
    return s.done()


def _lp_pool(g: Graph, layer: Layer) -> list[Layer]:
    """LpPool: (the window's sum of |x|^p)^(1/p), the sum an AveragePool counting pads times K."""
    if int(layer.attrs.get("ceil_mode", 0)):
        raise node_error(layer, "ceil_mode is not supported")
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    p = float(layer.attrs.get("p", 2))
    s = ops.Seq(g, layer)
    magnitude = x if p == 2.0 else s.add("abs", [x], s.tmp(shape, "abs"))
    powered = s.add("pows", [magnitude], s.tmp(shape, "pow"), scalar=p)
    attrs = {k: v for k, v in layer.attrs.items() if k != "p"}
    attrs["count_include_pad"] = 1
    mean = s.tmp(g.tensors[s.y].shape, "mean")
    avg = Layer(
        fresh_layer_name(g, f"{layer.name}.avg"), "onnx.AveragePool", [powered], [mean], attrs
    )
    s.layers += ops.one_d(_pool)(g, avg)
    total = s.add("muls", [mean], scalar=float(math.prod(layer.attrs["kernel_shape"])))
    if p == 2.0:
        s.add("sqrt", [total], s.y)
    else:
        s.add("pows", [total], s.y, scalar=1.0 / p)
    return s.done()


def _global_pool(g: Graph, layer: Layer) -> list[Layer]:
    """GlobalAveragePool/GlobalMaxPool over every spatial axis (rank 3 and up)."""
    shape = g.tensors[layer.inputs[0]].shape
    if len(shape) < 3:
        raise node_error(layer, f"input must have rank 3 or more, not {len(shape)}")
    op = "globalavgpool" if onnx_op(layer) == "GlobalAveragePool" else "globalmaxpool"
    return _single(layer, op, layer.inputs[:1])


def _gemm(g: Graph, layer: Layer) -> list[Layer]:
    a = layer.attrs
    return _single(
        layer,
        "gemm",
        [t for t in layer.inputs if t],
        trans_a=int(a.get("transA", 0)),
        trans_b=int(a.get("transB", 0)),
        alpha=float(a.get("alpha", 1.0)),
        beta=float(a.get("beta", 1.0)),
    )


def _plain(op: str) -> Callable[[Graph, Layer], list[Layer]]:
    return lambda g, layer: _single(layer, op, list(layer.inputs))


def _chain(op: str) -> Callable[[Graph, Layer], list[Layer]]:
    """Variadic Sum/Max/Min as a chain of binary layers."""

    def lower(g: Graph, layer: Layer) -> list[Layer]:
        ins = list(layer.inputs)
        if len(ins) == 1:
            return _single(layer, "reshape", ins)
        layers: list[Layer] = []
        acc, shape = ins[0], g.tensors[ins[0]].shape
        for i, t in enumerate(ins[1:], start=1):
            shape = np.broadcast_shapes(shape, g.tensors[t].shape)
            if i == len(ins) - 1:
                out = layer.outputs[0]
            else:
                out = fresh_name(g, f"{layer.outputs[0]}.{op}{i}")
                g.add_tensor(Tensor(out, tuple(shape), g.tensors[layer.outputs[0]].dtype))
            name = layer.name if i == len(ins) - 1 else fresh_layer_name(g, f"{layer.name}.{i}")
            layers.append(Layer(name, op, [acc, t], [out]))
            acc = out
        return layers

    return lower


def _clip(g: Graph, layer: Layer) -> list[Layer]:
    bounds = [-math.inf, math.inf]
    if g.opset < 11:
        bounds = [float(layer.attrs.get("min", -math.inf)), float(layer.attrs.get("max", math.inf))]
    for i, t in enumerate(layer.inputs[1:3]):
        if t and not g.is_const(t):
            raise node_error(layer, "min and max must be constant")
        if t:
            bounds[i] = float(const(g, t))
    return _single(layer, "clip", layer.inputs[:1], min=bounds[0], max=bounds[1])


def _view(g: Graph, layer: Layer) -> list[Layer]:
    """Flatten, Reshape, Squeeze, Unsqueeze, kept Identity/Dropout: reshape to the static shape."""
    if onnx_op(layer) == "Reshape" and not g.is_const(layer.inputs[1]):
        raise node_error(layer, f"shape input '{layer.inputs[1]}' must fold to a constant")
    return _single(layer, "reshape", layer.inputs[:1])


def _concat(g: Graph, layer: Layer) -> list[Layer]:
    """Concat of the non-empty inputs (zero-size ones add nothing); one input is a view."""
    rank = len(g.tensors[layer.outputs[0]].shape)
    ins = [t for t in layer.inputs if 0 not in g.tensors[t].shape]
    if len(ins) == 1:
        return _single(layer, "reshape", ins)
    return _single(layer, "concat", ins, axis=int(layer.attrs["axis"]) % rank)


def _transpose(g: Graph, layer: Layer) -> list[Layer]:
    rank = len(g.tensors[layer.inputs[0]].shape)
    perm = layer.attrs.get("perm", tuple(range(rank - 1, -1, -1)))
    return _single(layer, "transpose", layer.inputs[:1], perm=tuple(perm))


def _softmax(g: Graph, layer: Layer) -> list[Layer]:
    x, y = layer.inputs[0], layer.outputs[0]
    shape = g.tensors[x].shape
    axis = int(layer.attrs.get("axis", -1 if g.opset >= 13 else 1)) % len(shape)
    if g.opset >= 13 or math.prod(shape[axis + 1 :]) == 1:
        return _single(layer, "softmax", [x], axis=axis)
    # opset < 13 normalises over the flattened dims [axis:] (one axis when the rest are 1)
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    names = [fresh_name(g, f"{y}.flat"), fresh_name(g, f"{y}.flat_softmax")]
    for name in names:
        g.add_tensor(Tensor(name, flat, g.tensors[y].dtype))
    return [
        Layer(fresh_layer_name(g, f"{layer.name}.flatten"), "reshape", [x], [names[0]]),
        Layer(
            fresh_layer_name(g, f"{layer.name}.softmax"),
            "softmax",
            [names[0]],
            [names[1]],
            {"axis": 1},
        ),
        Layer(layer.name, "reshape", [names[1]], [y]),
    ]


def _lrn(g: Graph, layer: Layer) -> list[Layer]:
    _rank(g, layer, 4)
    a = layer.attrs
    return _single(
        layer,
        "lrn",
        layer.inputs[:1],
        size=int(a["size"]),
        alpha=float(a.get("alpha", 1e-4)),
        beta=float(a.get("beta", 0.75)),
        bias=float(a.get("bias", 1.0)),
    )


LOWERED: dict[str, Callable[[Graph, Layer], list[Layer]]] = {
    "Abs": ops.unary("abs"),
    "Attention": ops.attention,
    "Add": _plain("add"),
    "Cast": ops.cast,
    "CastLike": ops.cast,
    "Celu": ops.elu,
    "CenterCropPad": ops.center_crop_pad,
    "Compress": ops.compress,
    "ConvTranspose": ops.one_d(ops.conv_transpose),
    "CumProd": ops.cumulative,
    "CumSum": ops.cumulative,
    "DepthToSpace": ops.depth_to_space,
    "DynamicQuantizeLinear": ints.dynamic_quantize,
    "DequantizeLinear": ints.dequantize,
    "Elu": ops.elu,
    "Erf": ops.unary("erf"),
    "Exp": ops.unary("exp"),
    "Expand": ops.expand,
    "Gather": ops.gather,
    "GatherElements": ops.gather_elements,
    "Gelu": ops.gelu,
    "GroupNormalization": ops.group_norm,
    "Hardmax": ops.hardmax,
    "HardSigmoid": ops.hard_sigmoid,
    "HardSwish": ops.hard_swish,
    "InstanceNormalization": ops.instance_norm,
    "LayerNormalization": ops.layer_norm,
    "LeakyRelu": ops.leaky_relu,
    "Log": ops.unary("log"),
    "LogSoftmax": ops.log_softmax,
    "LpNormalization": ops.lp_normalization,
    "LpPool": _lp_pool,
    "ArgMax": ops.arg_extreme,
    "ArgMin": ops.arg_extreme,
    "Einsum": ops.einsum,
    "TopK": ops.top_k,
    "Mean": ops.mean,
    "MeanVarianceNormalization": ops.mean_variance_norm,
    "Mish": ops.softplus,
    "Mod": ops.mod,
    "Neg": ops.unary("neg"),
    "NegativeLogLikelihoodLoss": ops.nll_loss,
    "Pad": ops.pad,
    "Pow": ops.pow_,
    "PRelu": ops.prelu,
    "QuantizeLinear": ints.quantize,
    "Reciprocal": ops.unary("recip"),
    **{op: ops.reduce for op in ops.REDUCE},
    "Resize": ops.resize,
    "RMSNormalization": ops.rms_norm,
    "Selu": ops.elu,
    "Shrink": ops.shrink,
    "Sigmoid": ops.unary("sigmoid"),
    "Slice": ops.slice_,
    "SoftmaxCrossEntropyLoss": ops.softmax_cross_entropy,
    "Softplus": ops.softplus,
    "Softsign": ops.softsign,
    "SpaceToDepth": ops.depth_to_space,
    "Split": ops.split,
    "Sqrt": ops.unary("sqrt"),
    "Swish": ops.swish,
    "SwiGLU": ops.swish,
    "Tanh": ops.unary("tanh"),
    "ThresholdedRelu": ops.thresholded_relu,
    "Tile": ops.tile,
    "Trilu": ops.trilu,
    "Where": ops.where,
    **{op: rnn.recurrent for op in rnn.GATES},
    **{op: ops.unary(op.lower()) for op in ops.MATH_UNARY},
    **{op: ops.compare for op in ops.COMPARISONS},
    **{op: ops.logic for op in (*ops.LOGIC, "Not")},
    "AveragePool": ops.one_d(_pool),
    "Clip": _clip,
    "Concat": _concat,
    "Conv": ops.one_d(_conv),
    "Div": ints.divide,
    "Dropout": _view,
    "Flatten": _view,
    "Gemm": _gemm,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Identity": _view,
    "LRN": _lrn,
    "MatMul": _plain("matmul"),
    "Max": _chain("max"),
    "MaxPool": ops.one_d(_pool),
    "Min": _chain("min"),
    "Mul": _plain("mul"),
    "Relu": _plain("relu"),
    "Reshape": _view,
    "Softmax": _softmax,
    "Squeeze": _view,
    "Sub": _plain("sub"),
    "Sum": _chain("add"),
    "Transpose": _transpose,
    "Unsqueeze": _view,
}


BROADCASTING = (
    "add", "sub", "mul", "div", "max", "min", "pow", *COMPARE_OPS, "where", "mod", "fmod"
)  # fmt: skip
LIMITATIONS = {**ops.LIMITATIONS, **rnn.LIMITATIONS}  # per ONNX op, for docs/operators.md


def _check_f32(g: Graph, layer: Layer, source: Layer) -> None:
    """Every tensor of canonical `layer` (from ONNX layer `source`) is non-empty f32, or an
    integer or boolean held as f32 (onnx_ints).

    Only a Cast's layer may read or write the other float types (held as float32 values).
    """
    held = ("f32", *IR_INTS)
    if onnx_op(source) in ("Cast", "CastLike"):
        held = (*ops.CAST_TYPES, *IR_INTS)
    for t in layer.inputs + layer.outputs:
        if t and g.tensors[t].dtype not in held:
            raise node_error(source, f"tensor '{t}' is {g.tensors[t].dtype}; npucc needs f32")
        if t and 0 in g.tensors[t].shape:
            raise node_error(source, f"tensor '{t}' is empty; npucc needs non-empty tensors")
    if layer.op in BROADCASTING:
        shapes = [g.tensors[t].shape for t in layer.inputs]
        try:
            ok = tuple(np.broadcast_shapes(*shapes)) == g.tensors[layer.outputs[0]].shape
        except ValueError:
            ok = False
        if not ok:
            raise node_error(layer, f"inputs {shapes} do not broadcast (numpy rules) to the output")


@dataclass(frozen=True, slots=True)
class LegalizeOnnx(GraphPass):
    """Replace each `onnx.<Op>` layer by canonical layers; anything else is unsupported."""

    name = "legalize-onnx"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Lower every layer in place, keeping topological order."""
        for layer in list(ir.layers):
            op = onnx_op(layer)
            if not op:
                continue
            lower = LOWERED.get(op)
            if lower is None:
                raise unsupported(op, layer.name, ir.opset)
            ints.check_integers(ir, layer)
            index = ir.layers.index(layer)
            new = lower(ir, layer)
            ir.remove_layer(layer)
            for offset, canonical in enumerate(new):
                _check_f32(ir, canonical, layer)
                ir.add_layer(canonical, index + offset)
        _copy_outputs(ir)
        ints.hold_as_floats(ir)
        for t in ir.inputs + ir.outputs:
            # the host converts the other types from/to float32 at the boundary (ops.cast)
            ok = (*ops.CAST_TYPES, *HOST_INTS, *((INDEX_DTYPE,) if t in ir.inputs else ()))
            if ir.tensors[t].dtype not in ok:
                raise NpuccError(f"graph tensor '{t}' is {ir.tensors[t].dtype}; npucc needs f32")
        return ir


def _copy_outputs(g: Graph) -> None:
    """Give each graph output that is a constant a layer writing it (from a renamed constant)."""
    for t in dict.fromkeys(g.outputs):
        if g.is_const(t):
            tensor = g.tensors.pop(t)
            src = fresh_name(g, f"{t}.const")
            g.add_tensor(Tensor(src, tensor.shape, tensor.dtype, tensor.data))
            g.replace_uses(t, src)
            g.outputs = [t if o == src else o for o in g.outputs]
            g.add_tensor(Tensor(t, tensor.shape, tensor.dtype))
            g.add_layer(Layer(fresh_layer_name(g, f"{t}.copy"), "copy", [src], [t]))
