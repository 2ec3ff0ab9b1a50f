"""Cube lowerings of gemm and matmul: tiled A@B through L1 -> L0A/L0B -> L0C -> UB -> DDR."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npucc.backend.lower.block_emit import (
    CubeIo,
    L1Block,
    MatOperand,
    OutView,
    emit_blocked,
)
from npucc.backend.lower.blocking import (
    Blocking,
    CubeShape,
    MBlock,
    MTile,
    choose_blocking,
)
from npucc.backend.lower.context import (
    LowerContext,
    activation_ops,
    activation_temps,
    lowering,
    quant_epilogue,
    split,
)
from npucc.backend.lower.l0_tiles import MatTiles, fitting_tiles
from npucc.ir.graph import Layer, row_major_strides
from npucc.ir.isa import REQUANT_BYTES, BufRef, Copy, DdrRef, VBinary, VUnary


def plan_matmul(
    ctx: LowerContext, layer: Layer, dims: tuple[int, int, int], instances: int, vector_ops: int
) -> tuple[Blocking, list[MBlock]]:
    """The blocking of `instances` products A[m,k] @ B[k,n] (`vector_ops` per output tile; an
    int8 layer's requant records staged like a bias)."""
    m, n, k = dims
    x_onchip = ctx.onchip(layer.inputs[0]) is not None
    l1: Callable[[int, int, int], tuple[int, ...]] = (
        (lambda mt, nt, kt: (kt * nt,)) if x_onchip else (lambda mt, nt, kt: (mt * kt, kt * nt))
    )
    tiles = fitting_tiles(ctx, layer, dims, l1, 2 + activation_temps(layer.attrs))
    residual = _residual(layer)
    res_onchip = bool(residual) and ctx.onchip(residual) is not None
    out_onchip = ctx.onchip(layer.outputs[0]) is not None
    ops = vector_ops + int(bool(residual))
    quant = quant_epilogue(layer) is not None
    per = REQUANT_BYTES if quant else 1
    onchip = (x_onchip, out_onchip, res_onchip)
    a, b = layer.inputs[:2]
    noc = (ctx.on_noc(a), ctx.on_noc(b), ctx.on_noc(layer.outputs[0]), ctx.on_noc(residual))
    shape = CubeShape(n, k, 1, instances, quant, bool(residual), ops, per, *onchip, noc=noc)

    def blocks(t: MatTiles, count: int) -> list[MBlock]:
        return [
            MBlock(tuple(MTile(m0 + i, mt) for i, mt in split(mb, t.m)), mb)
            for m0, mb in split(m, count * t.m)
        ]

    found = choose_blocking(ctx, shape, tiles, blocks, m)
    # NOTE: `noc` reaches what the lowering emits only through the blocking
    ctx.decided(("matmul", found[0], tuple(found[1])))
    return found


def _residual(layer: Layer) -> str:
    """The residual operand of a gemm (fuse-residual, inputs[3]; "" when absent)."""
    return layer.inputs[3] if layer.op == "gemm" and len(layer.inputs) > 3 else ""


Epilogue = Callable[[BufRef, int, int, int, int], None]


def emit_matmul(
    ctx: LowerContext,
    layer: Layer,
    blocking: tuple[Blocking, list[MBlock]],
    a: MatOperand,
    b: MatOperand,
    out: MatOperand,
    kn: tuple[int, int],
    epilogue: Epilogue | None = None,
    residual: DdrRef | None = None,
    records: DdrRef | None = None,
) -> None:
    """Emit out = A[m,k] @ B[k,n] by `blocking` (`kn`: k, n); `epilogue(ub, m0, n0, mt, nt)`
    edits UB tiles before the residual (its tile as the output's, from `residual`) and the
    activation; an int8 layer requantizes its accumulators by the `records`."""
    plan, blocks = blocking
    k, n = kn
    io = CubeIo(b, records, out.ref, residual, quant_epilogue(layer))
    emit_blocked(ctx, layer, plan, blocks, _MatOps(ctx, layer, a, out, epilogue), io, k, n)


@dataclass(frozen=True, slots=True)
class _MatOps:
    """The matmul's side of the blocked loop nest: row blocks of A, row-major output tiles."""

    ctx: LowerContext
    layer: Layer
    a: MatOperand
    out: MatOperand
    epilogue: Epilogue | None

    def load_x(self, block: MBlock, k0: int, kb: int) -> L1Block:
        """A[block rows, k0:k0+kb] into L1 (row-major), or a view of A when it is resident."""
        bld, m0, mb = self.ctx.builder, block.tiles[0].m0, block.window
        a = self.a
        whole = bld.resident(a.ref.key)
        if whole is not None:
            view = whole.at(a.tile(m0, k0).off)
            return L1Block(view, m0, k0, mb, kb, owned=False, strides=(a.rows, a.cols))
        x = bld.alloc("L1", mb * kb, f"{self.layer.name}.a")
        bld.emit(Copy(x, self.a.tile(m0, k0), (mb, kb), (kb, 1), (self.a.rows, self.a.cols)))
        return L1Block(x, m0, k0, mb, kb)

    def stage_a(self, x: L1Block, tile: MTile, k0: int, kt: int) -> BufRef:
        """A[tile rows, k0:k0+kt] from its L1 block into L0A."""
        bld = self.ctx.builder
        a0 = bld.alloc("L0A", tile.m * kt, f"{self.layer.name}.a0")
        bld.emit_local(Copy(a0, x.at(tile.m0, k0), (tile.m, kt), (kt, 1), x.strides or (x.cols, 1)))
        return a0

    def out_view(self, tile: MTile, n0: int, nt: int) -> OutView:
        """Output tile (tile rows, n0:n0+nt)."""
        o = self.out
        return OutView(tile.m0 * o.rows + n0 * o.cols, (tile.m, nt), (o.rows, o.cols), (nt, 1))

    def extra(self, ub: BufRef, tile: MTile, n0: int, nt: int) -> None:
        """The gemm's scale and C term."""
        if self.epilogue is not None:
            self.epilogue(ub, tile.m0, n0, tile.m, nt)


def _broadcast_strides(shape: tuple[int, ...], to: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides that read a contiguous `shape` broadcast (numpy rules) to `to`."""
    padded = (1,) * (len(to) - len(shape)) + tuple(shape)
    strides = row_major_strides(padded)
    return tuple(0 if d == 1 and t != 1 else s for d, s, t in zip(padded, strides, to, strict=True))


@lowering("gemm", onchip=(0, 2, 3))
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
    if quant_epilogue(layer) is not None:  # int8: C is the requant records
        blocking = plan_matmul(ctx, layer, (m, n, k), 1, 0)
        emit_matmul(ctx, layer, blocking, a, b, out, (k, n), records=ctx.ddr(c_name))
        return
    bias = None
    if c_name and beta != 0.0:
        c_strides = _broadcast_strides(ctx.shape(c_name), (m, n))
        bias = MatOperand(ctx.ddr(c_name), *c_strides)
    epilogue = _scale_bias_epilogue(ctx, alpha, bias, beta)
    ops = (alpha != 1.0) + 2 * (bias is not None) + activation_ops(layer.attrs)
    blocking = plan_matmul(ctx, layer, (m, n, k), 1, ops)
    res = ctx.ddr(_residual(layer)) if _residual(layer) else None
    emit_matmul(ctx, layer, blocking, a, b, out, (k, n), epilogue, res)


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


@lowering("matmul", onchip=(0,))
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
    blocking = plan_matmul(ctx, layer, (m, n, k), math.prod(batch), activation_ops(layer.attrs))
    for index in np.ndindex(*batch):
        a_off = sum(i * s for i, s in zip(index, a_bstr, strict=True)) * m * k
        b_off = sum(i * s for i, s in zip(index, b_bstr, strict=True)) * k * n
        o_off = int(np.ravel_multi_index(index, batch)) * m * n if batch else 0
        emit_matmul(
            ctx,
            layer,
            blocking,
            MatOperand(a_ref.at(a_off), k, 1),
            MatOperand(b_ref.at(b_off), n, 1),
            MatOperand(o_ref.at(o_off), n, 1),
            (k, n),
        )
