"""Legalisations of ONNX data movement: Slice, Split, Expand, Tile, Pad, DepthToSpace/SpaceToDepth,
Trilu and CenterCropPad.

Index and shape operands (Slice starts, Pad pads, ...) must be constant after fold-constants:
npucc moves float32 data only, at addresses known at compile time.
"""

from __future__ import annotations

import typing

import numpy as np

from npucc.frontend.graph_edit import node_error
from npucc.frontend.onnx_seq import Seq, attr, broadcast, need_const, slice_seq
from npucc.ir.graph import Graph, Layer


def slice_(g: Graph, layer: Layer) -> list[Layer]:
    """Slice with constant starts/ends/axes/steps (attributes before opset 10)."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    if "starts" in layer.attrs:
        starts, ends = list(layer.attrs["starts"]), list(layer.attrs["ends"])
        axes = list(attr(layer, "axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        ins = [*layer.inputs, "", "", ""]
        vals = [
            [int(v) for v in need_const(g, layer, t, "starts/ends/axes/steps").reshape(-1)]
            if t
            else None
            for t in ins[1:5]
        ]
        # starts and ends are required inputs of Slice from opset 10
        starts, ends = typing.cast(list[int], vals[0]), typing.cast(list[int], vals[1])
        axes = vals[2] if vals[2] is not None else list(range(len(starts)))
        steps = vals[3] if vals[3] is not None else [1] * len(starts)
    ranges = [range(d) for d in shape]
    for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
        if st == 0:
            raise node_error(layer, "a step of 0")
        a %= len(shape)
        ranges[a] = range(*slice(b, e, st).indices(shape[a]))
    s = Seq(g, layer)
    slice_seq(s, x, ranges, s.y)
    return s.done()


def split(g: Graph, layer: Layer) -> list[Layer]:
    """Split into slices along an axis (sizes from the input, the attribute, or equal parts).

    A zero-size part is an empty constant (fold-constants) and needs no slice.
    """
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", 0)) % len(shape)
    s = Seq(g, layer)
    start = 0
    for out in layer.outputs:
        n = g.tensors[out].shape[axis]
        if n == 0:
            continue
        ranges = [range(d) for d in shape]
        ranges[axis] = range(start, start + n)
        slice_seq(s, x, ranges, out)
        start += n
    return s.done()


def expand(g: Graph, layer: Layer) -> list[Layer]:
    """Expand to a constant shape: a broadcasting copy."""
    need_const(g, layer, layer.inputs[1], "shape")
    s = Seq(g, layer)
    broadcast(s, layer.inputs[0], s.y)
    return s.done()


def tile(g: Graph, layer: Layer) -> list[Layer]:
    """Tile with constant repeats: reshape to (1, d0, 1, d1, ...), expand, reshape."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    reps = [int(r) for r in need_const(g, layer, layer.inputs[1], "repeats").reshape(-1)]
    s = Seq(g, layer)
    spread = s.add("reshape", [x], s.tmp(tuple(v for d in shape for v in (1, d)), "spread"))
    big = s.add(
        "expand",
        [spread],
        s.tmp(tuple(v for r, d in zip(reps, shape, strict=True) for v in (r, d)), "tiled"),
    )
    s.add("reshape", [big], s.y)
    return s.done()


