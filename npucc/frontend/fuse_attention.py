"""fuse-attention: scaled dot-product attention -> one `attention` layer (flash attention).

Matches matmul(Q, Kᵀ) -> div|mul by a scalar constant (optional) -> add of a mask (optional)
-> softmax over the last axis -> matmul(P, V), every intermediate read only by the next layer.
Transposes feeding Q, Kᵀ or V that only they read are absorbed as strides: the layer reads
its operands through q/k/v_strides over the logical [..., S, D] dims (K as [..., Sk, D]).
Anything else (a scale applied to Q, broadcast batch dims, ...) keeps the individual layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.common import Fusion, fuse_all, scalar_const, single_producer
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


def _match(g: Graph, pv: Layer) -> tuple[list[Layer], dict] | None:
    """The layers of an attention ending at matmul `pv`, and the fused layer's inputs/attrs."""
    p, v = pv.inputs
    sm = single_producer(g, p, "softmax")
    rank = len(g.tensors[p].shape)
    if sm is None or sm.attrs["axis"] != rank - 1 or rank < 2:
        return None
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
            value, sc.inputs = scalar_const(g, sc.inputs[0]), sc.inputs[::-1]
        if value is None or value == 0.0:
            continue
        chain, x, scale = [sc, *chain], sc.inputs[0], 1.0 / value if op == "div" else value
        break
    qk = single_producer(g, x, "matmul")
    if qk is None:
        return None
    q, kt = qk.inputs
    shapes = [g.tensors[t].shape for t in (q, kt, v)]
    if any(len(s) != rank for s in shapes) or len({s[:-2] for s in shapes}) != 1:
        return None
    if mask and len(g.tensors[mask].shape) > rank:
        return None
    absorbed: list[Layer] = []
    q_src, q_st = _strides(g, q, absorbed)
    k_src, kt_st = _strides(g, kt, absorbed)
    v_src, v_st = _strides(g, v, absorbed)
    k_st = (*kt_st[:-2], kt_st[-1], kt_st[-2])
    attrs = {"scale": scale, "q_strides": q_st, "k_strides": k_st, "v_strides": v_st}
    inputs = [q_src, k_src, v_src] + ([mask] if mask else [])
    return [*absorbed, qk, *chain], {"inputs": inputs, "attrs": attrs}


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
    layers, spec = found
    return Fusion(pv, layers, "attention", spec["inputs"], spec["attrs"])
