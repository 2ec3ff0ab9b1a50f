"""Legalisations of ONNX spatial ops beyond conv and pool: Resize, ConvTranspose, and the 1-D
(rank 3) view of a 2-D conv or pool.
"""

from __future__ import annotations

import math
import typing
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from npucc.frontend.graph_edit import const, node_error
from npucc.frontend.onnx_seq import Legalize, Seq, attr, slice_seq
from npucc.ir.graph import Graph, Layer


def _resize_axes(g: Graph, layer: Layer) -> list[int]:
    """The axes Resize acts on (its `axes` attribute, else every axis), non-negative."""
    rank = len(g.tensors[layer.inputs[0]].shape)
    return [int(x) % rank for x in attr(layer, "axes", range(rank))]


def _resize_matrix(
    g: Graph, layer: Layer, axis: int, n_in: int, n_out: int
) -> tuple[np.ndarray, np.ndarray]:
    """Resize along one axis as y = w @ x + extrapolation_value * outside (reference evaluator's).

    w is the [n_out, n_in] interpolation matrix; outside is 1 where tf_crop_and_resize samples
    outside the input (w's row is zero there), else 0. A probe row of zeros below the identity
    finds those samples: it resizes to 0 everywhere but where the extrapolation value lands.
    """
    a = dict(layer.attrs)
    axes = _resize_axes(g, layer)
    if axis not in axes:
        raise node_error(layer, f"axis {axis} changes size but is not in axes {axes}")
    pos, count = axes.index(axis), len(axes)
    a.pop("axes", None)
    a.pop("keep_aspect_ratio_policy", None)
    a["extrapolation_value"] = 1.0
    probe = np.concatenate([np.eye(n_in), np.zeros((1, n_in))]).astype(np.float32)
    ins = [*layer.inputs, "", "", ""]
    roi = const(g, ins[1]).reshape(-1) if ins[1] and g.is_const(ins[1]) else None
    model_inputs = {"X": probe}
    names = ["X", "", "", "sizes"]
    if roi is not None and roi.size == 2 * count:
        names[1] = "roi"
        model_inputs["roi"] = np.array([0, roi[pos], 1, roi[count + pos]], np.float32)
    model_inputs["sizes"] = np.array([n_in + 1, n_out], np.int64)
    if ins[2] and g.is_const(ins[2]) and const(g, ins[2]).size:
        names[2], names[3] = "scales", ""
        model_inputs.pop("sizes")
        model_inputs["scales"] = np.array([1.0, const(g, ins[2]).reshape(-1)[pos]], np.float32)
    node = onnx.helper.make_node("Resize", names, ["Y"], **a)
    inputs = [
        onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, probe.shape),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in model_inputs.items() if k != "X"]
    graph = onnx.helper.make_graph(
        [node], "m", inputs, [onnx.helper.make_empty_tensor_value_info("Y")], inits
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])
    from onnx.reference import ReferenceEvaluator  # NOTE: deferred: start-up time

    try:
        # a list of the outputs: run() returns a dict only with intermediate=True
        y = typing.cast(list[Any], ReferenceEvaluator(model).run(None, {"X": probe}))[0]
    except Exception as exc:  # the evaluator raises many types
        raise node_error(layer, f"cannot build the interpolation matrix: {exc}") from None
    if y.shape != (n_in + 1, n_out):
        raise node_error(layer, "this Resize configuration is not supported")
    outside = y[n_in].astype(np.float32)
    return (y[:n_in] * (1 - outside)).T.astype(np.float32), outside


