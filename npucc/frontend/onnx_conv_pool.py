"""Legalisations of ONNX Conv, MaxPool, AveragePool, LpPool, the global pools and LRN."""

from __future__ import annotations

import math
from typing import NamedTuple

from npucc.frontend.graph_edit import fresh_layer_name, node_error, onnx_op
from npucc.frontend.onnx_seq import Seq, single
from npucc.frontend.onnx_spatial import one_d
from npucc.ir.graph import Graph, Layer

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


def conv(g: Graph, layer: Layer) -> list[Layer]:
    _rank(g, layer, 4)
    x, w, *rest = layer.inputs
    b = rest[0] if rest else ""
    if not g.is_const(w) or (b and not g.is_const(b)):
        raise node_error(layer, "weights and bias must be constant")
    kernel = g.tensors[w].shape[2:]
    a = layer.attrs
    group = int(a.get("group", 1))
    return single(
        layer,
        "conv2d",
        [x, w, b] if b else [x, w],
        strides=tuple(a.get("strides", (1, 1))),
        pads=_pads(layer, g.tensors[x].shape[2:], kernel),
        dilations=tuple(a.get("dilations", (1, 1))),
        group=group,
    )


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


def pool(g: Graph, layer: Layer) -> list[Layer]:
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
        return single(layer, op, [x], **_pool_attrs(op, axes[0], axes[1], include))
    n, c, d, h, w = shape
    od, oh, ow = out
    s = Seq(g, layer)
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


def lp_pool(g: Graph, layer: Layer) -> list[Layer]:
    """LpPool: (the window's sum of |x|^p)^(1/p), the sum an AveragePool counting pads times K."""
    if int(layer.attrs.get("ceil_mode", 0)):
        raise node_error(layer, "ceil_mode is not supported")
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    p = float(layer.attrs.get("p", 2))
    s = Seq(g, layer)
    magnitude = x if p == 2.0 else s.add("abs", [x], s.tmp(shape, "abs"))
    powered = s.add("pows", [magnitude], s.tmp(shape, "pow"), scalar=p)
    attrs = {k: v for k, v in layer.attrs.items() if k != "p"}
    attrs["count_include_pad"] = 1
    mean = s.tmp(g.tensors[s.y].shape, "mean")
    avg = Layer(
        fresh_layer_name(g, f"{layer.name}.avg"), "onnx.AveragePool", [powered], [mean], attrs
    )
    s.layers += one_d(pool)(g, avg)
    total = s.add("muls", [mean], scalar=float(math.prod(layer.attrs["kernel_shape"])))
    if p == 2.0:
        s.add("sqrt", [total], s.y)
    else:
        s.add("pows", [total], s.y, scalar=1.0 / p)
    return s.done()


def global_pool(g: Graph, layer: Layer) -> list[Layer]:
    """GlobalAveragePool/GlobalMaxPool over every spatial axis (rank 3 and up)."""
    shape = g.tensors[layer.inputs[0]].shape
    if len(shape) < 3:
        raise node_error(layer, f"input must have rank 3 or more, not {len(shape)}")
    op = "globalavgpool" if onnx_op(layer) == "GlobalAveragePool" else "globalmaxpool"
    return single(layer, op, layer.inputs[:1])


def lrn(g: Graph, layer: Layer) -> list[Layer]:
    _rank(g, layer, 4)
    a = layer.attrs
    return single(
        layer,
        "lrn",
        layer.inputs[:1],
        size=int(a["size"]),
        alpha=float(a.get("alpha", 1e-4)),
        beta=float(a.get("beta", 0.75)),
        bias=float(a.get("bias", 1.0)),
    )
