"""Emitting a cube layer's chosen blocking (blocking.py): its L1 blocks loaded from DDR (or
read on chip), the L0 tiles inside each, the accumulators and the epilogue's stores."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from npucc.backend.lower.blocking import Blocking, MBlock, MTile
from npucc.backend.lower.context import LowerContext, apply_activation, l1_ones, split
from npucc.backend.lower.l0_tiles import acc_group
from npucc.ir.graph import Layer
from npucc.ir.isa import (
    REQUANT_BYTES,
    BufRef,
    Copy,
    DdrRef,
    Mmad,
    Requant,
    VBinary,
    VReduce,
    VUnary,
)


@dataclass(frozen=True, slots=True)
class MatOperand:
    """A DDR matrix as a strided view: element (i, j) at ref.off + i*rows + j*cols."""

    ref: DdrRef
    rows: int  # element stride between rows
    cols: int  # element stride between columns

    def tile(self, i: int, j: int) -> DdrRef:
        """Reference to element (i, j)."""
        return self.ref.at(i * self.rows + j * self.cols)


@dataclass(slots=True, unsafe_hash=True)
class L1Block:
    """A block staged in L1 at `ref`: `rows` x `cols` from (r0, c0), row-major (an X block of
    a conv: K from r0, `meta` its window's (ih, iw, pt, pl))."""

    ref: BufRef
    r0: int
    c0: int
    rows: int
    cols: int
    meta: tuple[int, ...] = ()
    # NOTE: a view of a resident tensor (not owned) is read in place and never freed with the
    # block; `strides` are its (row, column) element strides (empty: row-major, cols wide)
    owned: bool = True
    strides: tuple[int, int] | tuple[()] = ()

    def at(self, r: int, c: int) -> BufRef:
        """Element (r, c) of the block (absolute row and column)."""
        rs, cs = self.strides or (self.cols, 1)
        return self.ref.at((r - self.r0) * rs + (c - self.c0) * cs)


def release(ctx: LowerContext, block: L1Block) -> None:
    """Free an L1 block the lowering loaded (a resident tensor's view stays)."""
    if block.owned:
        ctx.builder.free(block.ref)


@dataclass(slots=True, unsafe_hash=True)
class OutView:
    """Where an output tile goes: DDR offset, pattern, DDR strides and UB strides."""

    off: int
    dims: tuple[int, ...]
    ddr_strides: tuple[int, ...]
    ub_strides: tuple[int, ...]


class CubeOps(Protocol):
    """What a cube lowering supplies to the blocked loop nest (`emit_blocked`)."""

    def load_x(self, block: MBlock, k0: int, kb: int) -> L1Block:
        """Load X[block, k0:k0+kb] from DDR into an L1 block."""

    def stage_a(self, x: L1Block, tile: MTile, k0: int, kt: int) -> BufRef:
        """Move X[tile, k0:k0+kt] from its L1 block into L0A (row-major m x kt)."""

    def out_view(self, tile: MTile, n0: int, nt: int) -> OutView:
        """Where output tile (tile, n0:n0+nt) goes in the output tensor."""

    def extra(self, ub: BufRef, tile: MTile, n0: int, nt: int) -> None:
        """The lowering's own epilogue step on a UB tile before residual and activation."""


@dataclass(frozen=True, slots=True)
class CubeIo:
    """The generic operands of a blocked product: W as a K x N view, the per-N bias, the
    output and the residual tensor (fuse-residual; its tile's view is the output's)."""

    w: MatOperand
    bias: DdrRef | None
    out: DdrRef
    residual: DdrRef | None
    # int8: (zero point, lo, hi) of the `requant` out of L0C; `bias` is then the requant
    # records (REQUANT_BYTES per column)
    requant: tuple[int, int, int] | None = None
    # a global average pool in the epilogue: each output tile is all `pool` pixels of an image
    # (N-major output: its offset is the image's and channel's times `pool`), stored as its
    # columns' means (0: the tile is stored)
    pool: int = 0
    # a max pool's column pass in the epilogue, (kw, sw, dw, pw): each output tile is whole
    # rows (NCHW output), stored as its rows' max over windows of kw columns (dilation dw) at
    # stride sw, pw of them (the output tensor holds rows of pw columns)
    cols: tuple[int, ...] = ()

    @property
    def bias_elems(self) -> int:
        """Elements of `bias` per column."""
        return 1 if self.requant is None else REQUANT_BYTES


def emit_blocked(
    ctx: LowerContext,
    layer: Layer,
    plan: Blocking,
    blocks: list[MBlock],
    ops: CubeOps,
    io: CubeIo,
    k: int,
    n: int,
) -> None:
    """Emit one product by `plan`: each unit (a stationary block and its chunk of the stream,
    or an `os` output block) is an independent tile of the layer (`ctx.next_tile`)."""
    nest = _Nest(ctx, layer, plan, ops, io, k)
    n_blocks = split(n, plan.nb)
    if plan.order == "ws":
        for n0, nb in n_blocks:
            for chunk in _chunks(blocks, plan.chunks):
                ctx.next_tile()
                w, bias = nest.load_w(n0, nb, 0, k), nest.load_bias(n0, nb)
                for block in chunk:
                    x = ops.load_x(block, 0, k)
                    nest.full_k(block, x, w, bias)
                    release(ctx, x)
                nest.free(w, bias)
    elif plan.order == "is":
        for block in blocks:
            for chunk in _chunks(n_blocks, plan.chunks):
                ctx.next_tile()
                x = ops.load_x(block, 0, k)
                for n0, nb in chunk:
                    if plan.kb < k:
                        nest.output_block(block, n0, nb, x)
                        continue
                    w, bias = nest.load_w(n0, nb, 0, k), nest.load_bias(n0, nb)
                    nest.full_k(block, x, w, bias)
                    nest.free(w, bias)
                release(ctx, x)
    else:
        for block in blocks:
            for n0, nb in n_blocks:
                ctx.next_tile()
                nest.output_block(block, n0, nb)


def emit_staged(
    ctx: LowerContext,
    layer: Layer,
    plan: Blocking,
    block: MBlock,
    ops: CubeOps,
    io: CubeIo,
    k: int,
    staged: tuple[L1Block, L1Block, L1Block | None],
) -> None:
    """The `ws` product of one M block whose X, W (all of K and N) and bias blocks the caller
    has staged in L1 (`staged`: views of buffers it frees itself)."""
    _Nest(ctx, layer, plan, ops, io, k).full_k(block, *staged)


def _chunks(items: list, count: int) -> list[list]:
    """`items` in `count` contiguous chunks of near-equal length (none empty)."""
    size = -(-len(items) // min(count, len(items)))
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass(slots=True)
class _Nest:
    """The inner loops of `emit_blocked`: L0 tiles inside L1 blocks, and the epilogue."""

    ctx: LowerContext
    layer: Layer
    plan: Blocking
    ops: CubeOps
    io: CubeIo
    k: int
    # NOTE: the forms (`TileBuilder.form`) of the L1 -> L0B copies and of the mmads, by the
    # fields of their form keys that vary in a nest (a form is a function of its key: the
    # copies' B tiles in L0B; the mmads' accumulators in L0C, B tiles in L0B and A tiles in
    # `stage_a`'s tier): each worked out once, not per instruction
    b_forms: dict[tuple[Any, ...], tuple[str, str, int]] = field(default_factory=dict)
    mmad_forms: dict[tuple[Any, ...], tuple[str, str, int]] = field(default_factory=dict)

    def load_w(self, n0: int, nb: int, k0: int, kb: int) -> L1Block:
        """W[k0:k0+kb, n0:n0+nb] into an L1 block (row-major); of W held in L1 (a cascaded
        layer's, a copy of its DDR tensor: npucc.backend.lower.cascade), a view of it."""
        bld, w = self.ctx.builder, self.io.w
        held = bld.resident(w.ref.key)
        if held is not None:
            view = held.at(w.tile(k0, n0).off)
            return L1Block(view, k0, n0, kb, nb, owned=False, strides=(w.rows, w.cols))
        ref = bld.alloc("L1", kb * nb, f"{self.layer.name}.w")
        bld.emit(Copy(ref, w.tile(k0, n0), (kb, nb), (nb, 1), (w.rows, w.cols)))
        return L1Block(ref, k0, n0, kb, nb)

    def load_bias(self, n0: int, nb: int) -> L1Block | None:
        """The bias of columns n0:n0+nb into L1 (None without a bias)."""
        if self.io.bias is None:
            return None
        bld = self.ctx.builder
        per = self.io.bias_elems
        held = bld.resident(self.io.bias.key)
        if held is not None:
            return L1Block(held.at(self.io.bias.off + n0 * per), 0, n0, 1, nb, owned=False)
        b = bld.alloc("L1", nb * per, f"{self.layer.name}.bias")
        bld.emit(Copy(b, self.io.bias.at(n0 * per), (nb * per,), (1,), (1,)))
        return L1Block(b, 0, n0, 1, nb)

    def free(self, w: L1Block, bias: L1Block | None) -> None:
        """Free a W block and its bias (views of held ones stay)."""
        release(self.ctx, w)
        if bias is not None:
            release(self.ctx, bias)

    def stage_b(self, w: L1Block, k0: int, kt: int, n0: int, nt: int) -> BufRef:
        """Move W[k0:k0+kt, n0:n0+nt] from its L1 block into L0B (row-major kt x nt)."""
        bld = self.ctx.builder
        b0 = bld.alloc("L0B", kt * nt, f"{self.layer.name}.b0")
        strides = w.strides or (w.cols, 1)
        copy = Copy(b0, w.at(k0, n0), (kt, nt), (nt, 1), strides)
        key = (w.ref.tier, kt, nt, strides)
        form = self.b_forms.get(key)
        if form is None:
            form = self.b_forms[key] = bld.form(copy)
        bld.emit_local(copy, form)
        return b0

    def hold_b(self, w: L1Block, tiles: int) -> dict[tuple[int, int], BufRef]:
        """Every L0B tile of W block `w`, staged once for the `tiles` M tiles that use it when
        they all fit the L0B share (else none: `products` stages each per M tile)."""
        t = self.plan.tiles
        pieces = [
            (k0, kt, n0, nt) for k0, kt in split(w.rows, t.k) for n0, nt in split(w.cols, t.n)
        ]
        if tiles < 2 or not self.ctx.share_fits("L0B", tuple(kt * nt for _, kt, _, nt in pieces)):
            return {}
        return {
            (w.r0 + k0, w.c0 + n0): self.stage_b(w, w.r0 + k0, kt, w.c0 + n0, nt)
            for k0, kt, n0, nt in pieces
        }

    @property
    def cube_bias(self) -> bool:
        """Whether the accumulators start as the bias (a float layer's; `bias_into`)."""
        return self.plan.cube_bias

    def ones(self, block: MBlock) -> BufRef | None:
        """With `cube_bias`, an L1 vector of 1.0 as long as `block`'s longest tile (filled in
        UB); else None."""
        if not self.cube_bias:
            return None
        m = max(tile.m for tile in block.tiles)
        return l1_ones(self.ctx.builder, m, f"{self.layer.name}.ones")

    def bias_into(
        self,
        accs: list[BufRef],
        tile: MTile,
        cols: list[tuple[int, int]],
        bias: L1Block | None,
        ones: BufRef | None,
    ) -> None:
        """accs[j] += ones[tile.m x 1] @ bias[1 x cols[j]]: the bias added by the cube after
        the products (a k = 1 mmad instead of a vector add per output tile; last, so that only
        the tile's epilogue waits for the ones)."""
        if ones is None:
            return
        assert bias is not None
        bld, m = self.ctx.builder, tile.m
        a0 = bld.alloc("L0A", m, f"{self.layer.name}.a1")
        bld.emit(Copy(a0, ones, (m,), (1,), (1,)))
        for acc, (n0, nt) in zip(accs, cols, strict=True):
            b0 = bld.alloc("L0B", nt, f"{self.layer.name}.b1")
            bld.emit(Copy(b0, bias.ref.at(n0 - bias.c0), (nt,), (1,), (1,)))
            bld.emit(Mmad(acc, a0, b0, m, nt, 1, 1))
            bld.free(b0)
        bld.free(a0)

    def products(
        self,
        tile: MTile,
        x: L1Block,
        w: L1Block,
        cols: list[tuple[int, int]],
        accs: list[BufRef],
        held: dict[tuple[int, int], BufRef],
    ) -> None:
        """accs[j] (+)= X[tile, W's K block] @ W[K block, cols[j]]: per L0 K tile, the A tile
        staged once for all the columns, one B tile (`held`'s, or staged here) and one mmad
        per column."""
        bld = self.ctx.builder
        emit, free, m, forms = bld.emit_local, bld.free, tile.m, self.mmad_forms
        stage_a, stage_b = self.ops.stage_a, self.stage_b
        for k0, kt in split(w.rows, self.plan.tiles.k):
            k_abs = w.r0 + k0
            a0 = stage_a(x, tile, k_abs, kt)
            acc_in = 0 if k_abs == 0 else 1
            for acc, (n0, nt) in zip(accs, cols, strict=True):
                kept = held.get((k_abs, n0)) if held else None
                b0 = kept if kept is not None else stage_b(w, k_abs, kt, n0, nt)
                mmad = Mmad(acc, a0, b0, m, nt, kt, acc_in)
                key = (a0.tier, m, nt, kt, acc_in)
                form = forms.get(key)
                if form is None:
                    form = forms[key] = bld.form(mmad)
                emit(mmad, form)
                if kept is None:
                    free(b0)
            free(a0)

    def accs(self, tile: MTile, cols: list[tuple[int, int]]) -> list[BufRef]:
        """One L0C accumulator per column range of `tile`."""
        name = f"{self.layer.name}.acc"
        return [self.ctx.builder.alloc("L0C", tile.m * nt, name) for _, nt in cols]

    def full_k(self, block: MBlock, x: L1Block, w: L1Block, bias: L1Block | None) -> None:
        """Every output tile of (block, W block): all of K accumulated, then its epilogue; the
        W block's L0 tiles in groups whose accumulators fit L0C together."""
        t = self.plan.tiles
        cols = [(w.c0 + n0, nt) for n0, nt in split(w.cols, t.n)]
        group = acc_group(self.ctx, t, len(cols))
        held = self.hold_b(w, len(block.tiles))
        ones = self.ones(block)
        for tile in block.tiles:
            for g0 in range(0, len(cols), group):
                part = cols[g0 : g0 + group]
                accs = self.accs(tile, part)
                res = [self.residual(tile, n0, nt) for n0, nt in part]
                self.products(tile, x, w, part, accs, held)
                self.bias_into(accs, tile, part, bias, ones)
                for acc, (n0, nt), r in zip(accs, part, res, strict=True):
                    self.epilogue(acc, tile, n0, nt, bias, r)
        for b0 in held.values():
            self.ctx.builder.free(b0)
        if ones is not None:
            self.ctx.builder.free(ones)

    def output_block(self, block: MBlock, n0: int, nb: int, held_x: L1Block | None = None) -> None:
        """An output block accumulated over K blocks: per K block, W (and X, unless `held_x`
        holds all of K) into L1 and every tile's mmads; then the epilogues."""
        bld, t = self.ctx.builder, self.plan.tiles
        cols = [(n0 + c0, nt) for c0, nt in split(nb, t.n)]
        accs = [self.accs(tile, cols) for tile in block.tiles]
        # NOTE: only the epilogues read the bias. Where two W blocks take more than the L1
        # share, it is loaded with the last K block: loaded first, DLR may place it between
        # them and split L1 so that the W blocks lose their ping-pong (ResNet-50's stage 4
        # 3x3 convs, 295 KB W blocks beside a 2 KB bias: 89 K cycles); elsewhere it is loaded
        # first (late, its DMA waited in MobileNet v2's epilogues: 5.5 K cycles)
        late = not self.ctx.share_fits("L1", (self.plan.kb * nb,) * 2)
        bias = None if late else self.load_bias(n0, nb)
        pieces = split(self.k, self.plan.kb)
        xk = self.plan.x_kb
        x = held_x
        for k0, kb in pieces:
            if held_x is None and k0 % xk == 0:  # X's K block: one or more of W's
                x = self.ops.load_x(block, k0, min(xk, self.k - k0))
            assert x is not None
            w = self.load_w(n0, nb, k0, kb)
            if late and k0 == pieces[-1][0]:
                bias = self.load_bias(n0, nb)
            held = self.hold_b(w, len(block.tiles))
            for tile, tile_accs in zip(block.tiles, accs, strict=True):
                self.products(tile, x, w, cols, tile_accs, held)
            for b0 in held.values():
                bld.free(b0)
            if held_x is None and ((k0 + kb) % xk == 0 or k0 + kb == self.k):
                release(self.ctx, x)
            release(self.ctx, w)
        ones = self.ones(block)
        for tile, tile_accs in zip(block.tiles, accs, strict=True):
            self.bias_into(tile_accs, tile, cols, bias, ones)
            for acc, (c0, nt) in zip(tile_accs, cols, strict=True):
                self.epilogue(acc, tile, c0, nt, bias)
        if ones is not None:
            bld.free(ones)
        if bias is not None:
            release(self.ctx, bias)

    def requant(
        self, ub: BufRef, acc: BufRef, tile: MTile, n0: int, nt: int, bias: L1Block | None
    ) -> None:
        """int8: the accumulators requantized into UB by their columns' records."""
        assert bias is not None and self.io.requant is not None  # int8 layers have records
        bld, per = self.ctx.builder, REQUANT_BYTES
        rec = bld.alloc("UB", nt * per, "requant")
        bld.emit(Copy(rec, bias.ref.at((n0 - bias.c0) * per), (nt * per,), (1,), (1,)))
        bld.emit(Requant(ub, acc, rec, tile.m, nt, *self.io.requant))
        bld.free(rec)
        bld.free(acc)

    def residual(self, tile: MTile, n0: int, nt: int) -> BufRef | None:
        """The residual tile of (tile, n0:n0+nt) loaded into UB (None without a residual).
        NOTE: loaded before the tile's products, so its DMA overlaps them (the epilogue only
        adds it)."""
        if self.io.residual is None:
            return None
        view = self.ops.out_view(tile, n0, nt)
        r = self.ctx.builder.alloc("UB", tile.m * nt, f"{self.layer.name}.res")
        src = self.io.residual.at(view.off)
        self.ctx.builder.emit(Copy(r, src, view.dims, view.ub_strides, view.ddr_strides))
        return r

    def epilogue(
        self,
        acc: BufRef,
        tile: MTile,
        n0: int,
        nt: int,
        bias: L1Block | None,
        res: BufRef | None = None,
    ) -> None:
        """L0C -> UB (int8: requantized with the bias), the lowering's extra step, + residual
        (`res`, preloaded, or loaded here), activation, store (a float bias is already in the
        accumulator: `bias_into`)."""
        bld, layer = self.ctx.builder, self.layer
        m = tile.m
        ub = bld.alloc("UB", m * nt, f"{layer.name}.out")
        if self.io.requant is not None:
            self.requant(ub, acc, tile, n0, nt, bias)
        else:
            bld.emit_local(Copy(ub, acc, (m * nt,), (1,), (1,)))  # NOTE: both this core's
            bld.free(acc)
        if bias is not None and self.io.requant is None and not self.cube_bias:
            b = bld.alloc("UB", nt, "bias")
            bld.emit(Copy(b, bias.ref.at(n0 - bias.c0), (nt,), (1,), (1,)))
            bld.emit(VBinary("add", ub, ub, b, (m, nt), (nt, 1), (nt, 1), (0, 1)))
            bld.free(b)
        self.ops.extra(ub, tile, n0, nt)
        view = self.ops.out_view(tile, n0, nt)
        if self.io.residual is not None:
            r = res if res is not None else self.residual(tile, n0, nt)
            assert r is not None
            q = tuple(layer.attrs.get("res_q", ()))  # int8: the fused add's requantization
            bld.emit_local(VBinary("add", ub, ub, r, (m * nt,), (1,), (1,), (1,), q))
            bld.free(r)
        apply_activation(self.ctx, ub, m * nt, layer.attrs)
        if self.io.pool:  # a whole image's tile: its means at the view's offset / pixels
            ub = self.pool(ub, m, nt)
            view = OutView(view.off // m, (nt,), (1,), (1,))
        if self.io.cols:  # whole rows of ow columns, ow the view's row stride: pw of them
            ub, view = self.pool_cols(ub, view)
        dst = self.io.out.at(view.off)
        bld.emit(Copy(dst, ub, view.dims, view.ddr_strides, view.ub_strides))
        bld.free(ub)

    def pool_cols(self, ub: BufRef, view: OutView) -> tuple[BufRef, OutView]:
        """The max over windows of columns of the tile's rows (`CubeIo.cols`), in a new UB
        tile (`ub` freed), and where it goes: `view` with rows of pw columns."""
        bld, (kw, sw, dw, pw) = self.ctx.builder, self.io.cols
        nt, rows, ow = view.dims
        pooled = bld.alloc("UB", rows * pw * nt, f"{self.layer.name}.cols")
        dims, dense, wide = (rows, pw, nt), (pw * nt, nt, 1), (ow * nt, sw * nt, 1)
        bld.emit(VBinary("max", pooled, ub, ub.at(dw * nt), dims, dense, wide, wide))
        for j in range(2, kw):
            bld.emit(VBinary("max", pooled, pooled, ub.at(j * dw * nt), dims, dense, dense, wide))
        bld.free(ub)
        plane = view.ddr_strides[0] // ow * pw
        out = OutView(view.off // ow * pw, (nt, rows, pw), (plane, pw, 1), (1, pw * nt, nt))
        return pooled, out

    def pool(self, ub: BufRef, m: int, nt: int) -> BufRef:
        """The means over the tile's `m` pixels of its `nt` columns (UB, pixel-major), in a
        new UB vector (`ub` freed)."""
        bld = self.ctx.builder
        mean = bld.alloc("UB", nt, f"{self.layer.name}.pool")
        bld.emit(VReduce("sum", mean, ub, (nt, m), (1,), (1, nt), 1))
        bld.emit(VUnary("muls", mean, mean, (nt,), (1,), (1,), (1.0 / m,)))
        bld.free(ub)
        return mean
