"""legalize-onnx: map the remaining `onnx.<Op>` layers onto the canonical op set."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npucc.errors import NpuccError
from npucc.frontend import (
    onnx_attention,
    onnx_conv_pool,
    onnx_einsum,
    onnx_gather,
    onnx_math,
    onnx_movement,
    onnx_norm,
    onnx_reduce,
    onnx_spatial,
)
from npucc.frontend import onnx_ints as ints
from npucc.frontend import onnx_rnn as rnn
from npucc.frontend.graph_edit import (
    const,
    fresh_layer_name,
    fresh_name,
    node_error,
    onnx_op,
    unsupported,
)
from npucc.frontend.host_fallback import host_of
from npucc.frontend.onnx_seq import single
from npucc.ir.dtypes import HOST_INTS, INDEX_DTYPE, IR_INTS
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.isa import COMPARE_OPS
from npucc.passes import CompileContext, GraphPass


def _gemm(g: Graph, layer: Layer) -> list[Layer]:
    a = layer.attrs
    return single(
        layer,
        "gemm",
        [t for t in layer.inputs if t],
        trans_a=int(a.get("transA", 0)),
        trans_b=int(a.get("transB", 0)),
        alpha=float(a.get("alpha", 1.0)),
        beta=float(a.get("beta", 1.0)),
    )


def _plain(op: str) -> Callable[[Graph, Layer], list[Layer]]:
    return lambda g, layer: single(layer, op, list(layer.inputs))


def _chain(op: str) -> Callable[[Graph, Layer], list[Layer]]:
    """Variadic Sum/Max/Min as a chain of binary layers."""

    def lower(g: Graph, layer: Layer) -> list[Layer]:
        ins = list(layer.inputs)
        if len(ins) == 1:
            return single(layer, "reshape", ins)
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
    return single(layer, "clip", layer.inputs[:1], min=bounds[0], max=bounds[1])


def _view(g: Graph, layer: Layer) -> list[Layer]:
    """Flatten, Reshape, Squeeze, Unsqueeze, kept Identity/Dropout: reshape to the static shape."""
    if onnx_op(layer) == "Reshape" and not g.is_const(layer.inputs[1]):
        raise node_error(layer, f"shape input '{layer.inputs[1]}' must fold to a constant")
    return single(layer, "reshape", layer.inputs[:1])


def _concat(g: Graph, layer: Layer) -> list[Layer]:
    """Concat of the non-empty inputs (zero-size ones add nothing); one input is a view."""
    rank = len(g.tensors[layer.outputs[0]].shape)
    ins = [t for t in layer.inputs if 0 not in g.tensors[t].shape]
    if len(ins) == 1:
        return single(layer, "reshape", ins)
    return single(layer, "concat", ins, axis=int(layer.attrs["axis"]) % rank)


def _transpose(g: Graph, layer: Layer) -> list[Layer]:
    rank = len(g.tensors[layer.inputs[0]].shape)
    perm = layer.attrs.get("perm", tuple(range(rank - 1, -1, -1)))
    return single(layer, "transpose", layer.inputs[:1], perm=tuple(perm))


def _softmax(g: Graph, layer: Layer) -> list[Layer]:
    x, y = layer.inputs[0], layer.outputs[0]
    shape = g.tensors[x].shape
    axis = int(layer.attrs.get("axis", -1 if g.opset >= 13 else 1)) % len(shape)
    if g.opset >= 13 or math.prod(shape[axis + 1 :]) == 1:
        return single(layer, "softmax", [x], axis=axis)
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


LOWERED: dict[str, Callable[[Graph, Layer], list[Layer]]] = {
    "Abs": onnx_math.unary("abs"),
    "Attention": onnx_attention.attention,
    "Add": _plain("add"),
    "Cast": onnx_math.cast,
    "CastLike": onnx_math.cast,
    "Celu": onnx_math.elu,
    "CenterCropPad": onnx_movement.center_crop_pad,
    "Compress": onnx_gather.compress,
    "ConvTranspose": onnx_spatial.one_d(onnx_spatial.conv_transpose),
    "CumProd": onnx_reduce.cumulative,
    "CumSum": onnx_reduce.cumulative,
    "DepthToSpace": onnx_movement.depth_to_space,
    "DynamicQuantizeLinear": ints.dynamic_quantize,
    "DequantizeLinear": ints.dequantize,
    "Elu": onnx_math.elu,
    "Erf": onnx_math.unary("erf"),
    "Exp": onnx_math.unary("exp"),
    "Expand": onnx_movement.expand,
    "Gather": onnx_gather.gather,
    "GatherElements": onnx_gather.gather_elements,
    "Gelu": onnx_math.gelu,
    "GroupNormalization": onnx_norm.group_norm,
    "Hardmax": onnx_reduce.hardmax,
    "HardSigmoid": onnx_math.hard_sigmoid,
    "HardSwish": onnx_math.hard_swish,
    "InstanceNormalization": onnx_norm.instance_norm,
    "LayerNormalization": onnx_norm.layer_norm,
    "LeakyRelu": onnx_math.leaky_relu,
    "Log": onnx_math.unary("log"),
    "LogSoftmax": onnx_math.log_softmax,
    "LpNormalization": onnx_reduce.lp_normalization,
    "LpPool": onnx_conv_pool.lp_pool,
    "ArgMax": onnx_reduce.arg_extreme,
    "ArgMin": onnx_reduce.arg_extreme,
    "Einsum": onnx_einsum.einsum,
    "TopK": onnx_reduce.top_k,
    "Mean": onnx_math.mean,
    "MeanVarianceNormalization": onnx_norm.mean_variance_norm,
    "Mish": onnx_math.softplus,
    "Mod": onnx_math.mod,
    "Neg": onnx_math.unary("neg"),
    "NegativeLogLikelihoodLoss": onnx_gather.nll_loss,
    "Pad": onnx_movement.pad,
    "Pow": onnx_math.pow_,
    "PRelu": onnx_math.prelu,
    "QuantizeLinear": ints.quantize,
    "Reciprocal": onnx_math.unary("recip"),
    **{op: onnx_reduce.reduce for op in onnx_reduce.REDUCE},
    "Resize": onnx_spatial.resize,
    "RMSNormalization": onnx_norm.rms_norm,
    "Selu": onnx_math.elu,
    "Shrink": onnx_math.shrink,
    "Sigmoid": onnx_math.unary("sigmoid"),
    "Slice": onnx_movement.slice_,
    "SoftmaxCrossEntropyLoss": onnx_gather.softmax_cross_entropy,
    "Softplus": onnx_math.softplus,
    "Softsign": onnx_math.softsign,
    "SpaceToDepth": onnx_movement.depth_to_space,
    "Split": onnx_movement.split,
    "Sqrt": onnx_math.unary("sqrt"),
    "Swish": onnx_math.swish,
    "SwiGLU": onnx_math.swish,
    "Tanh": onnx_math.unary("tanh"),
    "ThresholdedRelu": onnx_math.thresholded_relu,
    "Tile": onnx_movement.tile,
    "Trilu": onnx_movement.trilu,
    "Where": onnx_math.where,
    **{op: rnn.recurrent for op in rnn.GATES},
    **{op: onnx_math.unary(op.lower()) for op in onnx_math.MATH_UNARY},
    **{op: onnx_math.compare for op in onnx_math.COMPARISONS},
    **{op: onnx_math.logic for op in (*onnx_math.LOGIC, "Not")},
    "AveragePool": onnx_spatial.one_d(onnx_conv_pool.pool),
    "Clip": _clip,
    "Concat": _concat,
    "Conv": onnx_spatial.one_d(onnx_conv_pool.conv),
    "Div": ints.divide,
    "Dropout": _view,
    "Flatten": _view,
    "Gemm": _gemm,
    "GlobalAveragePool": onnx_conv_pool.global_pool,
    "GlobalMaxPool": onnx_conv_pool.global_pool,
    "Identity": _view,
    "LRN": onnx_conv_pool.lrn,
    "MatMul": _plain("matmul"),
    "Max": _chain("max"),
    "MaxPool": onnx_spatial.one_d(onnx_conv_pool.pool),
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


# per ONNX op, for docs/operators.md
LIMITATIONS = {
    "Attention": "no softcap, sliding window, nonpad_kv_seqlen or qk_matmul_output; masks "
    "constant (or float, full length, not causal); no fully masked rows",
    "Trilu": "k must be constant",
    "Einsum": "no repeated subscript within an operand (diagonals); no size-1 broadcasting",
    "CenterCropPad": "the shape must be constant",
    "Tile": "repeats must be constant",
    "Split": "split sizes must be constant",
    "ReduceSum": "axes must be constant",
    "ReduceMean": "axes must be constant",
    "ReduceMax": "axes must be constant",
    "ReduceMin": "axes must be constant",
    "Gather": "run-time indices: an index outside [-size, size) is a run-time error",
    "Slice": "starts, ends, axes and steps must be constant",
    "Where": "a selected -0.0 becomes +0.0",
    "Expand": "the shape must be constant",
    "Pad": "pads, value and axes must be constant",
    "Resize": "sizes/scales (and tf_crop_and_resize's roi) constant",
    "ConvTranspose": "1-D, 2-D and 3-D; pads at most the dilated kernel extent",
    "Conv": "1-D and 2-D; constant weights",
    "Cast": "float, double, float16, bfloat16, bool and integers up to 2^24 (no uint32/uint64); "
    "a double graph input is rounded to float32 and may only be cast to a narrower float type",
    "CastLike": "as Cast",
    "BatchNormalization": "training mode only with training_mode=1 (opset 14+)",
    "Dropout": "training mode only with ratio 0; no mask output",
    "LogSoftmax": "opset < 13: one axis only",
    "Softplus": "overflows to inf for x > 88",
    "MaxPool": "1-D, 2-D and 3-D; ceil_mode follows onnxruntime; no Indices output",
    "AveragePool": "1-D, 2-D and 3-D; ceil_mode follows onnxruntime",
    "LpPool": "1-D, 2-D and 3-D; no ceil_mode",
    "LpNormalization": "p 1 or 2",
    "CumSum": "axis must be constant",
    "CumProd": "axis must be constant",
    "GatherElements": "run-time indices: at most 2^22 gathered row elements",
    "Compress": "the condition must be constant",
    "NegativeLogLikelihoodLoss": "target and weight must be constant",
    "SoftmaxCrossEntropyLoss": "labels and weights must be constant",
    "QuantizeLinear": "float32 to uint8, int8, uint16 and int16; a blocked scale constant; a NaN "
    "gives NaN (onnxruntime: the type's minimum); not at fp16",
    "DequantizeLinear": "8-, 16- and 32-bit integers to float32; a blocked scale constant",
    "DynamicQuantizeLinear": "as onnxruntime: scale 1 (not 1/255) for an all-zero input; not at "
    "fp16",
    **rnn.LIMITATIONS,
}


def _check_f32(g: Graph, layer: Layer, source: Layer) -> None:
    """Every tensor of canonical `layer` (from ONNX layer `source`) is non-empty f32, or an
    integer or boolean held as f32 (onnx_ints).

    Only a Cast's layer may read or write the other float types (held as float32 values).
    """
    held = ("f32", *IR_INTS)
    if onnx_op(source) in ("Cast", "CastLike"):
        held = (*onnx_math.CAST_TYPES, *IR_INTS)
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


# NOTE: ops refused at fp16 (docs/precision.md): their integer results round a quotient x / scale
# that an fp16 program stores (and a scale it computes) in fp16, one step off near every tie
FP32_ONLY = {
    "QuantizeLinear": "QuantizeLinear at fp16: x / scale is rounded to fp16 before rounding to "
    "an integer (one step off near ties); compile at fp32, or the quantized model at int8",
    "DynamicQuantizeLinear": "DynamicQuantizeLinear at fp16: its scale and x / scale are rounded "
    "to fp16 before rounding to integers (one step off near ties); compile at fp32",
}


@dataclass(frozen=True, slots=True)
class LegalizeOnnx(GraphPass):
    """Replace each `onnx.<Op>` layer by canonical layers; anything else is unsupported."""

    name = "legalize-onnx"
    fallback: str = "error"  # "host": a layer npucc cannot lower becomes a host layer

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Lower every layer in place, keeping topological order."""
        for layer in list(ir.layers):
            op = onnx_op(layer)
            if not op:
                continue
            try:
                if ctx.target.dtype == "f16" and op in FP32_ONLY:
                    raise node_error(layer, FP32_ONLY[op])
                new = _legalize(ir, layer, op)
            except NpuccError:
                if self.fallback != "host":
                    raise
                new = [host_of(ir, layer)]
            ir.replace_layer(layer, new)
        _copy_outputs(ir)
        if ctx.target.dtype != "i8":  # int8 programs store integers as int8 (onnx_qdq)
            ints.hold_as_floats(ir, ctx.target.dtype)
        for t in ir.inputs + ir.outputs:
            # the host converts the other types from/to float32 at the boundary (onnx_math.cast)
            ok = (*onnx_math.CAST_TYPES, *HOST_INTS, *((INDEX_DTYPE,) if t in ir.inputs else ()))
            if ir.tensors[t].dtype not in ok:
                raise NpuccError(f"graph tensor '{t}' is {ir.tensors[t].dtype}; npucc needs f32")
        return ir


def _legalize(g: Graph, layer: Layer, op: str) -> list[Layer]:
    """The canonical layers of ONNX layer `layer` (NpuccError: npucc cannot lower it)."""
    lower = LOWERED.get(op)
    if lower is None:
        raise unsupported(op, layer.name, g.opset)
    ints.check_integers(g, layer)
    new = lower(g, layer)
    for canonical in new:
        _check_f32(g, canonical, layer)
    return new


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
