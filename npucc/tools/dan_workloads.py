"""The six benchmark workloads (paper 000, section 6): Conv, FlashAttention, Matmul x Case0/Case1.

Each is one core's TileGraph built with npucc's TileBuilder (so edges, op names and cycles come
from the same code as every lowering), on the davinci-core cost model, with 8x8 fp32 tiles
(256 B) so that the trace default capacities (L1 4096, UB 1024, L0A 256, L0B 256, L0C 512)
apply unchanged. The emission order is a prefetching lowering's: every DDR->L1 load of a block
is issued before its compute (the order DMA engines see in recorded traces), which keeps many
L1 buffers live; Case1 is larger and exceeds the capacities under that order.
- Conv: the implicit-GEMM form of a 3x3 conv stage (weights stay in L1 per output-channel
  block, im2col patch tiles stream through L0A), bias and ReLU on the vector pipe.
- FlashAttention: per query block, for each key/value block, S = Q Kt on the cube, online
  softmax (row max, exp, row sum, rescale) on the vector pipe, P moved back to L1 and O += P V
  on the cube, O normalised and stored at the end.
- Matmul: C = A B with an A row panel kept in L1 across the column blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from npucc.backend.lower.builder import TileBuilder
from npucc.ir.isa import BufRef, Copy, DdrRef, Mmad, VBinary, VUnary
from npucc.ir.tiled import TileGraph
from npucc.target import Target, load_target

T = 8  # tile edge in elements (8x8 fp32 = 256 B)
TILE = T * T


def _builder(name: str) -> TileBuilder:
    target: Target = load_target("davinci-core")
    return TileBuilder(
        TileGraph(name), replace(target, memory=replace(target.memory, alignment=32))
    )


def _load(bld: TileBuilder, tier: str, key: str, off: int, name: str) -> BufRef:
    buf = bld.alloc(tier, TILE, name)
    bld.emit(Copy(buf, DdrRef(key, off), (TILE,), (1,), (1,)))
    return buf


def _move(bld: TileBuilder, src: BufRef, tier: str, name: str) -> BufRef:
    buf = bld.alloc(tier, TILE, name)
    bld.emit(Copy(buf, src, (TILE,), (1,), (1,)))
    return buf


def _vec(bld: TileBuilder, op: str, dst: BufRef, src: BufRef) -> None:
    bld.emit(VUnary(op, dst, src, (TILE,), (1,), (1,)))


def _vbin(bld: TileBuilder, op: str, dst: BufRef, a: BufRef, b: BufRef) -> None:
    bld.emit(VBinary(op, dst, a, b, (TILE,), (1,), (1,), (1,)))


def _drain(bld: TileBuilder, acc: BufRef, key: str, off: int, epilogue: bool) -> None:
    """L0C -> UB, optional bias + ReLU, UB -> DDR."""
    ub = _move(bld, acc, "UB", "out")
    bld.free(acc)
    if epilogue:
        bias = _load(bld, "UB", "bias", off % TILE, "bias")
        _vbin(bld, "add", ub, ub, bias)
        bld.free(bias)
        _vec(bld, "relu", ub, ub)
    bld.emit(Copy(DdrRef(key, off), ub, (TILE,), (1,), (1,)))
    bld.free(ub)


def gemm_graph(name: str, mb: int, nb: int, kb: int, conv: bool) -> TileGraph:
    """Blocked C[mb*T, nb*T] = A[mb*T, kb*T] B[kb*T, nb*T]; conv: B is the weight, stationary."""
    bld = _builder(name)
    # conv: the weight panel of an output-channel block stays in L1 over the patch rows
    outer, inner = (nb, mb) if conv else (mb, nb)
    for i in range(outer):
        panel = [
            _load(bld, "L1", "W" if conv else "A", (i * kb + k) * TILE, "panel") for k in range(kb)
        ]
        for j in range(inner):
            stream = [
                _load(bld, "L1", "X" if conv else "B", (j * kb + k) * TILE, "tile")
                for k in range(kb)
            ]
            acc = bld.alloc("L0C", TILE, "acc")
            for k in range(kb):
                a0 = _move(bld, stream[k] if conv else panel[k], "L0A", "a0")
                b0 = _move(bld, panel[k] if conv else stream[k], "L0B", "b0")
                bld.emit(Mmad(acc, a0, b0, T, T, T, 1 if k else 0))
                bld.free(a0)
                bld.free(b0)
                bld.free(stream[k])
            _drain(bld, acc, "C", (i * inner + j) * TILE, conv)
        for buf in panel:
            bld.free(buf)
    return bld.graph


def attention_graph(name: str, qb: int, kvb: int) -> TileGraph:
    """Tiled flash attention with qb query blocks and kvb key/value blocks (head dim T)."""
    bld = _builder(name)
    for q in range(qb):
        ql1 = _load(bld, "L1", "Q", q * TILE, "q")
        keys = [_load(bld, "L1", "K", j * TILE, "k") for j in range(kvb)]
        vals = [_load(bld, "L1", "V", j * TILE, "v") for j in range(kvb)]
        attention_query(bld, q, ql1, keys, vals, release=True)
    return bld.graph


def attention_query(
    bld: TileBuilder, q: int, ql1: BufRef, keys: list[BufRef], vals: list[BufRef], release: bool
) -> None:
    """Query block q (loaded in `ql1`) over every key/value block: O_q = softmax(Q K^T) V.

    `release`: free the key and value tiles after their use here (true when this is the last
    query block that reads them: every block when the caller loads them per query block)."""
    out = bld.alloc("UB", TILE, "o")
    stats = bld.alloc("UB", TILE, "m_l")
    for j in range(len(keys)):
        a0 = _move(bld, ql1, "L0A", "q0")
        b0 = _move(bld, keys[j], "L0B", "k0")
        acc = bld.alloc("L0C", TILE, "s")
        bld.emit(Mmad(acc, a0, b0, T, T, T, 0))
        for buf in (a0, b0, *((keys[j],) if release else ())):
            bld.free(buf)
        s = _move(bld, acc, "UB", "s")
        bld.free(acc)
        _vbin(bld, "max", stats, stats, s)  # running row max
        _vbin(bld, "sub", s, s, stats)
        _vec(bld, "exp", s, s)
        _vbin(bld, "add", stats, stats, s)  # running row sum
        _vbin(bld, "mul", out, out, stats)  # rescale O
        p1 = _move(bld, s, "L1", "p")
        bld.free(s)
        pa = _move(bld, p1, "L0A", "p0")
        bld.free(p1)
        vb = _move(bld, vals[j], "L0B", "v0")
        if release:
            bld.free(vals[j])
        pv = bld.alloc("L0C", TILE, "pv")
        bld.emit(Mmad(pv, pa, vb, T, T, T, 0))
        bld.free(pa)
        bld.free(vb)
        pvu = _move(bld, pv, "UB", "pv")
        bld.free(pv)
        _vbin(bld, "add", out, out, pvu)
        bld.free(pvu)
    bld.free(ql1)
    _vbin(bld, "div", out, out, stats)
    bld.free(stats)
    bld.emit(Copy(DdrRef("O", q * TILE), out, (TILE,), (1,), (1,)))
    bld.free(out)


WORKLOADS: dict[str, Callable[[], TileGraph]] = {
    "Conv_Case0": lambda: gemm_graph("Conv_Case0", 4, 2, 3, conv=True),
    "Conv_Case1": lambda: gemm_graph("Conv_Case1", 8, 4, 9, conv=True),
    "FlashAttention_Case0": lambda: attention_graph("FlashAttention_Case0", 2, 4),
    "FlashAttention_Case1": lambda: attention_graph("FlashAttention_Case1", 4, 12),
    "Matmul_Case0": lambda: gemm_graph("Matmul_Case0", 2, 4, 4, conv=False),
    "Matmul_Case1": lambda: gemm_graph("Matmul_Case1", 4, 8, 10, conv=False),
}