def resize(g: Graph, layer: Layer) -> list[Layer]:
    """Resize as one matmul per resized axis with a constant interpolation matrix.

    tf_crop_and_resize adds extrapolation_value where a sample falls outside the input; its
    crop may change an axis of unchanged size, so every axis it acts on is resized.
    """
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    out_shape = g.tensors[s.y].shape
    crop = str(attr(layer, "coordinate_transformation_mode", "")) == "tf_crop_and_resize"
    roi = [*layer.inputs, ""][1]
    if crop and not (roi and g.is_const(roi)):
        raise node_error(layer, "roi must be constant")
    if any(s_ < 0 for s_ in out_shape):
        raise node_error(layer, "the output shape must be static")
    cropped = _resize_axes(g, layer) if crop else []
    value = float(attr(layer, "extrapolation_value", 0.0))
    steps = []
    for a in range(len(shape)):
        if shape[a] != out_shape[a] or a in cropped:
            w, outside = _resize_matrix(g, layer, a, shape[a], out_shape[a])
            if w.shape != (shape[a], shape[a]) or (w != np.eye(shape[a])).any() or outside.any():
                steps.append((a, w, value * outside))
    if not steps:
        s.add("reshape", [x], s.y)
        return s.done()
    cur, dims = x, list(shape)
    for k, (a, w, bias) in enumerate(steps):
        before, after = math.prod(dims[:a]), math.prod(dims[a + 1 :])
        view = s.add("reshape", [cur], s.tmp((before, dims[a], after), "view"))
        dims[a] = out_shape[a]
        box = (before, dims[a], after)
        res = s.add("matmul", [s.const(w, f"resize{a}"), view], s.tmp(box, "resized"))
        if bias.any():
            shift = s.const(bias.reshape(-1, 1), f"extrapolate{a}")
            res = s.add("add", [res, shift], s.tmp(box, "extrapolated"))
        last = k == len(steps) - 1
        cur = s.add("reshape", [res], s.y if last else s.tmp(tuple(dims), "axis"))
    return s.done()


