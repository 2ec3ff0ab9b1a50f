"""Legalisations of ONNX selection by index: Gather, GatherElements, Compress and the losses that
select by label (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).
"""

from __future__ import annotations

import math

import numpy as np

from npucc.frontend.graph_edit import const, node_error
from npucc.frontend.onnx_seq import Seq, attr, need_const, slice_seq
from npucc.ir.graph import Graph, Layer, runs


def gather(g: Graph, layer: Layer) -> list[Layer]:
    """Gather with constant indices: a take along the axis, reshaped to the indices' shape."""
    x, idx_name = layer.inputs[:2]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", 0)) % len(shape)
    if not g.is_const(idx_name):
        return _gather_ids(g, layer, axis)
    idx = const(g, idx_name).astype(np.int64).reshape(-1)
    if np.any((idx < -shape[axis]) | (idx >= shape[axis])):
        raise node_error(layer, "index out of range")
    flat = tuple(int(i) % shape[axis] for i in idx)
    s = Seq(g, layer)
    taken = (*shape[:axis], len(flat), *shape[axis + 1 :])
    if len(runs(flat)) > SCATTERED_RUNS and math.prod(taken) * shape[axis] <= ONE_HOT_LIMIT:
        _gather_one_hot(s, x, axis, flat)
    elif taken == g.tensors[s.y].shape:
        s.add("take", [x], s.y, axis=axis, indices=flat)
    else:
        t = s.add("take", [x], s.tmp(taken, "take"), axis=axis, indices=flat)
        s.add("reshape", [t], s.y)
    return s.done()


ONE_HOT_LIMIT = 1 << 22  # elements of a constant one-hot selector (16 MB)


SCATTERED_RUNS = 256  # a take of more runs of evenly spaced indices selects with a one-hot


def _gather_one_hot(s: Seq, x: str, axis: int, flat: tuple[int, ...]) -> None:
    """s.y = x taken at `flat` along `axis`: x masked by a constant one-hot, summed over it."""
    shape = s.g.tensors[x].shape
    pre, n, post = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    view = s.add("reshape", [x], s.tmp((pre, 1, n, post), "view"))
    hot = (np.asarray(flat)[:, None] == np.arange(n))[:, :, None]
    picked = s.add(
        "mask", [view, s.const(hot, "one_hot")], s.tmp((pre, len(flat), n, post), "picked")
    )
    total = s.add("reduce", [picked], s.tmp((pre, len(flat), 1, post), "sum"), op="sum", axes=(2,))
    s.add("reshape", [total], s.y)


def gather_elements(g: Graph, layer: Layer) -> list[Layer]:
    """GatherElements: with constant indices a sum over the axis of x masked by a one-hot, with
    run-time ones an indirect take (_gather_elements_ids)."""
    x, idx_name = layer.inputs[:2]
    axis = int(attr(layer, "axis", 0)) % len(g.tensors[x].shape)
    s = Seq(g, layer)
    if not g.is_const(idx_name):
        _gather_elements_ids(s, x, idx_name, axis)
        return s.done()
    idx = const(g, idx_name).astype(np.int64)
    s.add("reshape", [_select(s, x, axis, idx)], s.y)
    return s.done()


def _gather_elements_ids(s: Seq, x: str, idx: str, axis: int) -> None:
    """s.y = GatherElements(x, idx) for run-time idx: with `axis` moved first, x as [n, R] rows
    and idx as [m, R], an indirect take of the row of every index ([m*R, R], each index checked
    by the interpreter), of which the output keeps its own column (an identity mask summed)."""
    shape, ishape = s.g.tensors[x].shape, s.g.tensors[idx].shape
    n, m = shape[axis], ishape[axis]
    ranges = [range(d if k == axis else ishape[k]) for k, d in enumerate(shape)]
    kept = tuple(len(r) for r in ranges)
    part = slice_seq(s, x, ranges, s.tmp(kept, "part")) if kept != shape else x
    perm = (axis, *(k for k in range(len(shape)) if k != axis))
    rest = tuple(ishape[k] for k in perm[1:])
    width = math.prod(rest)
    if m * width * width > ONE_HOT_LIMIT:
        raise node_error(s.layer, f"{m * width} run-time indices into rows of {width} are too many")
    table = s.add("transpose", [part], s.tmp((n, *rest), "rows"), perm=perm)
    ids = s.add("transpose", [idx], s.tmp((m, *rest), "ids"), perm=perm)
    flat = s.add("reshape", [table], s.tmp((n, width), "table"))
    taken = s.add("take", [flat, ids], s.tmp((m * width, width), "taken"), axis=0)
    rows = s.add("reshape", [taken], s.tmp((m, width, width), "rows"))
    if width > 1:
        eye = s.const(np.eye(width, dtype=bool), "own_column")
        picked = s.add("mask", [rows, eye], s.tmp((m, width, width), "picked"))
        rows = s.add("reduce", [picked], s.tmp((m, width), "column"), op="sum", axes=(2,))
    moved = s.add("reshape", [rows], s.tmp((m, *rest), "moved"))
    s.add("transpose", [moved], s.y, perm=tuple(int(k) for k in np.argsort(perm)))


