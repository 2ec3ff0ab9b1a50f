"""Legalisations of ONNX reductions and scans: Reduce*, LpNormalization, CumSum/CumProd, Hardmax,
ArgMax/ArgMin and TopK.
"""

from __future__ import annotations

import math

import numpy as np

from npucc.frontend.graph_edit import const, node_error, onnx_op
from npucc.frontend.onnx_seq import INF, Seq, attr, need_const, scalar_unary, slice_seq
from npucc.ir.graph import Graph, Layer

REDUCE = {  # ONNX op -> (pre-op, reduce op, post-op)
    "ReduceSum": ("", "sum", ""),
    "ReduceMean": ("", "mean", ""),
    "ReduceMax": ("", "max", ""),
    "ReduceMin": ("", "min", ""),
    "ReduceL1": ("abs", "sum", ""),
    "ReduceL2": ("square", "sum", "sqrt"),
    "ReduceSumSquare": ("square", "sum", ""),
    "ReduceLogSum": ("", "sum", "log"),
    "ReduceLogSumExp": ("exp", "sum", "log"),
    "ReduceProd": ("", "prod", ""),
}


def _reduce_axes(g: Graph, layer: Layer, rank: int) -> tuple[int, ...] | None:
    """The reduced axes (sorted, non-negative); None when there is nothing to reduce."""
    axes: tuple[int, ...] | None = None
    if "axes" in layer.attrs:
        axes = tuple(layer.attrs["axes"])
    elif len(layer.inputs) > 1 and layer.inputs[1]:
        if not g.is_const(layer.inputs[1]):
            raise node_error(layer, "axes must be constant")
        axes = tuple(int(a) for a in const(g, layer.inputs[1]).reshape(-1))
    if not axes:
        if int(attr(layer, "noop_with_empty_axes", 0)):
            return None
        axes = tuple(range(rank))
    return tuple(sorted({a % rank for a in axes}))


def reduce(g: Graph, layer: Layer) -> list[Layer]:
    """ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp over constant axes."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    pre, op, post = REDUCE[layer.op.removeprefix("onnx.")]
    axes = _reduce_axes(g, layer, len(shape))
    s = Seq(g, layer)
    if pre == "square":
        x = scalar_unary(s, "pows", x, 2.0, s.tmp(shape, "sq"))
    elif pre:
        x = s.add(pre, [x], s.tmp(shape, pre))
    if axes is None:
        s.add(post or "reshape", [x], s.y)
        return s.done()
    out_shape = g.tensors[s.y].shape
    r = s.add("reduce", [x], "" if post else s.y, op=op, axes=axes)
    if post:
        g.tensors[r].shape = out_shape
        s.add(post, [r], s.y)
    return s.done()


def lp_normalization(g: Graph, layer: Layer) -> list[Layer]:
    """x / ||x||_p along one axis (p 1 or 2); a zero norm gives 0, like onnxruntime."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", -1)) % len(shape)
    p = int(attr(layer, "p", 2))
    if p not in (1, 2):
        raise node_error(layer, f"p must be 1 or 2, not {p}")
    s = Seq(g, layer)
    stat = tuple(1 if k == axis else d for k, d in enumerate(shape))
    mag = s.add("abs", [x]) if p == 1 else scalar_unary(s, "pows", x, 2.0)
    norm = s.add("reduce", [mag], s.tmp(stat, "norm"), op="sum", axes=(axis,))
    if p == 2:
        norm = s.add("sqrt", [norm], s.tmp(stat, "l2"))
    # a zero norm divides by 1 instead: 0 / 1 = 0, and no other norm changes (a clip to a tiny
    # float32 would be 0 again in an fp16 program)
    zero = s.const(np.zeros((), np.float32), "zero")
    empty = s.add("eq", [norm, zero], s.tmp(stat, "empty"))
    norm = s.add("where", [empty, s.const(np.ones((), np.float32), "one"), norm],
                 s.tmp(stat, "nonzero"))  # fmt: skip
    s.add("div", [x, norm], s.y)
    return s.done()


