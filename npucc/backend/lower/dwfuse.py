"""A 1x1 conv computed inside the depthwise conv that alone reads it: its output never stored.

A depthwise conv's vector lowering (depthwise.py) loads each band's padded input window into UB
and runs its taps there. When that input is the output of a float 1x1 conv which nothing else
reads (`conv_geom.expand_depthwise`: MobileNet's expand convs), the window can instead be
computed in place: per window, the 1x1 conv's input rows (L1, or DDR -> L1) img2col'd into
L0A, its weights for the window's channels into L0B, one mmad per L0 tile of whole rows and
its bias by a k = 1 mmad (ones x bias row: the cube idles beside the taps, the vector unit does
not), the accumulators copied L0C -> UB straight into the window's channel-major rows; then
its activation over those rows, zeros on the window's border. The 1x1 conv's output is never
stored to L1 or DDR, nor loaded back (the UB -> L1 stores on the vector unit and the L1 -> UB
window loads on MTE1 of the unfused pair). The depthwise conv then runs wholly on the vector
unit (no cube share), in tiles of whole rows of every group or of at least n0 channels (the
mmads' N; n0 when its vector tiles take fewer), when a row of the window fits the L0 shares; chosen
when a trial of the pair runs faster so than each layer alone (conv.py, `_fuses`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from npucc.backend.lower.context import (
    TILE_SHARE,
    LowerContext,
    cube_bias,
    l1_ones,
    largest,
    split,
)
from npucc.backend.lower.conv_geom import ConvGeom, conv_geometry, expand_depthwise
from npucc.backend.lower.depthwise import (
    Consts,
    Item,
    Taps,
    Window,
    bias_of,
    consts_of,
    epilogue,
    fits_stage,
    pipeline,
    stage_consts,
    vector_taps,
    vector_tiles,
    wide_tiles,
)
from npucc.backend.lower.layout import coalesce
from npucc.errors import NpuccError
from npucc.ir.graph import Layer
from npucc.ir.isa import BufRef, Copy, DdrRef, Img2Col, Mmad, VFill, VUnary

Block = tuple[int, int, int]  # (image, first group, groups)
WEIGHT_SHARE = 8  # the 1x1 conv's weights held in L1 when they fit this share of it


def fused_depthwise(ctx: LowerContext, layer: Layer) -> Layer | None:
    """The depthwise conv that computes 1x1 conv `layer`'s output in its windows, or None."""
    d = expand_depthwise(ctx.graph, layer, ctx.target)
    if d is None:
        return None
    g = conv_geometry(ctx, d)
    try:
        groups, rows = fused_tiles(ctx, d, g)
    except NpuccError:
        return None
    cin = ctx.shape(layer.inputs[0])[1]
    l0a, l0c = (ctx.capacity(t) // TILE_SHARE for t in ("L0A", "L0C"))
    fits = g.w * cin <= l0a and g.w * groups <= l0c and cin * groups <= ctx.capacity("L0B") // 2
    return d if rows and g.n == 1 and fits else None


# an L0 tile of the cube share's window rows holds at most this share of L0A (fewer, longer
# mmads: each pays the cube's latency). NOTE: measured on MobileNet v2 (predicted makespan): 1/4
# 844,327, 1/2 (TILE_SHARE) 819,618, 2/3 811,911, all of it 824,391
CUBE_L0A = (2, 3)
CUBE_SHARES = (0.5, 0.75, 0.875, 1.0)  # shares of a fused depthwise conv on the cube, tried


def cube_shares(ctx: LowerContext, layer: Layer) -> list[int]:
    """The channels of fused depthwise conv `layer` its trials put on the cube (`_CubeTaps`):
    CUBE_SHARES of them in multiples of n0; none when strided."""
    g, n0 = conv_geometry(ctx, layer), ctx.target.cube.n0
    if g.sh != 1 or g.sw != 1:
        return []
    shares = {int(g.group * f) // n0 * n0 for f in CUBE_SHARES}
    return sorted(c for c in shares if 0 < c <= g.group)


def fused_tiles(ctx: LowerContext, layer: Layer, g: ConvGeom) -> tuple[int, int]:
    """(groups, rows) per tile of depthwise `layer` fused: its vector tiles when they are whole
    rows of every group or of at least n0 (the mmads' N), else whole rows of n0 groups (rows
    0: not even one row fits)."""
    groups, rows, cols = vector_tiles(ctx, layer, g)
    wide = min(g.group, ctx.target.cube.n0)
    if cols == g.ow and groups >= wide:
        return groups, rows
    return wide, wide_tiles(ctx, layer, g, wide)


def fused_reads(ctx: LowerContext, expand: Layer, layer: Layer) -> Hashable:
    """What `lower_fused` reads of L1's room, the one input of a lowering that the L1
    reservation (the resident tensors beside the pair) changes: whether the depthwise conv's
    constants fit `stage_consts`' share and the 1x1 conv's weights `_Expand`'s.

    NOTE: it reads the room nowhere else (tests/lower/test_dwfuse checks its reads of
    `LowerContext.room`): a trial of the pair gives the same figures under two reservations
    that give the same reads (conv.py, `_fuses`)."""
    bias = bias_of(layer)
    return fits_stage(ctx, layer, bias), _holds_weights(ctx, expand, conv_geometry(ctx, layer))


def _holds_weights(ctx: LowerContext, expand: Layer, g: ConvGeom) -> bool:
    """Whether the 1x1 conv's weights fit 1/WEIGHT_SHARE of L1 (`_Expand` holds them there)."""
    return g.group * ctx.shape(expand.inputs[0])[1] <= ctx.capacity("L1") // WEIGHT_SHARE


def lower_fused(ctx: LowerContext, expand: Layer, layer: Layer, cube: int = 0) -> None:
    """Depthwise conv `layer`, its windows computed by 1x1 conv `expand`: its last `cube`
    channels on the cube (`_CubeTaps`, when the layer's weights are staged in L1 and its tiles
    fit), the others on the vector unit."""
    g = conv_geometry(ctx, layer)
    groups_t, rows_t = fused_tiles(ctx, layer, g)
    bias = bias_of(layer)
    staged = stage_consts(ctx, layer, bias)
    share = _CubeTaps.make(ctx, layer, g, (cube, groups_t, rows_t))
    first = g.group - (0 if share is None else cube)
    blocks = [(0, g0, gl) for g0, gl in split(first, groups_t)]
    if share is not None:
        cubes = [(0, first + g0, gl) for g0, gl in split(cube, share.groups)]
        blocks = _spread(blocks, cubes)
    items = [(b, (r0, nr, 0, g.ow)) for r0, nr in split(g.oh, rows_t) for b in blocks]
    src = _Expand(ctx, expand, g)

    def load(item: Item, consts: Consts) -> Window:
        consts_of(ctx, layer, g, item[0], bias, consts)
        win = src.window(layer, item)
        if share is not None and item[0][1] >= first:
            return share.store(item, win), []
        return win, []

    taps = None if share is None else share.taps(first)
    pipeline(ctx, layer, g, items, bias, load, taps=taps)
    if share is not None:
        share.close()
    for key in staged:
        ctx.builder.release(key)
    src.close()


def _spread(blocks: list[Block], cubes: list[Block]) -> list[Block]:
    """`blocks` with `cubes` spread evenly among them, none first (a cube item's products
    then overlap a vector item's taps on the in-order pipes)."""
    out: list[Block] = []
    for i, b in enumerate(blocks):
        out.append(b)
        lo, hi = i * len(cubes) // len(blocks), (i + 1) * len(cubes) // len(blocks)
        out += cubes[lo:hi]
    return out if blocks else cubes


class _Expand:
    """The 1x1 conv's operands across the depthwise's windows: its weights (L1, once, when a
    share of L1 holds them), its bias and a vector of ones as long as an L0 tile (L1, once) and
    the input rows of the current window."""

    def __init__(self, ctx: LowerContext, expand: Layer, g: ConvGeom) -> None:
        self.ctx, self.expand, self.g = ctx, expand, g
        bld = ctx.builder
        self.cin = ctx.shape(expand.inputs[0])[1]
        self.owned: list[BufRef] = []
        w = ctx.ddr(expand.inputs[1])
        whole = bld.resident(w.key)
        elems = g.group * self.cin
        self.w: BufRef | DdrRef = w
        if whole is not None:
            self.w = whole.at(w.off)
        elif _holds_weights(ctx, expand, g):
            self.w = bld.alloc("L1", elems, f"{expand.name}.w")
            bld.emit(Copy(self.w, w, (elems,), (1,), (1,)))
            self.owned.append(self.w)
        self.bias: BufRef | None = None
        self.ones: BufRef | None = None
        if len(expand.inputs) > 2 and expand.inputs[2]:
            b = ctx.ddr(expand.inputs[2])
            held = bld.resident(b.key)
            if held is not None:
                self.bias = held.at(b.off)
            else:
                self.bias = bld.alloc("L1", g.group, f"{expand.name}.bias")
                bld.emit(Copy(self.bias, b, (g.group,), (1,), (1,)))
                self.owned.append(self.bias)
            m = g.w * max(1, ctx.capacity("L0A") // TILE_SHARE // (g.w * self.cin))
            self.ones = l1_ones(bld, m, f"{expand.name}.ones")
            self.owned.append(self.ones)
        self.rows: tuple[int, int] | None = None  # the input rows in `self.x`
        self.x: BufRef | None = None

    def close(self) -> None:
        """Free the held operands."""
        self._drop()
        for buf in self.owned:
            self.ctx.builder.free(buf)

    def _drop(self) -> None:
        """Free the loaded input rows, if any."""
        if self.x is not None:
            self.ctx.builder.free(self.x)
        self.x, self.rows = None, None

    def _input(self, lo: int, hi: int) -> tuple[BufRef, int, int]:
        """The 1x1 conv's input rows [lo, hi) in L1: (buffer, its rows, the image row of its
        first); read in place when resident, else loaded once for consecutive windows."""
        ctx, g, bld = self.ctx, self.g, self.ctx.builder
        src = ctx.ddr(self.expand.inputs[0])
        whole = bld.resident(src.key)
        if whole is not None:
            return whole.at(src.off), g.h, 0
        if self.rows != (lo, hi):
            self._drop()
            x = bld.alloc("L1", self.cin * (hi - lo) * g.w, f"{self.expand.name}.x")
            dims, st = (self.cin, hi - lo, g.w), ((hi - lo) * g.w, g.w, 1)
            bld.emit(Copy(x, src.at(lo * g.w), dims, st, (g.h * g.w, g.w, 1)))
            self.x, self.rows = x, (lo, hi)
        assert self.x is not None
        return self.x, hi - lo, lo

    def _bias_into(self, acc: BufRef, m: int, gl: int, l0b1: BufRef | None) -> None:
        """acc[m x gl] += ones[m x 1] @ bias[1 x gl] (`l0b1`): the bias added by the cube, a
        k = 1 mmad after the products, instead of a vector add over the window's rows."""
        if l0b1 is None:
            return
        assert self.ones is not None
        cube_bias(self.ctx.builder, acc, self.ones, l0b1, (m, gl), f"{self.expand.name}.a1")

    def window(self, layer: Layer, item: Item) -> BufRef:
        """The padded window of one item of depthwise `layer`, computed (its rows' mmads, bias
        and activation); zeros on its border."""
        g, bld = self.g, self.ctx.builder
        (_, g0, gl), (r0, rows, _, cols) = item
        wr, wc = g.in_rows(rows), g.in_cols(cols)
        win = bld.alloc("UB", gl * wr * wc, f"{layer.name}.win")
        first, left = r0 * g.sh - g.pad_t, -g.pad_l
        lo, hi = max(first, 0), min(first + wr, g.h)
        cl, cr = max(left, 0), min(left + wc, g.w)
        if lo < hi and cl < cr:
            region = win.at((lo - first) * wc + cl - left)
            self._rows((g0, gl), (lo, hi), (region, wr * wc, wc))
        for row, nrows, col, ncols in (
            (0, lo - first, 0, wc),
            (hi - first, first + wr - hi, 0, wc),
            (lo - first, hi - lo, 0, cl - left),
            (lo - first, hi - lo, cr - left, left + wc - cr),
        ):
            if nrows > 0 and ncols > 0:
                dims, (st,) = coalesce((gl, nrows, ncols), (wr * wc, wc, 1))
                bld.emit(VFill(win.at(row * wc + col), dims, st, 0.0))
        return win

    def _rows(
        self, chans: tuple[int, int], span: tuple[int, int], dst: tuple[BufRef, int, int]
    ) -> None:
        """Channels [g0, g0 + gl) of the 1x1 conv's output rows [lo, hi), whole rows, into
        `dst` (its first element, plane stride, row stride), bias added (by the cube) and
        activated."""
        (g0, gl), (lo, hi), (out, plane, row) = chans, span, dst
        ctx, expand, bld, cin, w = self.ctx, self.expand, self.ctx.builder, self.cin, self.g.w
        x, xh, top = self._input(lo, hi)
        emit = bld.emit_local  # NOTE: `emit` itself for an operand in DDR (the weights')
        l0b = bld.alloc("L0B", cin * gl, f"{expand.name}.b0")
        emit(Copy(l0b, self.w.at(g0 * cin), (cin, gl), (gl, 1), (1, cin)))
        l0b1 = None
        if self.bias is not None:
            l0b1 = bld.alloc("L0B", gl, f"{expand.name}.b1")
            emit(Copy(l0b1, self.bias.at(g0), (gl,), (1,), (1,)))
        l0a, l0c = (ctx.capacity(t) // TILE_SHARE for t in ("L0A", "L0C"))
        per = max(1, min(l0a // (w * cin), l0c // (w * gl)))
        for t0, tr in split(hi - lo, per):
            m = tr * w
            a0 = bld.alloc("L0A", m * cin, f"{expand.name}.a0")
            emit(Img2Col(a0, x, cin, xh, w, 1, 1, 1, 1, 1, 1, top - lo - t0, 0, tr, w))
            acc = bld.alloc("L0C", m * gl, f"{expand.name}.acc")
            emit(Mmad(acc, a0, l0b, m, gl, cin, 0))
            bld.free(a0)
            self._bias_into(acc, m, gl, l0b1)
            dims, (ds, ss) = coalesce((gl, tr, w), (plane, row, 1), (1, w * gl, gl))
            emit(Copy(out.at(t0 * row), acc, dims, ds, ss))
            bld.free(acc)
        bld.free(l0b)
        if l0b1 is not None:
            bld.free(l0b1)
        dims, (st,) = coalesce((gl, hi - lo, w), (plane, row, 1))
        act = expand.attrs.get("act", "")
        if act:
            a = expand.attrs
            scalars = () if act == "relu" else (float(a.get("act_min", -math.inf)),
                                                 float(a.get("act_max", math.inf)))  # fmt: skip
            emit(VUnary(act, out, out, dims, st, st, scalars))


class _CubeTaps:
    """The cube's share of a fused depthwise conv's channels (stride 1), window by window: the
    window the 1x1 conv computed in UB stored to L1 pixel-major in blocks of n0 channels
    ([block, pixel, channel]: UB -> L1, transposed by the copy's strides), per block and L0 tile
    of output rows its window rows L1 -> L0A once (no img2col: one element an input pixel),
    then one mmad a tap: the rows of L0A from the tap's offset (a pixel-major window shifted by
    ki * row + kj is the tap's view of every output pixel of full window rows) by the tap's
    weights as a diagonal [n0, n0] (L0B, built from zeros and the staged weights), all into one
    accumulator, and the bias by a k = 1 mmad of ones. The accumulators stay in L0C until after
    the next vector item's taps, then L0C -> UB into the item's channel-major output (the
    window's border columns dropped), its activation and store as the vector items'."""

    def __init__(self, ctx: LowerContext, layer: Layer, g: ConvGeom, sizes: tuple[int, int]):
        self.ctx, self.layer, self.g = ctx, layer, g
        self.groups, self.per = sizes  # channels an item, output rows an L0 tile
        bld, self.cb = ctx.builder, ctx.target.cube.n0
        w = ctx.ddr(layer.inputs[1])
        held = bld.resident(w.key)
        assert held is not None
        self.wts = held.at(w.off)
        size, m = g.taps * self.cb * self.cb, self.per * g.in_cols(g.ow)
        fill = bld.alloc("UB", max(size, m), f"{layer.name}.zeros")
        bld.emit(VFill(fill, (size,), (1,), 0.0))
        self.zeros = bld.alloc("L1", size, f"{layer.name}.zeros")
        bld.emit(Copy(self.zeros, fill, (size,), (1,), (1,)))
        self.pending: tuple[Item, BufRef] | None = None
        self.forms: list[tuple[str, str, int]] = []  # `products`' weight copies' forms
        self.offsets: dict[int, list[int]] = {}  # `_tile`'s taps' L0A offsets, by window width
        self.ones: BufRef | None = None
        if len(layer.inputs) > 2 and layer.inputs[2]:
            bld.emit(VFill(fill, (m,), (1,), 1.0))
            self.ones = bld.alloc("L1", m, f"{layer.name}.ones")
            bld.emit(Copy(self.ones, fill, (m,), (1,), (1,)))
        bld.free(fill)

    @classmethod
    def make(
        cls, ctx: LowerContext, layer: Layer, g: ConvGeom, sizes: tuple[int, int, int]
    ) -> _CubeTaps | None:
        """The share of the last `sizes[0]` channels (items of at most `sizes[1]` channels,
        bands of `sizes[2]` rows), or None: none asked, a strided conv, the weights not staged
        in L1, a share not in blocks of n0, or an L0 tile of one row that does not fit (its
        window rows within CUBE_L0A of L0A, a band's accumulators within half L0C's share)."""
        cube, groups, rows = sizes
        cb = ctx.target.cube.n0
        groups = groups // cb * cb
        staged = ctx.builder.resident(ctx.ddr(layer.inputs[1]).key) is not None
        strided = g.sh != 1 or g.sw != 1
        if cube <= 0 or strided or not staged or groups == 0 or cube % cb or cube > g.group:
            return None
        l0a = ctx.capacity("L0A") * CUBE_L0A[0] // CUBE_L0A[1]
        l0c = ctx.capacity("L0C") // TILE_SHARE
        wc, halo = g.in_cols(g.ow), (g.kh - 1) * g.dh
        per = largest(lambda r: (r + halo) * wc * cb <= l0a, rows)
        if per == 0 or groups * rows * wc > l0c // 2:
            return None
        return cls(ctx, layer, g, (groups, -(-rows // -(-rows // per))))

    def close(self) -> None:
        """The last cube item's copy out, then free the share's constants."""
        self.flush()
        self.ctx.builder.free(self.zeros)
        if self.ones is not None:
            self.ctx.builder.free(self.ones)

    def store(self, item: Item, win: BufRef) -> BufRef:
        """The item's window (UB, freed here) into L1, [block, pixel, n0]."""
        ctx, g, cb = self.ctx, self.g, self.cb
        bld = ctx.builder
        (_, _, gl), (_, rows, _, cols) = item
        plane = g.in_rows(rows) * g.in_cols(cols)
        x = bld.alloc("L1", gl * plane, f"{self.layer.name}.fx")
        nb = gl // cb
        bld.emit_local(Copy(x, win, (nb, plane, cb), (plane * cb, cb, 1), (cb * plane, 1, plane)))
        bld.free(win)
        return x

    def products(self, item: Item, x: BufRef, bias: BufRef | None) -> BufRef:
        """The item's window in L1 (`store`, freed here) through the cube: its accumulators in
        L0C, block j's L0 tile of output rows [t0, t0 + tr) at (j * rows + t0) * wc * n0,
        [pixel, n0]."""
        ctx, g, cb, name = self.ctx, self.g, self.cb, self.layer.name
        bld = ctx.builder
        (_, g0, gl), (_, rows, _, cols) = item
        wr, wc = g.in_rows(rows), g.in_cols(cols)
        nb, plane = gl // cb, wr * wc
        acc = bld.alloc("L0C", gl * rows * wc, f"{name}.facc")
        emit = bld.emit_local  # NOTE: every operand a buffer of this core
        forms = self.forms  # NOTE: each copy below has one form (its fields and tiers the share's)
        for j in range(nb):
            l0b = bld.alloc("L0B", g.taps * cb * cb, f"{name}.fb0")
            zeros = Copy(l0b, self.zeros, (g.taps * cb * cb,), (1,), (1,))
            diag = Copy(l0b, self.wts.at((g0 + j * cb) * g.taps), (g.taps, cb), (cb * cb, cb + 1),
                        (1, g.taps))  # fmt: skip
            if not forms:
                forms += [bld.form(zeros), bld.form(diag)]
            emit(zeros, forms[0])
            emit(diag, forms[1])
            l0b1 = None
            if bias is not None and self.ones is not None:
                l0b1 = bld.alloc("L0B", cb, f"{name}.fb1")
                emit(Copy(l0b1, bias.at(j * cb), (cb,), (1,), (1,)))
            for t0, tr in split(rows, self.per):
                self._tile(acc.at((j * rows + t0) * wc * cb), x.at((j * plane + t0 * wc) * cb),
                           (tr, wc), (l0b, l0b1))  # fmt: skip
            bld.free(l0b)
            if l0b1 is not None:
                bld.free(l0b1)
        bld.free(x)
        return acc

    def _tile(
        self, acc: BufRef, x: BufRef, shape: tuple[int, int], b: tuple[BufRef, BufRef | None]
    ) -> None:
        """One L0 tile of `tr` output rows of one block: its window rows (from `x`, L1) into
        L0A, a mmad a tap into `acc`, then the bias's."""
        g, cb, bld, name = self.g, self.cb, self.ctx.builder, self.layer.name
        (tr, wc), (l0b, l0b1) = shape, b
        size = (tr + (g.kh - 1) * g.dh) * wc * cb
        a0 = bld.alloc("L0A", size, f"{name}.fa0")
        emit = bld.emit_local  # NOTE: every operand a buffer of this core
        emit(Copy(a0, x, (size,), (1,), (1,)))
        m = tr * wc - (g.kw - 1) * g.dw  # every output pixel's row; the border columns' too
        taps = self.offsets.get(wc)
        if taps is None:
            taps = self.offsets[wc] = [
                (ki * g.dh * wc + kj * g.dw) * cb for ki in range(g.kh) for kj in range(g.kw)
            ]
        emit(Mmad(acc, a0.at(taps[0]), l0b.at(0), m, cb, cb, 0))
        # NOTE: every later tap's mmad accumulates, apart in its operands' offsets only: a run
        sq = cb * cb
        bld.emit_run(
            lambda t: Mmad(acc, a0.at(taps[t + 1]), l0b.at((t + 1) * sq), m, cb, cb, 1),
            len(taps) - 1,
        )
        bld.free(a0)
        if l0b1 is not None and self.ones is not None:
            cube_bias(bld, acc, self.ones, l0b1, (m, cb), f"{name}.fa1")

    def taps(self, first: int) -> Taps:
        """`pipeline`'s taps: a vector item's taps as depthwise's, then the deferred cube
        item's copy out; a cube item's products (its window stored to L1 by `store` at its
        load), their copy out deferred."""

        def run(item: Item, win: BufRef, consts: tuple[BufRef, BufRef | None]) -> None:
            if item[0][1] < first:
                vector_taps(self.ctx, self.layer, self.g, item, win, consts)
                self.flush()
                return
            self.flush()
            self.pending = (item, self.products(item, win, consts[1]))

        return run

    def flush(self) -> None:
        """The deferred cube item's copy out of L0C, if any."""
        if self.pending is not None:
            self.out(*self.pending)
        self.pending = None

    def out(self, item: Item, acc: BufRef) -> None:
        """A cube item's accumulators L0C -> UB (channel-major, the window's border columns
        dropped), then its epilogue."""
        ctx, g, cb = self.ctx, self.g, self.cb
        bld = ctx.builder
        (_, _, gl), (_, rows, _, cols) = item
        pixels, wc = rows * cols, g.in_cols(cols)
        y = bld.alloc("UB", gl * pixels, f"{self.layer.name}.fout")
        dims, (ds, ss) = coalesce(
            (gl // cb, cb, rows, cols),
            (cb * pixels, pixels, cols, 1),
            (rows * wc * cb, 1, wc * cb, cb),
        )
        bld.emit_local(Copy(y, acc, dims, ds, ss))
        bld.free(acc)
        epilogue(ctx, self.layer, g, item, y)