def conv_transpose(g: Graph, layer: Layer) -> list[Layer]:
    """ConvTranspose (2-D or 3-D) as a zero-inserting pad and a stride-1 conv, flipped weights."""
    x, w, *rest = layer.inputs
    xs = g.tensors[x].shape
    if len(xs) not in (4, 5):
        raise node_error(layer, f"input must have rank 4 or 5, not {len(xs)}")
    if not g.is_const(w) or (rest and rest[0] and not g.is_const(rest[0])):
        raise node_error(layer, "weights and bias must be constant")
    wt = const(g, w)
    c, cog, *kernel = wt.shape
    spatial = len(kernel)
    group = int(attr(layer, "group", 1))
    strides = tuple(attr(layer, "strides", (1,) * spatial))
    dil = tuple(attr(layer, "dilations", (1,) * spatial))
    out_pad = tuple(attr(layer, "output_padding", (0,) * spatial))
    out = g.tensors[layer.outputs[0]].shape
    begin, end = [], []
    auto = str(attr(layer, "auto_pad", "NOTSET"))
    for i, k in enumerate(kernel):
        full = strides[i] * (xs[2 + i] - 1) + out_pad[i] + (k - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER") or "output_shape" in layer.attrs:
            total = full - out[2 + i]
            half = total // 2  # a negative total (a larger output) extends the end
            b, e = (half, total - half) if auto == "SAME_UPPER" else (total - half, half)
        elif auto == "VALID":
            b, e = 0, 0
        else:
            pads = attr(layer, "pads", (0,) * 2 * spatial)
            b, e = pads[i], pads[i + spatial]
        begin.append((k - 1) * dil[i] - b)
        end.append((k - 1) * dil[i] - e + out_pad[i])
    if min(begin + end) < 0:
        raise node_error(layer, "pads larger than the dilated kernel are not supported")
    cg = c // group
    flipped = np.flip(wt, axis=tuple(range(2, 2 + spatial))).reshape(group, cg, cog, *kernel)
    weights = np.ascontiguousarray(flipped.swapaxes(1, 2).reshape(group * cog, cg, *kernel))
    s = Seq(g, layer)
    dims = list(xs)
    for i in range(spatial):
        dims[2 + i] = (xs[2 + i] - 1) * strides[i] + 1 + begin[i] + end[i]
    padded = s.add(
        "pad",
        [x],
        s.tmp(tuple(dims), "dilated"),
        pads=(0, 0, *begin, 0, 0, *end),
        value=0.0,
        strides=(1, 1, *strides),
    )
    bias = rest[0] if rest and rest[0] else ""
    if spatial == 3:
        _conv_3d(s, padded, weights, bias, dil, group)
        return s.done()
    ins = [padded, s.const(weights, "weight"), *([bias] if bias else [])]
    s.add("conv2d", ins, s.y, strides=(1, 1), pads=(0, 0, 0, 0), dilations=dil, group=group)
    return s.done()


def _conv_3d(
    s: Seq, x: str, weights: np.ndarray, bias: str, dil: tuple[int, ...], group: int
) -> None:
    """s.y = a stride-1, unpadded 3-D conv of x, as one 2-D conv.

    The kd depth-shifted slices of x [n, c, d, h, w] become the channels (ordered group, tap,
    channel, so that groups stay contiguous) of an [n*od, ...] batch of planes; the weights
    [co, c/group, kd, kh, kw] become [co, kd*c/group, kh, kw] to match.
    """
    n, c, d, h, w = s.g.tensors[x].shape
    co, cg, kd, kh, kw = weights.shape
    od, oh, ow = s.g.tensors[s.y].shape[2:]
    taps = [
        slice_seq(
            s,
            x,
            [range(n), range(c), range(j * dil[0], j * dil[0] + od), range(h), range(w)],
            s.tmp((n, c, od, h, w), f"depth{j}"),
        )
        for j in range(kd)
    ]
    stacked = (
        s.add("concat", taps, s.tmp((n, kd * c, od, h, w), "taps"), axis=1) if kd > 1 else taps[0]
    )
    view = s.add("reshape", [stacked], s.tmp((n, kd, group, cg, od, h, w), "taps_view"))
    moved = s.add(
        "transpose",
        [view],
        s.tmp((n, od, group, kd, cg, h, w), "planes_view"),
        perm=(0, 4, 2, 1, 3, 5, 6),
    )
    planes = s.add("reshape", [moved], s.tmp((n * od, group * kd * cg, h, w), "planes"))
    w2 = weights.reshape(group, co // group, cg, kd, kh, kw).transpose(0, 1, 3, 2, 4, 5)
    ins = [planes, s.const(w2.reshape(co, kd * cg, kh, kw), "weight2d"), *([bias] if bias else [])]
    conv = s.add(
        "conv2d",
        ins,
        s.tmp((n * od, co, oh, ow), "conv2d"),
        strides=(1, 1),
        pads=(0, 0, 0, 0),
        dilations=dil[1:],
        group=group,
    )
    batched = s.add("reshape", [conv], s.tmp((n, od, co, oh, ow), "depth_major"))
    s.add("transpose", [batched], s.y, perm=(0, 2, 1, 3, 4))


_SPATIAL_ATTRS = ("kernel_shape", "strides", "dilations", "output_padding", "output_shape")


def one_d(lower: Legalize) -> Legalize:
    """Run a 2-D conv/pool legalisation on a 1-D (rank 3) input through a height-1 view."""

    def wrapped(g: Graph, layer: Layer) -> list[Layer]:
        x, *rest = layer.inputs
        shape = g.tensors[x].shape
        if len(shape) != 3:
            return lower(g, layer)
        s = Seq(g, layer)
        ins = [s.add("reshape", [x], s.tmp((shape[0], shape[1], 1, shape[2]), "2d"))]
        for t in rest:
            if t and g.is_const(t) and len(g.tensors[t].shape) == 3:
                ins.append(s.const(const(g, t)[:, :, None, :], "w2d"))
            else:
                ins.append(t)
        attrs = {k: (1, *v) if k in _SPATIAL_ATTRS else v for k, v in layer.attrs.items()}
        if "pads" in attrs:
            attrs["pads"] = (0, attrs["pads"][0], 0, attrs["pads"][1])
        y = g.tensors[s.y].shape
        out = s.tmp((y[0], y[1], 1, y[2]), "2d_out")
        s.layers += lower(g, Layer(f"{layer.name}.2d", layer.op, ins, [out], attrs))
        s.add("reshape", [out], s.y)
        return s.done()

    return wrapped
