"""fuse-attention: scaled dot-product attention -> one `attention` layer (flash attention).

Matches matmul(Q, Kᵀ) -> div|mul by a scalar constant (optional) -> add of a mask (optional)
-> softmax over the last axis -> matmul(P, V), every intermediate read only by the next layer.
Transposes feeding Q, Kᵀ or V that only they read are absorbed as strides: the layer reads
its operands through q/k/v_strides over the logical [..., S, D] dims (K as [..., Sk, D]).
Anything else (a scale applied to Q, broadcast batch dims, ...) keeps the individual layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.graph_edit import (
    Fusion,
    fuse_all,
    scalar_const,
    single_producer,
    single_user,
)
from npucc.ir.graph import Graph, Layer, row_major_strides
from npucc.passes import CompileContext, GraphPass


def _scores(g: Graph, tensor: str) -> bool:
    """True when `tensor` may be the attention scores (written by a matmul or its scaling)."""
    layer = g.producer(tensor)
    return layer is not None and layer.op in ("matmul", "mul", "div")


def _strides(g: Graph, tensor: str, absorbed: list[Layer]) -> tuple[str, tuple[int, ...]]:
    """Source tensor and logical strides of an operand, absorbing a single-use transpose."""
    t = single_producer(g, tensor, "transpose")
    if t is None:
        return tensor, row_major_strides(g.tensors[tensor].shape)
    absorbed.append(t)
    src = t.inputs[0]
    st = row_major_strides(g.tensors[src].shape)
    return src, tuple(st[p] for p in t.attrs["perm"])


def _batch_view(g: Graph, tensor: str, rank: int, absorbed: list[Layer]) -> str:
    """The rank-`rank` tensor that `tensor` views with its leading (batch) dims merged or split
    (a single-use reshape keeping the last two dims), or `tensor` itself."""
    r = single_producer(g, tensor, "reshape")
    if r is None or len(g.tensors[tensor].shape) == rank:
        return tensor
    shape, src = g.tensors[tensor].shape, g.tensors[r.inputs[0]].shape
    if len(src) != rank or src[-2:] != shape[-2:]:
        return tensor
    absorbed.append(r)
    return r.inputs[0]


def _operand(
    g: Graph, tensor: str, rank: int, absorbed: list[Layer]
) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    """Source, logical strides and logical shape of a matmul operand of rank `rank`."""
    view = _batch_view(g, tensor, rank, absorbed)
    src, st = _strides(g, view, absorbed)
    return src, st, g.tensors[view].shape


def _swap(dims: tuple[int, ...]) -> tuple[int, ...]:
    return (*dims[:-2], dims[-1], dims[-2])


def _through_views(g: Graph, tensor: str, views: list[Layer]) -> str:
    """Follow single-use reshapes that keep the last two dims (batch merges and splits)."""
    while (r := single_producer(g, tensor, "reshape")) is not None:
        if g.tensors[r.inputs[0]].shape[-2:] != g.tensors[tensor].shape[-2:]:
            break
        views.append(r)
        tensor = r.inputs[0]
    return tensor


def _scores_matmul(g: Graph, x: str, rank: int) -> tuple[Layer, bool, list[Layer]] | None:
    """The matmul computing the scores `x`, whether it computes them transposed (K Qᵀ, then
    a transpose of the last two dims, as einsum lowerings write them), and the views between."""
    views: list[Layer] = []
    inner = _through_views(g, x, views)
    qk = single_producer(g, inner, "matmul")
    if qk is not None:
        return qk, False, views
    t = single_producer(g, inner, "transpose")
    if t is None or tuple(t.attrs["perm"]) != _swap(tuple(range(rank))):
        return None
    views.append(t)
    qk = single_producer(g, _through_views(g, t.inputs[0], views), "matmul")
    return (qk, True, views) if qk is not None else None


def _match(g: Graph, pv: Layer) -> tuple[list[Layer], Layer, dict] | None:
    """The layers of an attention ending at matmul `pv`, the layer that becomes the fused one
    (pv, or the reshape splitting its batch dims), and the fused layer's inputs/attrs."""
    p, v = pv.inputs
    absorbed: list[Layer] = []
    sm_out = _through_views(g, p, absorbed)
    sm = single_producer(g, sm_out, "softmax")
    rank = len(g.tensors[sm_out].shape)
    if sm is None or sm.attrs["axis"] != rank - 1 or rank < 2:
        return None
    keep = pv
    if len(g.tensors[pv.outputs[0]].shape) != rank:
        split = g.users(pv.outputs[0])[0] if single_user(g, pv.outputs[0]) else None
        if split is None or split.op != "reshape" or split.attrs.get("act"):
            return None
        shape = g.tensors[split.outputs[0]].shape
        if len(shape) != rank or shape[-2:] != g.tensors[pv.outputs[0]].shape[-2:]:
            return None
        keep = split
    chain, x, mask, scale = [sm], sm.inputs[0], "", 1.0
    add = single_producer(g, x, "add")
    if add is not None:
        a, b = add.inputs
        if _scores(g, b) and not _scores(g, a):
            a, b = b, a
        if g.tensors[a].shape == g.tensors[x].shape and _scores(g, a):
            chain, x, mask = [add, *chain], a, b
    for op in ("div", "mul"):
        sc = single_producer(g, x, op)
        if sc is None:
            continue
        value = scalar_const(g, sc.inputs[1])
        if value is None and op == "mul":
            value = scalar_const(g, sc.inputs[0])
            g.set_inputs(sc, sc.inputs[::-1])
        if value is None or value == 0.0:
            continue
        chain, x, scale = [sc, *chain], sc.inputs[0], 1.0 / value if op == "div" else value
        break
    found = _scores_matmul(g, x, rank)
    if found is None:
        return None
    qk, transposed, views = found
    a_name, b_name = qk.inputs
    a_src, a_st, a_shape = _operand(g, a_name, rank, absorbed)
    b_src, b_st, b_shape = _operand(g, b_name, rank, absorbed)
    v_src, v_st, v_shape = _operand(g, v, rank, absorbed)
    if transposed:  # scoresᵀ = A B: Q = Bᵀ, Kᵀ = Aᵀ
        q_src, q_st, q_shape = b_src, _swap(b_st), _swap(b_shape)
        k_src, k_st, kt_shape = a_src, a_st, _swap(a_shape)
    else:
        q_src, q_st, q_shape = a_src, a_st, a_shape
        k_src, k_st, kt_shape = b_src, _swap(b_st), b_shape
    shapes = [q_shape, kt_shape, v_shape]
    if any(len(s) != rank for s in shapes) or len({s[:-2] for s in shapes}) != 1:
        return None
    if mask and len(g.tensors[mask].shape) > rank:
        return None
    attrs = {"scale": scale, "q_strides": q_st, "k_strides": k_st, "v_strides": v_st}
    inputs = [q_src, k_src, v_src] + ([mask] if mask else [])
    layers = [*absorbed, *views, qk, *chain] + ([pv] if keep is not pv else [])
    return layers, keep, {"inputs": inputs, "attrs": attrs}


@dataclass(frozen=True, slots=True)
class FuseAttention(GraphPass):
    """Replace each matched scaled dot-product attention by one `attention` layer."""

    name = "fuse-attention"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every match, keeping the final matmul's name and output."""
        ctx.stats["fuse-attention.fused"] = fuse_all(ir, "matmul", _fusion)
        return ir


def _fusion(g: Graph, pv: Layer) -> Fusion | None:
    found = _match(g, pv)
    if found is None:
        return None
    layers, keep, spec = found
    return Fusion(keep, layers, "attention", spec["inputs"], spec["attrs"])