SCAN_IDENTITY = {"add": 0.0, "mul": 1.0, "max": 0.0}  # max: only of booleans (1.0/0.0)


def _shift(s: Seq, x: str, axis: int, k: int, value: float, reverse: bool) -> str:
    """x moved k places along `axis` (to the end, or the start if `reverse`), `value` behind."""
    shape = s.g.tensors[x].shape
    rank, n = len(shape), shape[axis]
    ranges = [range(d) for d in shape]
    ranges[axis] = range(k, n) if reverse else range(n - k)
    kept = tuple(len(r) for r in ranges)
    part = slice_seq(s, x, ranges, s.tmp(kept, f"keep{k}"))
    pads = [0] * 2 * rank
    pads[axis + rank if reverse else axis] = k
    return s.add(
        "pad", [part], s.tmp(shape, f"shift{k}"), pads=tuple(pads), value=value, strides=(1,) * rank
    )


def _scan(s: Seq, x: str, axis: int, op: str, exclusive: bool, reverse: bool, out: str) -> str:
    """The running `op` (add, mul; max of booleans) of x along `axis`, in log2(n) steps."""
    shape = s.g.tensors[x].shape
    n = shape[axis]
    identity = SCAN_IDENTITY[op]
    if exclusive and n == 1:
        return s.add("copy", [s.const(np.full(shape, identity), "identity")], out)
    cur = _shift(s, x, axis, 1, identity, reverse) if exclusive else x
    k = 1
    while k < n:  # Hillis-Steele: combine each element with the one k places before it
        moved = _shift(s, cur, axis, k, identity, reverse)
        cur = s.add(op, [cur, moved], out if 2 * k >= n else s.tmp(shape, f"{op}{k}"))
        k *= 2
    if cur == x:
        return s.add("reshape", [x], out)
    return cur


def cumulative(g: Graph, layer: Layer) -> list[Layer]:
    """CumSum/CumProd along a constant axis, exclusive and reverse included."""
    x = layer.inputs[0]
    rank = len(g.tensors[x].shape)
    axis = int(need_const(g, layer, layer.inputs[1], "axis").reshape(-1)[0]) % rank
    op = "add" if layer.op == "onnx.CumSum" else "mul"
    s = Seq(g, layer)
    exclusive, reverse = bool(attr(layer, "exclusive", 0)), bool(attr(layer, "reverse", 0))
    _scan(s, x, axis, op, exclusive, reverse, s.y)
    return s.done()


