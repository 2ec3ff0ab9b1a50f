"""Cube lowerings of gemm and matmul: tiled A@B through L1 -> L0A/L0B -> L0C -> UB -> DDR."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npucc.backend.lower.context import LowerContext, apply_activation, lowering, split
from npucc.ir.graph import Layer, row_major_strides
from npucc.ir.isa import BufRef, Copy, DdrRef, Mmad, VBinary, VUnary


@dataclass(frozen=True, slots=True)
class MatTiles:
    """Tile sizes of a tiled matrix multiply."""

    m: int
    n: int
    k: int


def _candidates(total: int, quantum: int = 1) -> list[int]:
    """Tile-size candidates: powers of two times `quantum`, capped by `total`, plus `total`."""
    out = {total}
    size = quantum
    while size < total:
        out.add(size)
        size *= 2
    return sorted(out)


L1Buffers = Callable[[int, int, int], tuple[int, ...]]


def choose_tiles(
    ctx: LowerContext,
    layer: Layer,
    m: int,
    n: int,
    k: int,
    l1_buffers: L1Buffers,
    ub_per_mn: int = 2,
    k_quantum: int = 1,
) -> MatTiles:
    """The tile (m_t, n_t, k_t) with the most MACs whose buffers fit every tier's share.

    `l1_buffers(m_t, n_t, k_t)` gives the elements of each L1 buffer of a tile (inputs staged
    in L1); `ub_per_mn` is the number of m_t x n_t tiles the epilogue keeps in UB; K tiles
    are multiples of `k_quantum` (a conv's taps per input channel). Tiles are multiples of
    the cube's fractal (m0, n0, k0) where one fits, else any size down to 1 x 1 x k_quantum.
    """
    cube = ctx.target.cube

    def buffers(mt: int, nt: int, kt: int) -> dict[str, tuple[int, ...]]:
        return {
            "L0A": (mt * kt,),
            "L0B": (kt * nt,),
            "L0C": (mt * nt,),
            "L1": l1_buffers(mt, nt, kt),
            "UB": (mt * nt,) * ub_per_mn,
        }

    for m0, n0, k0 in ((cube.m0, cube.n0, cube.k0), (1, 1, 1)):
        if k_quantum > 1:
            k_options = [c * k_quantum for c in _candidates(k // k_quantum)]
        else:
            k_options = _candidates(k, k0)
        best: tuple[tuple[int, int], MatTiles] | None = None
        for mt, nt, kt in itertools.product(_candidates(m, m0), _candidates(n, n0), k_options):
            if not all(ctx.share_fits(t, b) for t, b in buffers(mt, nt, kt).items()):
                continue
            tiles = math.ceil(m / mt) * math.ceil(n / nt) * math.ceil(k / kt)
            score = (mt * nt * kt, -tiles)
            if best is None or score > best[0]:
                best = (score, MatTiles(mt, nt, kt))
        if best is not None:
            return best[1]
    # NOTE: every tier's need grows with each tile dimension, so the smallest tile is the one
    # that fits if any does: the first tier it overflows is the one to name
    smallest = buffers(1, 1, k_options[0])
    tier = next(t for t, b in smallest.items() if not ctx.share_fits(t, b))
    raise ctx.share_error(layer, tier, smallest[tier])


@dataclass(frozen=True, slots=True)
class MatOperand:
    """A DDR matrix as a strided view: element (i, j) at ref.off + i*rows + j*cols."""

    ref: DdrRef
    rows: int  # element stride between rows
    cols: int  # element stride between columns

    def tile(self, i: int, j: int) -> DdrRef:
        """Reference to element (i, j)."""
        return self.ref.at(i * self.rows + j * self.cols)


Epilogue = Callable[[BufRef, int, int, int, int], None]


def emit_matmul(
    ctx: LowerContext,
    layer: Layer,
    a: MatOperand,
    b: MatOperand,
    out: MatOperand,
    m: int,
    n: int,
    k: int,
    epilogue: Epilogue | None = None,
) -> None:
    """Emit out = A[m,k] @ B[k,n] tile by tile; `epilogue(ub, m0, n0, mt, nt)` edits UB tiles."""
    tiles = choose_tiles(ctx, layer, m, n, k, lambda mt, nt, kt: (mt * kt, kt * nt))
    bld = ctx.builder
    for m0, mt in split(m, tiles.m):
        for n0, nt in split(n, tiles.n):
            ctx.next_tile()
            acc = bld.alloc("L0C", mt * nt, f"{layer.name}.acc")
            for index, (k0, kt) in enumerate(split(k, tiles.k)):
                a0 = _stage(ctx, layer, a, m0, k0, mt, kt, "L0A", "a")
                b0 = _stage(ctx, layer, b, k0, n0, kt, nt, "L0B", "b")
                bld.emit(Mmad(acc, a0, b0, mt, nt, kt, 1 if index else 0))
                bld.free(a0)
                bld.free(b0)
            ub = bld.alloc("UB", mt * nt, f"{layer.name}.out")
            bld.emit(Copy(ub, acc, (mt * nt,), (1,), (1,)))
            bld.free(acc)
            if epilogue is not None:
                epilogue(ub, m0, n0, mt, nt)
            apply_activation(ctx, ub, mt * nt, layer.attrs)
            bld.emit(Copy(out.tile(m0, n0), ub, (mt, nt), (out.rows, out.cols), (nt, 1)))
            bld.free(ub)


def _stage(
    ctx: LowerContext,
    layer: Layer,
    src: MatOperand,
    r0: int,
    c0: int,
    rows: int,
    cols: int,
    tier: str,
    tag: str,
) -> BufRef:
    """Load a rows x cols tile of `src` into L1 (row-major) and move it on to `tier`."""
    bld = ctx.builder
    l1 = bld.alloc("L1", rows * cols, f"{layer.name}.{tag}")
    bld.emit(Copy(l1, src.tile(r0, c0), (rows, cols), (cols, 1), (src.rows, src.cols)))
    l0 = bld.alloc(tier, rows * cols, f"{layer.name}.{tag}0")
    bld.emit(Copy(l0, l1, (rows * cols,), (1,), (1,)))
    bld.free(l1)
    return l0


def _broadcast_strides(shape: tuple[int, ...], to: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides that read a contiguous `shape` broadcast (numpy rules) to `to`."""
    padded = (1,) * (len(to) - len(shape)) + tuple(shape)
    strides = row_major_strides(padded)
    return tuple(0 if d == 1 and t != 1 else s for d, s, t in zip(padded, strides, to, strict=True))


@lowering("gemm")
def lower_gemm(ctx: LowerContext, layer: Layer) -> None:
    """Y = alpha * A' @ B' + beta * C with A' [M,K], B' [K,N] (transposes read by stride)."""
    a_name, b_name = layer.inputs[0], layer.inputs[1]
    c_name = layer.inputs[2] if len(layer.inputs) > 2 else ""
    trans_a = int(layer.attrs.get("trans_a", 0))
    trans_b = int(layer.attrs.get("trans_b", 0))
    alpha = float(layer.attrs.get("alpha", 1.0))
    beta = float(layer.attrs.get("beta", 1.0))
    a_shape, b_shape = ctx.shape(a_name), ctx.shape(b_name)
    m, k = (a_shape[1], a_shape[0]) if trans_a else a_shape
    n = b_shape[0] if trans_b else b_shape[1]
    a = MatOperand(ctx.ddr(a_name), *((1, m) if trans_a else (k, 1)))
    b = MatOperand(ctx.ddr(b_name), *((1, k) if trans_b else (n, 1)))
    out = MatOperand(ctx.ddr(layer.outputs[0]), n, 1)
    bias = None
    if c_name and beta != 0.0:
        c_strides = _broadcast_strides(ctx.shape(c_name), (m, n))
        bias = MatOperand(ctx.ddr(c_name), *c_strides)
    emit_matmul(ctx, layer, a, b, out, m, n, k, _scale_bias_epilogue(ctx, alpha, bias, beta))


def _scale_bias_epilogue(
    ctx: LowerContext, alpha: float, bias: MatOperand | None, beta: float
) -> Epilogue | None:
    """Epilogue computing alpha * acc + beta * C on a UB tile (None when it is the identity)."""
    if alpha == 1.0 and bias is None:
        return None
    bld = ctx.builder

    def epilogue(ub: BufRef, m0: int, n0: int, mt: int, nt: int) -> None:
        if alpha != 1.0:
            bld.emit(VUnary("muls", ub, ub, (mt * nt,), (1,), (1,), (alpha,)))
        if bias is None:
            return
        rows = 1 if bias.rows == 0 else mt
        cols = 1 if bias.cols == 0 else nt
        c = bld.alloc("UB", rows * cols, "bias")
        bld.emit(Copy(c, bias.tile(m0, n0), (rows, cols), (cols, 1), (bias.rows, bias.cols)))
        if beta != 1.0:
            bld.emit(VUnary("muls", c, c, (rows * cols,), (1,), (1,), (beta,)))
        b_strides = (cols if rows > 1 else 0, 1 if cols > 1 else 0)
        bld.emit(VBinary("add", ub, ub, c, (mt, nt), (nt, 1), (nt, 1), b_strides))
        bld.free(c)

    return epilogue


@lowering("matmul")
def lower_matmul(ctx: LowerContext, layer: Layer) -> None:
    """numpy matmul: batch dims broadcast, 1-D operands promoted then squeezed."""
    a_name, b_name = layer.inputs
    a_shape, b_shape = ctx.shape(a_name), ctx.shape(b_name)
    a2 = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b2 = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    m, k = a2[-2], a2[-1]
    n = b2[-1]
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    a_bstr = _broadcast_strides(a2[:-2], batch) if batch else ()
    b_bstr = _broadcast_strides(b2[:-2], batch) if batch else ()
    a_ref, b_ref, o_ref = ctx.ddr(a_name), ctx.ddr(b_name), ctx.ddr(layer.outputs[0])
    if batch and not any(b_bstr) and tuple(a2[:-2]) == batch:
        # one B for every batch (a weight): the batches of A are more rows of one product
        m, batch, a_bstr, b_bstr = m * math.prod(batch), (), (), ()
    for index in np.ndindex(*batch):
        a_off = sum(i * s for i, s in zip(index, a_bstr, strict=True)) * m * k
        b_off = sum(i * s for i, s in zip(index, b_bstr, strict=True)) * k * n
        o_off = int(np.ravel_multi_index(index, batch)) * m * n if batch else 0
        emit_matmul(
            ctx,
            layer,
            MatOperand(a_ref.at(a_off), k, 1),
            MatOperand(b_ref.at(b_off), n, 1),
            MatOperand(o_ref.at(o_off), n, 1),
            m,
            n,
            k,
        )