def _select(s: Seq, x: str, axis: int, idx: np.ndarray) -> str:
    """x at idx along `axis` (GatherElements), shaped like idx with a 1 inserted after the axis."""
    shape = s.g.tensors[x].shape
    n = shape[axis]
    if np.any((idx < -n) | (idx >= n)):
        raise node_error(s.layer, "index out of range")
    if idx.size * n > ONE_HOT_LIMIT:
        raise node_error(s.layer, f"{idx.size} indices into {n} positions are too many")
    ranges = [range(d) for d in idx.shape]
    ranges[axis] = range(n)
    kept = tuple(len(r) for r in ranges)
    part = slice_seq(s, x, ranges, s.tmp(kept, "part")) if kept != shape else x
    # x[..., k, ...] seen as [..., 1, k, ...] against one_hot[..., j, k, ...] = (idx[..., j] == k)
    wide = (*idx.shape[: axis + 1], n, *idx.shape[axis + 1 :])
    view = s.add("reshape", [part], s.tmp((*kept[:axis], 1, *kept[axis:]), "view"))
    hot = np.expand_dims(idx % n, axis + 1) == np.arange(n).reshape(
        (n,) + (1,) * (idx.ndim - axis - 1)
    )
    picked = s.add("mask", [view, s.const(hot, "one_hot")], s.tmp(wide, "picked"))
    return s.add("reduce", [picked], s.tmp((*wide[: axis + 1], 1, *wide[axis + 2 :]), "sum"),
                 op="sum", axes=(axis + 1,))  # fmt: skip


def _nll(s: Seq, logp: str, target: str, weight: str, out: str) -> None:
    """out = the negative log-likelihood of the constant targets under log-probabilities logp."""
    layer = s.layer
    t = need_const(s.g, layer, target, "target").astype(np.int64)
    c = s.g.tensors[logp].shape[1]
    w = need_const(s.g, layer, weight, "weight") if weight else np.ones(c, np.float32)
    ignore = attr(layer, "ignore_index", None)
    valid = t != int(ignore) if ignore is not None else np.ones(t.shape, bool)
    if np.any(valid & ((t < 0) | (t >= c))):
        raise node_error(layer, "target out of range")
    safe = np.where(valid, t, 0)
    per = np.where(valid, w[safe], 0).astype(np.float32)  # each position's weight
    picked = s.add("reshape", [_select(s, logp, 1, safe[:, None])], s.tmp(t.shape, "picked"))
    reduction = str(attr(layer, "reduction", "mean"))
    if reduction not in ("none", "sum", "mean"):
        raise node_error(layer, f"unknown reduction {reduction!r}")
    loss = s.add(
        "mul",
        [picked, s.const(-per, "weights")],
        out if reduction == "none" else s.tmp(t.shape, "loss"),
    )
    if reduction == "none":
        return
    axes = tuple(range(t.ndim))
    if reduction == "sum":
        s.add("reduce", [loss], out, op="sum", axes=axes)
        return
    total = s.add("reduce", [loss], s.tmp((), "total"), op="sum", axes=axes)
    with np.errstate(divide="ignore"):  # every target ignored: 0 * inf = NaN, as 0 / 0
        scale = float(np.float64(1.0) / per.sum(dtype=np.float64))
    s.add("muls", [total], out, scalar=scale)


def nll_loss(g: Graph, layer: Layer) -> list[Layer]:
    """NegativeLogLikelihoodLoss with constant targets and weights."""
    s = Seq(g, layer)
    ins = [*layer.inputs, ""]
    _nll(s, ins[0], ins[1], ins[2], s.y)
    return s.done()


def softmax_cross_entropy(g: Graph, layer: Layer) -> list[Layer]:
    """SoftmaxCrossEntropyLoss: the NLL of log(softmax over axis 1); log_prob if read."""
    s = Seq(g, layer)
    scores, labels, weights = [*layer.inputs, ""][:3]
    shape = g.tensors[scores].shape
    log_prob = layer.outputs[1] if len(layer.outputs) > 1 and layer.outputs[1] else ""
    prob = s.add("softmax", [scores], s.tmp(shape, "prob"), axis=1)
    logp = s.add("log", [prob], log_prob or s.tmp(shape, "log_prob"))
    _nll(s, logp, labels, weights, s.y)
    return s.done()


def compress(g: Graph, layer: Layer) -> list[Layer]:
    """Compress with a constant condition: a take of the selected positions (of x flattened)."""
    x, cond = layer.inputs[:2]
    keep = tuple(int(i) for i in np.flatnonzero(need_const(g, layer, cond, "condition")))
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    if "axis" in layer.attrs:
        src, axis = x, int(layer.attrs["axis"]) % len(shape)
    else:
        src, axis = s.add("reshape", [x], s.tmp((math.prod(shape),), "flat")), 0
    if any(i >= s.g.tensors[src].shape[axis] for i in keep):
        raise node_error(layer, "the condition selects beyond the axis")
    s.add("take", [src], s.y, axis=axis, indices=keep)
    return s.done()


def _gather_ids(g: Graph, layer: Layer, axis: int) -> list[Layer]:
    """Gather with run-time indices (an int64 input, or integers held as float32): an indirect
    take along `axis`, every index checked by the interpreter."""
    x, ids = layer.inputs[:2]
    shape = g.tensors[x].shape
    s = Seq(g, layer)
    taken = (*shape[:axis], math.prod(g.tensors[ids].shape), *shape[axis + 1 :])
    if taken == g.tensors[s.y].shape:
        s.add("take", [x, ids], s.y, axis=axis)
    else:
        s.add("reshape", [s.add("take", [x, ids], s.tmp(taken, "take"), axis=axis)], s.y)
    return s.done()