def hardmax(g: Graph, layer: Layer) -> list[Layer]:
    """1.0 at the first maximum along the axis (opset < 13: the flattened dims from it), else 0."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", -1 if g.opset >= 13 else 1)) % len(shape)
    s = Seq(g, layer)
    if g.opset < 13:
        flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        x, axis = s.add("reshape", [x], s.tmp(flat, "flat")), 1
    view = s.g.tensors[x].shape
    stat = tuple(1 if k == axis else d for k, d in enumerate(view))
    top = s.add("reduce", [x], s.tmp(stat, "max"), op="max", axes=(axis,))
    hits = s.add("eq", [x, top], s.tmp(view, "hits"))
    earlier = _scan(s, hits, axis, "max", True, False, s.tmp(view, "earlier"))
    first = s.add("maskn", [hits, earlier], s.tmp(view, "first") if g.opset < 13 else s.y)
    if g.opset < 13:
        s.add("reshape", [first], s.y)
    return s.done()


def _extreme_marks(s: Seq, shape: tuple[int, ...], axis: int, last: bool) -> tuple[str, str]:
    """Constants of an extreme-position search: every position along `axis` as float32, and
    the value of a position that is not a hit (past the end, or -1 when the last hit wins)."""
    n = shape[axis]
    if n >= 1 << 24:
        raise node_error(s.layer, f"axis of {n} elements: float32 cannot hold every index")
    along = tuple(n if k == axis else 1 for k in range(len(shape)))
    positions = s.const(np.arange(n, dtype=np.float32).reshape(along), "positions")
    return positions, s.const(np.array(-1.0 if last else n, np.float32), "elsewhere")


def _first_extreme(
    s: Seq,
    x: str,
    axis: int,
    extreme: str,
    last: bool,
    marks: tuple[str, str],
    free: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """The extreme of `x` along `axis` (kept as a size-1 axis) and the float32 position where it
    is first (last) attained; with `free` (a 1.0/0.0 mask of open positions and the value
    that blocks the others) only among the open positions."""
    shape = s.g.tensors[x].shape
    kept = tuple(1 if k == axis else d for k, d in enumerate(shape))
    positions, elsewhere = marks
    source = x
    if free is not None:  # taken positions can never be the extreme
        source = s.add("where", [free[0], x, free[1]], s.tmp(shape, "open"))
    peak = s.add("reduce", [source], s.tmp(kept, extreme), op=extreme, axes=(axis,))
    hit = s.add("eq", [source, peak], s.tmp(shape, "hit"))
    if free is not None:
        hit = s.add("mul", [hit, free[0]], s.tmp(shape, "free_hit"))
    candidates = s.add("where", [hit, positions, elsewhere], s.tmp(shape, "candidates"))
    pick = "max" if last else "min"
    index = s.add("reduce", [candidates], s.tmp(kept, "index"), op=pick, axes=(axis,))
    return peak, index


def arg_extreme(g: Graph, layer: Layer) -> list[Layer]:
    """ArgMax/ArgMin as reductions: the extreme along the axis, a 1.0/0.0 mask of where it is
    attained, the positions there (others pushed past the end) and their minimum (maximum with
    select_last_index). Indices are float32 values, exact below 2**24."""
    x = layer.inputs[0]
    axis = int(attr(layer, "axis", 0)) % len(g.tensors[x].shape)
    last = bool(int(attr(layer, "select_last_index", 0)))
    s = Seq(g, layer)
    extreme = "max" if onnx_op(layer) == "ArgMax" else "min"
    marks = _extreme_marks(s, g.tensors[x].shape, axis, last)
    _, index = _first_extreme(s, x, axis, extreme, last, marks)
    s.add("reshape", [index], s.y)
    return s.done()


def top_k(g: Graph, layer: Layer) -> list[Layer]:
    """TopK with a constant k: k rounds of (extreme among the positions not taken yet, its
    first position, mark it taken); values and indices concatenated along the axis, sorted
    (largest first, or smallest with largest=0), ties to the lower index as onnxruntime."""
    x = layer.inputs[0]
    shape = g.tensors[x].shape
    axis = int(attr(layer, "axis", -1)) % len(shape)
    if len(layer.inputs) > 1 and layer.inputs[1]:
        k = int(need_const(g, layer, layer.inputs[1], "k").reshape(-1)[0])
    else:
        k = int(attr(layer, "k", 1))
    if not 1 <= k <= shape[axis]:
        raise node_error(layer, f"k = {k} outside [1, {shape[axis]}]")
    extreme = "max" if int(attr(layer, "largest", 1)) else "min"
    s = Seq(g, layer)
    marks = _extreme_marks(s, shape, axis, False)
    blocked = s.const(np.array(-INF if extreme == "max" else INF, np.float32), "blocked")
    free: tuple[str, str] | None = None  # every position is open in the first round
    values, indices = [], []
    for round_ in range(k):
        peak, index = _first_extreme(s, x, axis, extreme, False, marks, free)
        values.append(peak)
        indices.append(index)
        if round_ == k - 1:
            break
        if free is None:
            open_ = s.add("ne", [marks[0], index], s.tmp(shape, "free"))
        else:
            taken = s.add("eq", [marks[0], index], s.tmp(shape, "taken"))
            open_ = s.add("sub", [free[0], taken], s.tmp(shape, "free"))
        free = (open_, blocked)
    values_out, indices_out = (*layer.outputs, "", "")[:2]
    for out, parts in ((values_out, values), (indices_out, indices)):
        if out and k > 1:
            s.add("concat", parts, out, axis=axis)
        elif out:
            s.add("reshape", parts, out)
    return s.done()
