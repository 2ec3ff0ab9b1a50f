"""fold-batchnorm: fold inference BatchNormalization into the preceding Conv, or into mul+add."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.frontend.graph_edit import (
    add_const,
    const,
    fresh_layer_name,
    fresh_name,
    merged_src,
    node_error,
    onnx_op,
    single_user,
)
from npucc.frontend.onnx_seq import Seq
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_schema import ONNX_PREFIX
from npucc.passes import CompileContext, GraphPass
from npucc.transforms.fold_conv_affine import scaled_weights


def _scale_shift(g: Graph, layer: Layer) -> tuple[np.ndarray, np.ndarray]:
    """BN as y = x*s + t per channel (float64)."""
    params = layer.inputs[1:5]
    if len(params) != 4 or not all(g.is_const(t) for t in params):
        raise node_error(layer, "scale, bias, mean and variance must be constant")
    if len(layer.outputs) > 1:
        raise node_error(layer, "the running statistics outputs need training_mode=1")
    scale, bias, mean, var = (const(g, t).astype(np.float64) for t in params)
    s = scale / np.sqrt(var + float(layer.attrs.get("epsilon", 1e-5)))
    return s, bias - mean * s


def _fold_into_conv(g: Graph, conv: Layer, bn: Layer, s: np.ndarray, t: np.ndarray) -> None:
    """Rescale the conv's weights and bias; the conv then writes the BN's output."""
    w = conv.inputs[1]
    b = conv.inputs[2] if len(conv.inputs) > 2 else ""
    bias = (const(g, b).astype(np.float64) if b else 0.0) * s + t
    new_w = add_const(g, f"{w}.bn", scaled_weights(const(g, w), s))
    new_b = add_const(g, f"{b or w}.bn_bias", bias.astype(np.float32))
    old = conv.outputs[0]
    g.remove_layer(bn)
    conv.src = merged_src(conv, bn)
    g.set_inputs(conv, [conv.inputs[0], new_w, new_b])
    g.set_outputs(conv, [bn.outputs[0]])
    del g.tensors[old]


def _as_mul_add(g: Graph, bn: Layer, s: np.ndarray, t: np.ndarray) -> None:
    """Replace the BN by onnx Mul and Add layers with [C,1,...] constant operands."""
    x, y = bn.inputs[0], bn.outputs[0]
    rank = len(g.tensors[x].shape)
    shape = (-1, *[1] * (rank - 2))
    scale = add_const(g, f"{bn.name}.scale", s.astype(np.float32).reshape(shape))
    shift = add_const(g, f"{bn.name}.shift", t.astype(np.float32).reshape(shape))
    mid = fresh_name(g, f"{y}.scaled")
    g.add_tensor(Tensor(mid, g.tensors[y].shape, g.tensors[y].dtype))
    mul = Layer(fresh_layer_name(g, f"{bn.name}.mul"), ONNX_PREFIX + "Mul", [x, scale], [mid])
    g.replace_layer(bn, [mul, Layer(bn.name, ONNX_PREFIX + "Add", [mid, shift], [y])])


def _training(g: Graph, bn: Layer) -> None:
    """Replace a training-mode BN by canonical layers on the batch statistics.

    Mean and population variance over every axis but the channel axis (as ONNX's reference),
    y = (x - mean) / sqrt(var + eps) * scale + bias, and the running statistics
    input * momentum + batch statistic * (1 - momentum).
    """
    x, scale, bias, mean, var = bn.inputs[:5]
    for t in (*bn.inputs[:5], *bn.outputs):
        if t and g.tensors[t].dtype != "f32":
            raise node_error(bn, f"tensor '{t}' is {g.tensors[t].dtype}; npucc needs f32")
    shape = g.tensors[x].shape
    rank = len(shape)
    axes = tuple(a for a in range(rank) if a != 1)
    stat = tuple(d if a == 1 else 1 for a, d in enumerate(shape))
    eps = float(bn.attrs.get("epsilon", 1e-5))
    momentum = float(bn.attrs.get("momentum", 0.9))
    s = Seq(g, bn)
    batch_mean = s.add("reduce", [x], s.tmp(stat, "mean"), op="mean", axes=axes)
    centered = s.add("sub", [x, batch_mean], s.tmp(shape, "centered"))
    sq = s.add("pows", [centered], s.tmp(shape, "sq"), scalar=2.0)
    batch_var = s.add("reduce", [sq], s.tmp(stat, "var"), op="mean", axes=axes)
    var_eps = s.add("adds", [batch_var], s.tmp(stat, "var_eps"), scalar=eps)
    std = s.add("sqrt", [var_eps], s.tmp(stat, "std"))
    channel = stat[1:]  # [C, 1, ...]: broadcasts against [N, C, ...]
    scale_c = s.add("reshape", [scale], s.tmp(channel, "scale"))
    factor = s.add("div", [scale_c, std], s.tmp(stat, "factor"))
    outs = [*bn.outputs, "", ""][:3]
    for out, running, batch in ((outs[1], mean, batch_mean), (outs[2], var, batch_var)):
        if out:
            kept = s.add("muls", [running], s.tmp(g.tensors[out].shape, "kept"), scalar=momentum)
            flat = s.add("reshape", [batch], s.tmp(g.tensors[out].shape, "batch"))
            new = s.add("muls", [flat], s.tmp(g.tensors[out].shape, "new"), scalar=1 - momentum)
            s.add("add", [kept, new], out)
    normed = s.add("mul", [centered, factor], s.tmp(shape, "normed"))
    s.add("add", [normed, s.add("reshape", [bias], s.tmp(channel, "bias"))], outs[0])
    g.replace_layer(bn, s.done())


@dataclass(frozen=True, slots=True)
class FoldBatchnorm(GraphPass):
    """Remove every BatchNormalization: folded into a Conv when possible, else mul+add."""

    name = "fold-batchnorm"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fold each BN layer, in order."""
        folded = lowered = 0
        for bn in list(ir.layers):
            if onnx_op(bn) != "BatchNormalization":
                continue
            if bn.attrs.get("training_mode", 0):
                _training(ir, bn)
                lowered += 1
                continue
            s, t = _scale_shift(ir, bn)
            x = bn.inputs[0]
            conv = ir.producer(x)
            if (
                conv is not None
                and onnx_op(conv) == "Conv"
                and single_user(ir, x)
                and all(ir.is_const(p) for p in conv.inputs[1:] if p)
            ):
                _fold_into_conv(ir, conv, bn, s, t)
                folded += 1
            else:
                _as_mul_add(ir, bn, s, t)
                lowered += 1
        ctx.stats["fold-batchnorm.folded"] = folded
        ctx.stats["fold-batchnorm.lowered"] = lowered
        return ir