def pad(g: Graph, layer: Layer) -> list[Layer]:
    """Pad: constant mode as the canonical pad, edge/reflect/wrap as takes along each axis."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    mode = str(attr(layer, "mode", "constant"))
    ins = [*layer.inputs, "", "", ""]
    if "pads" in layer.attrs:
        pads = [int(p) for p in layer.attrs["pads"]]
        value = float(attr(layer, "value", 0.0))
    else:
        pads = [int(p) for p in need_const(g, layer, ins[1], "pads").reshape(-1)]
        value = float(need_const(g, layer, ins[2], "value").reshape(-1)[0]) if ins[2] else 0.0
    axes = list(range(rank))
    if ins[3]:
        axes = [int(a) % rank for a in need_const(g, layer, ins[3], "axes").reshape(-1)]
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    s = Seq(g, layer)
    # negative pads crop first
    ranges = [range(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(shape, begin, end, strict=True)]
    cropped = tuple(len(r) for r in ranges)
    begin, end = [max(b, 0) for b in begin], [max(e, 0) for e in end]
    cur = x
    if cropped != shape:
        cur = slice_seq(s, x, ranges, s.tmp(cropped, "crop") if any(begin + end) else s.y)
    if not any(begin + end):
        if cur == x:
            s.add("reshape", [x], s.y)
        return s.done()
    if mode == "constant":
        s.add("pad", [cur], s.y, pads=tuple(begin + end), value=value, strides=(1,) * rank)
        return s.done()
    if mode not in ("edge", "reflect", "wrap"):
        raise node_error(layer, f"unknown mode {mode!r}")
    padded_axes = [a for a in range(rank) if begin[a] or end[a]]
    dims = list(cropped)
    for k, a in enumerate(padded_axes):
        n = dims[a]
        idx = [_pad_index(i - begin[a], n, mode) for i in range(n + begin[a] + end[a])]
        if mode == "reflect" and n == 1:
            idx = [0] * len(idx)
        dims[a] = len(idx)
        last = k == len(padded_axes) - 1
        out = s.y if last else s.tmp(tuple(dims), "pad")
        cur = s.add("take", [cur], out, axis=a, indices=tuple(idx))
    return s.done()


def _pad_index(i: int, n: int, mode: str) -> int:
    if mode == "edge":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1)
    i = abs(i) % period if period else 0
    return period - i if i >= n else i


def depth_to_space(g: Graph, layer: Layer) -> list[Layer]:
    """DepthToSpace / SpaceToDepth as reshape, transpose, reshape."""
    n, c, h, w = g.tensors[layer.inputs[0]].shape
    b = int(layer.attrs["blocksize"])
    s = Seq(g, layer)
    crd = str(attr(layer, "mode", "DCR")) == "CRD"
    if layer.op == "onnx.SpaceToDepth":
        split_shape = (n, c, h // b, b, w // b, b)
        perm = (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4)
    elif not crd:
        split_shape, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split_shape, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    r = s.add("reshape", layer.inputs[:1], s.tmp(split_shape, "split"))
    t = s.add("transpose", [r], s.tmp(tuple(split_shape[p] for p in perm), "perm"), perm=perm)
    s.add("reshape", [t], s.y)
    return s.done()


def trilu(g: Graph, layer: Layer) -> list[Layer]:
    """Trilu with a constant k: a product with the constant 0/1 triangle."""
    x = layer.inputs[0]
    k = 0
    if len(layer.inputs) > 1 and layer.inputs[1]:
        k = int(need_const(g, layer, layer.inputs[1], "k").reshape(-1)[0])
    rows, cols = g.tensors[x].shape[-2:]
    tri = np.triu if int(attr(layer, "upper", 1)) else np.tril
    s = Seq(g, layer)
    s.add("mul", [x, s.const(tri(np.ones((rows, cols), np.float32), k), "triangle")], s.y)
    return s.done()


def center_crop_pad(g: Graph, layer: Layer) -> list[Layer]:
    """CenterCropPad with a constant shape: a centred slice, then a centred zero pad."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    rank = len(shape)
    want = [int(v) for v in need_const(g, layer, layer.inputs[1], "shape").reshape(-1)]
    axes = [int(a) % rank for a in attr(layer, "axes", range(rank))]
    target = list(shape)
    for a, n in zip(axes, want, strict=True):
        target[a] = n
    ranges = []
    for d, n in zip(shape, target, strict=True):
        start = (d - n) // 2 if d > n else 0
        ranges.append(range(start, start + min(d, n)))
    s = Seq(g, layer)
    cropped = tuple(len(r) for r in ranges)
    grow = [(n - c) for n, c in zip(target, cropped, strict=True)]
    if not any(grow):
        slice_seq(s, x, ranges, s.y)
        return s.done()
    cur = slice_seq(s, x, ranges, s.tmp(cropped, "crop")) if cropped != shape else x
    pads = tuple(gr // 2 for gr in grow) + tuple(gr - gr // 2 for gr in grow)
    s.add("pad", [cur], s.y, pads=pads, value=0.0, strides=(1,) * rank)
    return s.done()
