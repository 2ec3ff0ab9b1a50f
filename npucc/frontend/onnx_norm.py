"""Legalisations of ONNX normalisations: LayerNormalization, InstanceNormalization,
GroupNormalization, MeanVarianceNormalization and RMSNormalization.
"""

from __future__ import annotations

import math

from npucc.frontend.graph_edit import node_error
from npucc.frontend.onnx_seq import Seq, attr, scalar_unary
from npucc.ir.graph import Graph, Layer


def layer_norm(g: Graph, layer: Layer) -> list[Layer]:
    """LayerNormalization over the trailing dims from `axis`; Mean and InvStdDev if read."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    axis = int(attr(layer, "axis", -1)) % rank
    eps = float(attr(layer, "epsilon", 1e-5))
    s = Seq(g, layer)
    ins = [*layer.inputs, ""][:3]
    if len(layer.outputs) > 1:
        axes = tuple(range(axis, rank))
        stat = (*shape[:axis], *(1,) * (rank - axis))
        mean = s.add("reduce", [x], layer.outputs[1] or s.tmp(stat, "mean"), op="mean", axes=axes)
    if len(layer.outputs) > 2:
        d = s.add("sub", [x, mean], s.tmp(shape, "centered"))
        sq = scalar_unary(s, "pows", d, 2.0, s.tmp(shape, "sq"))
        var = s.add("reduce", [sq], s.tmp(stat, "var"), op="mean", axes=axes)
        std = s.add(
            "sqrt", [scalar_unary(s, "adds", var, eps, s.tmp(stat, "var_eps"))], s.tmp(stat, "std")
        )
        s.add("recip", [std], layer.outputs[2])
    s.add("layernorm", ins, s.y, axis=axis, epsilon=eps)
    return s.done()


def instance_norm(g: Graph, layer: Layer) -> list[Layer]:
    """InstanceNormalization: a layernorm over the spatial dims, then per-channel scale/bias."""
    x, scale, bias = layer.inputs
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    flat = (shape[0], shape[1], math.prod(shape[2:]))
    xf = s.add("reshape", [x], s.tmp(flat, "flat"))
    eps = float(attr(layer, "epsilon", 1e-5))
    norm = s.add("layernorm", [xf, "", ""], s.tmp(flat, "norm"), axis=2, epsilon=eps)
    col = (shape[1], 1)
    sc = s.add("reshape", [scale], s.tmp(col, "scale"))
    bi = s.add("reshape", [bias], s.tmp(col, "bias"))
    scaled = s.add("mul", [norm, sc], s.tmp(flat, "scaled"))
    shifted = s.add("add", [scaled, bi], s.tmp(flat, "shifted"))
    s.add("reshape", [shifted], s.y)
    return s.done()


def group_norm(g: Graph, layer: Layer) -> list[Layer]:
    """GroupNormalization (opset 21): a layernorm per group, then scale and bias per channel."""
    x, scale, bias = layer.inputs[:3]
    shape = g.tensors[x].shape
    n, c = shape[:2]
    groups = int(attr(layer, "num_groups", 1))
    if groups <= 0 or c % groups:
        raise node_error(layer, f"{c} channels do not split into {groups} groups")
    size = math.prod(shape[2:])
    s = Seq(g, layer)
    flat = (n, groups, c // groups * size)
    xf = s.add("reshape", [x], s.tmp(flat, "flat"))
    eps = float(attr(layer, "epsilon", 1e-5))
    norm = s.add("layernorm", [xf, "", ""], s.tmp(flat, "norm"), axis=2, epsilon=eps)
    view = (n, groups, c // groups, size)
    grouped = s.add("reshape", [norm], s.tmp(view, "grouped"))
    param = (groups, c // groups, 1)
    sc = s.add("reshape", [scale], s.tmp(param, "scale"))
    bi = s.add("reshape", [bias], s.tmp(param, "bias"))
    scaled = s.add("mul", [grouped, sc], s.tmp(view, "scaled"))
    s.add("reshape", [s.add("add", [scaled, bi], s.tmp(view, "shifted"))], s.y)
    return s.done()


def mean_variance_norm(g: Graph, layer: Layer) -> list[Layer]:
    """MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default 0, 2, 3)."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axes = tuple(sorted({int(a) % len(shape) for a in attr(layer, "axes", (0, 2, 3))}))
    stat = tuple(1 if k in axes else d for k, d in enumerate(shape))
    s = Seq(g, layer)
    mean = s.add("reduce", [x], s.tmp(stat, "mean"), op="mean", axes=axes)
    centered = s.add("sub", [x, mean], s.tmp(shape, "centered"))
    sq = scalar_unary(s, "pows", centered, 2.0, s.tmp(shape, "sq"))
    var = s.add("reduce", [sq], s.tmp(stat, "var"), op="mean", axes=axes)
    std = scalar_unary(
        s, "adds", s.add("sqrt", [var], s.tmp(stat, "std")), 1e-9, s.tmp(stat, "den")
    )
    s.add("div", [centered, std], s.y)
    return s.done()


def rms_norm(g: Graph, layer: Layer) -> list[Layer]:
    """RMSNormalization: x / sqrt(mean(x ** 2 over the dims from axis) + eps) * scale."""
    x, scale = layer.inputs[:2]
    shape = g.tensors[x].shape
    rank = len(shape)
    axis = int(attr(layer, "axis", -1)) % rank
    stat = (*shape[:axis], *(1,) * (rank - axis))
    s = Seq(g, layer)
    sq = scalar_unary(s, "pows", x, 2.0, s.tmp(shape, "sq"))
    ms = s.add("reduce", [sq], s.tmp(stat, "ms"), op="mean", axes=tuple(range(axis, rank)))
    ms = scalar_unary(s, "adds", ms, float(attr(layer, "epsilon", 1e-5)), s.tmp(stat, "eps"))
    inv = s.add("recip", [s.add("sqrt", [ms], s.tmp(stat, "rms"))], s.tmp(stat, "inv"))
    s.add("mul", [s.add("mul", [x, inv], s.tmp(shape, "normed")), scale], s.y)
    return s.done()
