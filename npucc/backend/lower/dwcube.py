"""A depthwise conv's share of channels on the cube: blocks of channels as block-diagonal products.

A depthwise conv (one input and one output channel per group) has no reduction across channels,
so the cube can take a block of `cb` channels at once only as a product whose weights are
block-diagonal: img2col of the block's window into L0A ([pixels, cb * taps]), weights
[cb * taps, cb] with channel c's taps in column c and zeros elsewhere (built on chip: zeros,
then the model's weights copied onto the diagonal), one mmad. Only 1/cb of its MACs are
useful, but the cube has 2,048 MACs a cycle against the vector unit's 64, so the limit is
img2col's L1 -> L0A bytes (taps elements per output, as many as the vector unit's `mla`
lanes) on MTE1, a pipe a depthwise conv leaves idle.
`depthwise.py` gives the cube a share of the channels so that both pipes carry the layer.

The share is the conv's last channels: the vector share's bands, emitted first at each step,
read the first ones, which a producer writing its channels in order (a 1x1 conv's N blocks)
writes first. Every block's weights DDR -> L1 in one DMA (read in place when the layer staged
them in L1); the units (a run of blocks over a
window of output rows) go window after window, every run of blocks in each window, so that the
share reads its input and writes its output in row order like the vector share's bands: it
starts on the first rows its producer writes, its consumer on the first rows it writes. Per
unit its blocks' weights L1 -> L0B (again only when the run of blocks changes), its input rows
(unpadded: img2col pads) DDR -> L1 (a resident input is read in place); per band of the
window's rows and L0 tile of pixels one img2col, one mmad and the accumulator L0C -> UB into
the band's output; then the bias, the fused activation and one store of the band (pixel-major
in UB, written back channel-major).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from npucc.backend.lower.context import TILE_SHARE, LowerContext, apply_activation, largest, split
from npucc.backend.lower.conv_geom import ConvGeom
from npucc.backend.lower.layout import coalesce
from npucc.ir.graph import Layer
from npucc.ir.isa import BufRef, Copy, Img2Col, Mmad, VBinary, VFill

Form = tuple[str, str, int]  # an instruction's form: op name, pipe, cycles (`TileBuilder.form`)
HALO_SHARE = 4  # a window's input rows: at least this many times the rows it reads again (its halo)
# NOTE: measured on MobileNet v2: 2 or 3: 1,044,492 cycles, 4: 1,037,031, 8: 1,040,659, 16:
# 1,058,527; a window of all the rows a quarter of L1 holds: 1,067,275 (its first band waits
# for the whole window), one band a window: 1,048,179 (the cube's share of a 3x3 conv read 1.5
# times). In row order (units window after window): 2 or 3: 1,044,514, 4: 1,045,152, 6:
# 1,050,090, 8: 1,050,744, 16: 1,657,812 (DAN then keeps a plan without spills 1.6 times as
# slow as the lowering order's with one; docs/roofline.md)


@dataclass(frozen=True, slots=True)
class CubePlan:
    """Channels [first, first + channels) of a depthwise conv on the cube (its last ones): `cb`
    channels a block, units of `blocks` blocks over windows of `window` output rows (a unit's
    input rows in L1, its blocks' weights in L0B), each in bands of `rows` output rows (its
    output in UB), L0 tiles of `tile` pixels."""

    first: int
    channels: int
    cb: int
    blocks: int
    window: int
    rows: int
    tile: int


def cube_plan(ctx: LowerContext, g: ConvGeom, channels: int, ub_elems: int) -> CubePlan | None:
    """The plan of the last `channels` channels on the cube (None when none, or when a band of
    one row does not fit): blocks of n0 / 2 channels (an img2col tile then holds more pixels:
    fewer DMA latencies); bands of the most rows, then units of the most blocks, whose output fits
    `ub_elems`, whose window fits a quarter of L1 and whose weights and accumulators fit the
    share of L0B and L0C; windows of the most such bands that fit a quarter of L1 (the halo
    rows read again once per window, not per band); tiles of the most whole rows (or part of
    one) whose img2col fits L0A's share."""
    cb = min(ctx.target.cube.n0 // 2, channels)
    if cb <= 0:
        return None
    rooms = ctx.capacity("L1"), ctx.capacity("L0A"), ctx.capacity("L0B"), ctx.capacity("L0C")
    return _planned(g, channels, ub_elems, cb, rooms)


PLANS_KEPT = 1 << 12  # plans `_planned` keeps


@functools.lru_cache(maxsize=PLANS_KEPT)
def _planned(
    g: ConvGeom, channels: int, ub_elems: int, cb: int, rooms: tuple[int, int, int, int]
) -> CubePlan | None:
    """`cube_plan` worked out from everything it reads: the conv, its arguments, the block's
    channels and the elements of L1, L0A, L0B and L0C (`rooms`). NOTE: a pure function of
    them, kept per value (the decisions and each lowering ask for the same plans again)."""
    k = cb * g.taps
    l1 = rooms[0] // 4
    l0a, l0b, l0c = (room // TILE_SHARE for room in rooms[1:])

    def fits(blocks: int, rows: int) -> bool:
        out, win = blocks * cb * rows * g.ow, blocks * cb * g.in_rows(rows) * g.w
        return out <= ub_elems and win <= l1 and blocks * k * cb <= l0b and blocks * cb <= l0c

    if not fits(1, 1) or k > l0a:
        return None
    rows = largest(lambda r: fits(1, r), g.oh)
    rows = -(-g.oh // -(-g.oh // rows))  # balanced
    most = channels // cb
    blocks = largest(lambda b: fits(b, rows), most) if rows == g.oh else 1
    blocks = -(-most // -(-most // blocks))  # balanced
    most_rows = largest(lambda r: blocks * cb * g.in_rows(r) * g.w <= l1, g.oh)
    halo = g.in_rows(rows) - rows * g.sh  # input rows a window reads beyond its own stride
    window = rows
    while window < most_rows and HALO_SHARE * halo > g.in_rows(window):
        window += rows
    window = -(-g.oh // -(-g.oh // min(window, max(most_rows, rows))))  # balanced
    pixels = largest(lambda m: m * k <= l0a and blocks * m * cb <= l0c, rows * g.ow)
    if pixels >= g.ow:
        pixels = pixels // g.ow * g.ow
    else:
        pixels = -(-g.ow // -(-g.ow // pixels))  # balanced parts of a row
    share = channels - channels % cb
    return CubePlan(g.group - share, share, cb, blocks, window, rows, pixels)


class CubeShare:
    """The cube's share of one depthwise conv, emitted a unit (blocks, band) at a time."""

    def __init__(self, ctx: LowerContext, layer: Layer, g: ConvGeom, plan: CubePlan) -> None:
        self.ctx, self.layer, self.g, self.plan = ctx, layer, g, plan
        bands = split(g.oh, plan.window)
        units = split(plan.channels // plan.cb, plan.blocks)
        self.units = [(n, u, b) for n in range(g.n) for b in bands for u in units]
        self.next = 0
        self.blocks: tuple[int, int] | None = None  # the run of blocks whose weights are in L0B
        self.wts: BufRef | None = None
        self.bias: BufRef | None = None
        self.l0b: BufRef | None = None
        self.zeros: BufRef | None = None
        self.forms: dict[tuple[int, tuple[int, ...], int], tuple[Form, Form]] = {}  # `band`'s

    def start(self) -> None:
        """The share's weights into L1 (one DMA, the model's), zeros for the blocks' off-diagonal
        in L1 (filled in UB), the share's bias into UB."""
        ctx, layer, plan, g = self.ctx, self.layer, self.plan, self.g
        bld = ctx.builder
        src = ctx.ddr(layer.inputs[1]).at(plan.first * g.taps)
        held = bld.resident(src.key)  # staged by the layer (depthwise.stage_consts)
        if held is not None:
            self.wts = held.at(src.off)
        else:
            self.wts = bld.alloc("L1", plan.channels * g.taps, f"{layer.name}.cw")
            bld.emit(Copy(self.wts, src, (plan.channels * g.taps,), (1,), (1,)))
        size = plan.blocks * plan.cb * g.taps * plan.cb
        fill = bld.alloc("UB", size, f"{layer.name}.zeros")
        bld.emit(VFill(fill, (size,), (1,), 0.0))
        self.zeros = bld.alloc("L1", size, f"{layer.name}.zeros")
        bld.emit(Copy(self.zeros, fill, (size,), (1,), (1,)))
        bld.free(fill)
        bias = layer.inputs[2] if len(layer.inputs) > 2 else ""
        if bias:
            self.bias = bld.alloc("UB", plan.channels, f"{layer.name}.cbias")
            bld.emit(Copy(self.bias, ctx.ddr(bias).at(plan.first), (plan.channels,), (1,), (1,)))

    def emit_until(self, fraction: float) -> None:
        """Emit the units up to `fraction` of them (all at 1.0), then, after the last, free the
        share's buffers."""
        end = len(self.units) if fraction >= 1 else int(fraction * len(self.units))
        if self.next == 0 and end > 0:
            self.start()
        while self.next < end:
            self.unit(*self.units[self.next])
            self.next += 1
        if self.next == len(self.units) and self.wts is not None:
            bld = self.ctx.builder
            staged = bld.resident(self.ctx.ddr(self.layer.inputs[1]).key) is not None
            for buf in (self.l0b, self.bias, self.zeros, None if staged else self.wts):
                if buf is not None:
                    bld.free(buf)
            self.wts = self.bias = self.l0b = self.zeros = None
            self.blocks = None

    def tiles(self, pixels: int) -> list[tuple[int, int]]:
        """(first pixel, pixels) of each L0 tile of a band: whole rows, or parts of each row."""
        ow, tile = self.g.ow, self.plan.tile
        if tile >= ow:
            return split(pixels, tile)
        return [(p0 + q0, m) for p0 in range(0, pixels, ow) for q0, m in split(ow, tile)]

    def window(
        self, n: int, c0: int, channels: int, band: tuple[int, int]
    ) -> tuple[BufRef, int, int, bool]:
        """The band's input rows of `channels` channels from c0 in L1: (buffer, its rows, the
        image row of its first, whether it is a window this unit owns)."""
        ctx, g, layer = self.ctx, self.g, self.layer
        bld = ctx.builder
        first = band[0] * g.sh - g.pad_t
        lo, hi = max(first, 0), min(first + g.in_rows(band[1]), g.h)
        src = ctx.ddr(layer.inputs[0])
        plane = src.at((n * g.c + c0) * g.h * g.w)
        whole = bld.resident(src.key)
        if whole is not None:  # read in place: the window is the whole image
            return whole.at(plane.off), g.h, 0, False
        x = bld.alloc("L1", channels * (hi - lo) * g.w, f"{layer.name}.cx")
        dims, st = (channels, hi - lo, g.w), ((hi - lo) * g.w, g.w, 1)
        bld.emit(Copy(x, plane.at(lo * g.w), dims, st, (g.h * g.w, g.w, 1)))
        return x, hi - lo, lo, True

    def unit(self, n: int, blocks: tuple[int, int], band: tuple[int, int]) -> None:
        """A run of blocks of channels over one window of output rows, band by band."""
        ctx, g, plan, layer = self.ctx, self.g, self.plan, self.layer
        bld, cb, k = ctx.builder, plan.cb, plan.cb * g.taps
        b0, nb = blocks
        c0, cc = b0 * cb, nb * cb
        assert self.wts is not None
        if blocks != self.blocks:  # new blocks: their weights into L0B
            self.blocks = blocks
            if self.l0b is not None:
                bld.free(self.l0b)
            self.l0b = bld.alloc("L0B", nb * k * cb, f"{layer.name}.b0")
            assert self.zeros is not None
            bld.emit_local(Copy(self.l0b, self.zeros, (nb * k * cb,), (1,), (1,)))
            # the block-diagonal: channel c's taps into column c of rows c * taps..
            dims, st = (nb, cb, g.taps), (k * cb, k + 1, cb)
            bld.emit_local(Copy(self.l0b, self.wts.at(c0 * g.taps), dims, st, (k, g.taps, 1)))
        assert self.l0b is not None
        x, ih, top, owned = self.window(n, plan.first + c0, cc, band)
        for sub in split(band[1], plan.rows):
            self.band(n, blocks, (band[0] + sub[0], sub[1]), (x, ih, top))
        if owned:
            bld.free(x)

    def band(
        self, n: int, blocks: tuple[int, int], band: tuple[int, int], win: tuple[BufRef, int, int]
    ) -> None:
        """One band of output rows of a run of blocks, from their window `win` (its buffer, its
        rows and the image row of its first)."""
        ctx, g, plan, layer = self.ctx, self.g, self.plan, self.layer
        bld, cb, k = ctx.builder, plan.cb, plan.cb * g.taps
        emit = bld.emit_local  # NOTE: every operand but the store's a buffer of this core
        (b0, nb), (x, ih, top) = blocks, win
        c0, cc = b0 * cb, nb * cb
        assert self.l0b is not None
        r0, rows = band
        pixels = rows * g.ow
        out = bld.alloc("UB", cc * pixels, f"{layer.name}.cout")  # [block, pixel, channel]
        for p0, m in self.tiles(pixels):
            tr, q0 = r0 + p0 // g.ow, p0 % g.ow
            shape = (m // g.ow, g.ow) if m >= g.ow else (1, m)
            pads = (top + g.pad_t - tr * g.sh, g.pad_l - q0 * g.sw)
            geom = (g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, *pads, *shape)
            acc = bld.alloc("L0C", nb * m * cb, f"{layer.name}.cacc")
            # every block's img2col and mmad forms (apart in their operands only), kept by the
            # fields that differ between tiles (NOTE: the others and the tiers are the share's)
            forms = self.forms.get((ih, geom, m))
            for j in range(nb):
                a0 = bld.alloc("L0A", m * k, f"{layer.name}.a0")
                load = Img2Col(a0, x.at(j * cb * ih * g.w), cb, ih, g.w, *geom)
                mmad = Mmad(acc.at(j * m * cb), a0, self.l0b.at(j * k * cb), m, cb, k, 0)
                if forms is None:
                    forms = self.forms[ih, geom, m] = bld.form(load), bld.form(mmad)
                emit(load, forms[0])
                emit(mmad, forms[1])
                bld.free(a0)
            dims, (ds, ss) = coalesce((nb, m * cb), (pixels * cb, 1), (m * cb, 1))
            emit(Copy(out.at(p0 * cb), acc, dims, ds, ss))
            bld.free(acc)
        if self.bias is not None:
            b, dims = self.bias.at(c0), (nb, pixels, cb)
            st, (ds, bs) = coalesce(dims, (pixels * cb, cb, 1), (cb, 0, 1))
            emit(VBinary("add", out, out, b, st, ds, ds, bs))
        apply_activation(ctx, out, cc * pixels, layer.attrs)
        y = ctx.ddr(layer.outputs[0]).at(((n * g.co + plan.first + c0) * g.oh + r0) * g.ow)
        dims, (ds, ss) = coalesce(
            (nb, cb, pixels), (cb * g.oh * g.ow, g.oh * g.ow, 1), (pixels * cb, 1, cb)
        )
        bld.emit(Copy(y, out, dims, ds, ss))
        bld.free(out)
