"""Cube + vector lowering of the fused attention layer as tiled flash attention.

For each batch index and block of Br query rows, the key/value sequence is streamed in blocks
of Bc: S = scale * Q Kᵀ (+ mask) on the cube pipe, then the online softmax on the vector pipe
keeps a running row max m and row sum l and rescales the output accumulator O:
    m' = max(m, rowmax S);  P = exp(S - m');  a = exp(m - m')
    l = a * l + rowsum P;   O = a * O + P V;   m = m'
and O / l is stored. Q, K and V are read through their strides (attrs q/k/v_strides over the
logical [..., S, D] dims), so transposes absorbed by the frontend cost nothing.
"""

from __future__ import annotations

import math

import numpy as np

from npucc.backend.lower.context import LowerContext, lowering, split
from npucc.backend.lower.layout import broadcast_strides, budget, offset
from npucc.ir.graph import Layer, row_major_strides
from npucc.ir.isa import BufRef, Copy, DdrRef, Mmad, VBinary, VFill, VReduce, VUnary

BLOCK = 128  # largest query and key block


def _blocks(ctx: LowerContext, layer: Layer, dims: tuple[int, ...], mask: bool) -> tuple[int, int]:
    """(Br, Bc): the largest blocks (halving from BLOCK) whose buffers fit every tier's share."""
    sq, sk, d, dv = dims

    def cube(br: int, bc: int) -> dict[str, tuple[int, ...]]:
        """The buffers of one block step in each cube-side tier (elements each)."""
        return {
            "L0A": (br * max(d, bc),),
            "L0B": (bc * max(d, dv),),
            "L0C": (br * max(bc, dv),),
            "L1": (br * d, bc * max(d, dv)),
        }

    def vector(br: int, bc: int) -> int:
        """UB elements of one block step: scores (and mask), output and its update, stats."""
        return br * bc * (2 if mask else 1) + 2 * br * dv + 4 * br

    ub = budget(ctx, layer, least=vector(1, 1))
    for tier, buffers in cube(1, 1).items():
        if not ctx.share_fits(tier, buffers):
            raise ctx.share_error(layer, tier, buffers)
    br, bc = min(sq, BLOCK), min(sk, BLOCK)
    while not (all(ctx.share_fits(t, b) for t, b in cube(br, bc).items()) and vector(br, bc) <= ub):
        if bc >= br and bc > 1:
            bc = max(1, bc // 2)
        else:
            br = max(1, br // 2)
    return br, bc


class _Flash:
    """The operands and buffers of one attention layer's lowering."""

    __slots__ = ("ctx", "layer", "q", "k", "v", "mask", "out", "st", "dims", "scale")

    def __init__(self, ctx: LowerContext, layer: Layer) -> None:
        self.ctx, self.layer = ctx, layer
        a = layer.attrs
        names = [*layer.inputs, ""][:4]
        self.q, self.k, self.v = (ctx.ddr(n) for n in names[:3])
        self.mask = ctx.ddr(names[3]) if names[3] else None
        self.out = ctx.ddr(layer.outputs[0])
        out_shape = ctx.shape(layer.outputs[0])
        batch = out_shape[:-2]
        sq, dv = out_shape[-2:]
        # K and V may be broadcast over batch dims (stride 0): count only the dims they span
        q_rows = math.prod(batch)
        v_rows = math.prod(n for n, st in zip(batch, a["v_strides"], strict=False) if st)
        d = math.prod(ctx.shape(names[0])) // (q_rows * sq)
        sk = math.prod(ctx.shape(names[2])) // (v_rows * dv)
        self.dims = (batch, sq, sk, d, dv)
        mst: tuple[int, ...] = ()
        if names[3]:
            mst = broadcast_strides(ctx.shape(names[3]), (*batch, sq, sk))
        self.st = {
            "q": tuple(a["q_strides"]),
            "k": tuple(a["k_strides"]),
            "v": tuple(a["v_strides"]),
            "m": mst,
            "o": row_major_strides(out_shape),
        }
        self.scale = float(a["scale"])


@lowering("attention")
def lower_attention(ctx: LowerContext, layer: Layer) -> None:
    """Flash attention over every batch index and query block."""
    f = _Flash(ctx, layer)
    batch, sq, sk, d, dv = f.dims
    br, bc = _blocks(ctx, layer, (sq, sk, d, dv), f.mask is not None)
    for index in np.ndindex(*batch):
        for q0, ql in split(sq, br):
            ctx.next_tile()
            _query_block(f, index, q0, ql, split(sk, bc))


def _stage(
    f: _Flash, src: DdrRef, dims: tuple[int, int], strides: tuple[int, int], tier: str, tag: str
) -> BufRef:
    """Load a strided [rows, cols] DDR block into L1 and move it on to an L0 tier."""
    bld = f.ctx.builder
    n = dims[0] * dims[1]
    l1 = bld.alloc("L1", n, f"{f.layer.name}.{tag}")
    bld.emit(Copy(l1, src, dims, (dims[1], 1), strides))
    l0 = bld.alloc(tier, n, f"{f.layer.name}.{tag}0")
    bld.emit(Copy(l0, l1, (n,), (1,), (1,)))
    bld.free(l1)
    return l0


def _query_block(
    f: _Flash, index: tuple[int, ...], q0: int, ql: int, kv_blocks: list[tuple[int, int]]
) -> None:
    """O[q0:q0+ql] of one batch index: the online softmax over the key/value blocks."""
    bld, name = f.ctx.builder, f.layer.name
    _, _, _, d, dv = f.dims
    st = f.st
    base = {k: offset(index, st[k][: len(index)]) for k in ("q", "k", "v", "o")}
    qa = _stage(f, f.q.at(base["q"] + q0 * st["q"][-2]), (ql, d), st["q"][-2:], "L0A", "q")
    m = bld.alloc("UB", ql, f"{name}.max")
    lsum = bld.alloc("UB", ql, f"{name}.sum")
    acc = bld.alloc("UB", ql * dv, f"{name}.o")
    bld.emit(VFill(m, (ql,), (1,), -math.inf))
    bld.emit(VFill(lsum, (ql,), (1,), 0.0))
    bld.emit(VFill(acc, (ql * dv,), (1,), 0.0))
    row, col = (ql,), (1,)
    for k0, kl in kv_blocks:
        mat, dense, bcast = (ql, kl), (kl, 1), (1, 0)
        # S = scale * Q K^T (+ mask)
        kt = f.k.at(base["k"] + k0 * st["k"][-2])
        kb = _stage(f, kt, (d, kl), (st["k"][-1], st["k"][-2]), "L0B", "kt")
        sc = bld.alloc("L0C", ql * kl, f"{name}.s0")
        bld.emit(Mmad(sc, qa, kb, ql, kl, d, 0))
        bld.free(kb)
        s = bld.alloc("UB", ql * kl, f"{name}.s")
        bld.emit(Copy(s, sc, (ql * kl,), (1,), (1,)))
        bld.free(sc)
        if f.scale != 1.0:
            bld.emit(VUnary("muls", s, s, (ql * kl,), (1,), (1,), (f.scale,)))
        if f.mask is not None:
            mst = st["m"]
            at = offset(index, mst[: len(index)]) + q0 * mst[-2] + k0 * mst[-1]
            mk = bld.alloc("UB", ql * kl, f"{name}.mask")
            bld.emit(Copy(mk, f.mask.at(at), mat, dense, mst[-2:]))
            bld.emit(VBinary("add", s, s, mk, mat, dense, dense, dense))
            bld.free(mk)
        # online softmax statistics
        mnew = bld.alloc("UB", ql, f"{name}.mnew")
        bld.emit(VReduce("max", mnew, s, mat, col, dense, 1))
        bld.emit(VBinary("max", mnew, mnew, m, row, col, col, col))
        bld.emit(VBinary("sub", s, s, mnew, mat, dense, dense, bcast))
        bld.emit(VUnary("exp", s, s, (ql * kl,), (1,), (1,)))
        bld.emit(VBinary("sub", m, m, mnew, row, col, col, col))
        bld.emit(VUnary("exp", m, m, row, col, col))  # m now holds the rescale factor a
        part = bld.alloc("UB", ql, f"{name}.rowsum")
        bld.emit(VReduce("sum", part, s, mat, col, dense, 1))
        bld.emit(VBinary("mul", lsum, lsum, m, row, col, col, col))
        bld.emit(VBinary("add", lsum, lsum, part, row, col, col, col))
        bld.free(part)
        # O = a * O + P V
        pl1 = bld.alloc("L1", ql * kl, f"{name}.p")
        bld.emit(Copy(pl1, s, (ql * kl,), (1,), (1,)))
        bld.free(s)
        pa = bld.alloc("L0A", ql * kl, f"{name}.p0")
        bld.emit(Copy(pa, pl1, (ql * kl,), (1,), (1,)))
        bld.free(pl1)
        vt = f.v.at(base["v"] + k0 * st["v"][-2])
        vb = _stage(f, vt, (kl, dv), st["v"][-2:], "L0B", "v")
        pv0 = bld.alloc("L0C", ql * dv, f"{name}.pv0")
        bld.emit(Mmad(pv0, pa, vb, ql, dv, kl, 0))
        bld.free(pa)
        bld.free(vb)
        pv = bld.alloc("UB", ql * dv, f"{name}.pv")
        bld.emit(Copy(pv, pv0, (ql * dv,), (1,), (1,)))
        bld.free(pv0)
        out_mat, out_dense = (ql, dv), (dv, 1)
        bld.emit(VBinary("mul", acc, acc, m, out_mat, out_dense, out_dense, bcast))
        bld.emit(VBinary("add", acc, acc, pv, out_mat, out_dense, out_dense, out_dense))
        bld.free(pv)
        bld.free(m)
        m = mnew
    bld.free(qa)
    bld.emit(VUnary("recip", lsum, lsum, row, col, col))
    bld.emit(VBinary("mul", acc, acc, lsum, (ql, dv), (dv, 1), (dv, 1), (1, 0)))
    dst = f.out.at(base["o"] + q0 * st["o"][-2])
    bld.emit(Copy(dst, acc, (ql, dv), st["o"][-2:], (dv, 1)))
    for b in (m, lsum, acc):
        bld.free(b)
