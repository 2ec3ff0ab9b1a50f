"""Helpers shared by the per-op lowerings: contexts, strides, capacities and epilogues."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npucc.backend.lower.builder import MeshBuilder
from npucc.backend.lower.trial_graph import TrialGraph
from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer
from npucc.ir.isa import BufRef, Copy, DdrRef, Mmad, VBinary, VFill, VUnary
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import Target
from npucc.target.timing import in_order

# NOTE: every tile uses at most 1/TILE_SHARE of its tier so that the next tile's buffers can be
# placed while the current one is still live (the headroom a scheduler needs to overlap DMA and
# compute).
TILE_SHARE = 2


@dataclass(slots=True)
class LowerContext:
    """What a per-op lowering needs: the graph, the program being built and the core's builder."""

    graph: Graph
    program: TiledProgram
    builder: MeshBuilder  # appends to the current core; see next_tile
    target: Target
    # NOTE: a lowering reads how many only through `one_core` and `claim_tiles` (a profile
    # notes those reads, npucc.backend.estimate.profile)
    cores: tuple[int, ...] = (0,)  # cores of the layer being lowered
    tiles: int = 0  # independent tiles started in this layer
    reserved: int = 0  # L1 bytes resident tensors hold while this layer is lowered
    memo: dict[Hashable, Any] = field(default_factory=dict)  # per compile: memo.once
    # global means a conv's epilogue computed (conv_geom.epilogue_pool): lowered to nothing
    pooled: set[str] = field(default_factory=set)
    # max pools whose column pass a conv's epilogue computed (conv_geom.epilogue_cols): their
    # input holds rows of their output's columns
    col_pooled: set[str] = field(default_factory=set)
    # depthwise conv -> the 1x1 conv whose output it computes in its windows, and its channels
    # on the cube (dwfuse.py)
    fused: dict[str, tuple[Layer, int]] = field(default_factory=dict)

    def begin_layer(self, cores: tuple[int, ...]) -> None:
        """Lower the next layer on `cores` (its first core until a tile is started)."""
        self.cores = cores
        self.tiles = 0
        self.builder.current = cores[0]

    def next_tile(self) -> None:
        """Start an independent output tile; tiles go round-robin over the layer's cores.

        NOTE: a tile must not use buffers allocated before it started (the builder checks).
        """
        self.builder.current = self.cores[self.tiles % len(self.cores)]
        self.tiles += 1

    def claim_tiles(self, count: int) -> list[int]:
        """The cores of the next `count` independent tiles (round-robin, as `next_tile`).

        NOTE: for a lowering that emits one core's tiles together (software pipelining across
        tiles): it calls `emit_share` with a core before emitting that core's tiles, and reads
        the cores for nothing else (a profile's are its tiles, npucc.backend.estimate.profile).
        """
        cores = [self.cores[(self.tiles + j) % len(self.cores)] for j in range(count)]
        self.tiles += count
        return cores

    def emit_share(self, core: int) -> None:
        """Emit the tiles `claim_tiles` dealt to `core` from now on."""
        self.builder.current = core

    def one_core(self) -> bool:
        """Whether the layer runs on one core."""
        return len(self.cores) == 1

    def shape(self, name: str) -> tuple[int, ...]:
        """Static shape of graph tensor `name`."""
        return self.graph.tensors[name].shape

    def ddr(self, name: str) -> DdrRef:
        """DDR operand for graph tensor `name` (a const is added to the image on first use)."""
        if self.graph.is_const(name) and self.program.key(name) not in self.program.tensors:
            t = self.graph.tensors[name]
            self.program.add_tensor(name, "const", t.shape, t.data)
        return DdrRef(self.program.key(name), self.program.offset(name))

    def new_const(self, key: str, data: np.ndarray) -> DdrRef:
        """A constant the lowering generates (e.g. a divisor map), stored in the image."""
        if key not in self.program.tensors:
            self.program.add_tensor(key, "const", tuple(data.shape), data)
        return DdrRef(key)

    def onchip(self, name: str) -> BufRef | None:
        """The resident L1 buffer holding graph tensor `name` (None: it is in DDR)."""
        return self.builder.resident(self.program.key(name))

    def on_noc(self, name: str) -> bool:
        """Whether graph tensor `name` is kept on chip by the mesh plan (its copies are NoC
        transfers, npucc.backend.hypercut.onchip_plan; a staged constant's too)."""
        return bool(name) and self.program.key(name) in self.program.onchip

    def decided(self, decision: Hashable) -> None:
        """Mark where the lowering has made its `decision` (hashable, naming no tensor),
        through which alone the `on_noc` answers and the layer's neighbours it read so far
        reach what it emits (a profile's lowering, npucc.backend.estimate.profile, may stop
        there: a lowering of the same decision is known). Nothing here."""

    def room(self, tier: str) -> int:
        """Bytes of `tier` this layer's tiles may use: its capacity less the resident bytes."""
        held = self.reserved if tier == "L1" else 0
        return self.target.memory.capacity(tier) - held

    def capacity(self, tier: str) -> int:
        """Room of `tier` in elements (of the tier's element type: L0C's accumulator)."""
        return self.room(tier) // self.target.tier_bytes(tier)

    def tile_bytes(self, buffers: tuple[int, ...], tier: str) -> int:
        """Bytes of a tile's buffers in `tier` (`buffers`: elements of each), each padded to the
        alignment."""
        align, eb = self.target.memory.alignment, self.target.tier_bytes(tier)
        total = 0
        for n in buffers:  # NOTE: a loop, not sum() of a generator: the tile searches' inner step
            total += -(-n * eb // align) * align
        return total

    def share_bytes(self, tier: str) -> int:
        """The most bytes a tile's buffers in `tier` may take: its share (1/TILE_SHARE) of the
        room (an integer size fits `room // TILE_SHARE` exactly when TILE_SHARE times it fits
        the room)."""
        return self.room(tier) // TILE_SHARE

    def share_fits(self, tier: str, buffers: tuple[int, ...]) -> bool:
        """Whether a tile's `buffers` in `tier` fit its share (1/TILE_SHARE) of the tier."""
        return self.tile_bytes(buffers, tier) <= self.share_bytes(tier)

    def fits_beside(self, tier: str, held: tuple[int, ...], buffers: tuple[int, ...]) -> bool:
        """Whether `held` (loaded once) fits the share and `buffers` fit theirs beside it."""
        room = self.room(tier) - self.tile_bytes(held, tier)
        return self.share_fits(tier, held) and TILE_SHARE * self.tile_bytes(buffers, tier) <= room

    def share_error(self, layer: Layer, tier: str, buffers: tuple[int, ...]) -> NpuccError:
        """The refusal of a layer whose smallest tile holds `buffers` in `tier`."""
        return self.fit_error(layer, tier, TILE_SHARE * self.tile_bytes(buffers, tier))

    def fit_error(self, layer: Layer, tier: str, needed: int) -> NpuccError:
        """The error for a tile that cannot fit the target even at its smallest.

        NOTE: `needed` is the capacity in bytes that `tier` would need for the layer's smallest
        tile to fit its share of the tier (TILE_SHARE, alignment padding included): a target
        with `tier` that large gets past this refusal, so the message is a true claim. With
        resident tensors holding part of the tier it is a ReservedFitError: the lowering
        retries without them (the claim is about the tier without them).
        """
        if tier == "L1" and self.reserved:
            return ReservedFitError(f"{tier} holds resident tensors: {needed} bytes do not fit")
        return NpuccError(
            f"{tier} too small for the smallest tile of layer '{layer.name}' ("
            f"{needed} bytes needed, {self.target.memory.capacity(tier)} available)"
        )


class ReservedFitError(NpuccError):
    """A tile that does not fit only because resident tensors hold part of L1."""


Lowering = Callable[[LowerContext, Layer], None]
LOWERINGS: dict[str, Lowering] = {}
# op -> the inputs its lowering can read from a resident L1 buffer (None: every input)
ONCHIP_READS: dict[str, tuple[int, ...] | None] = {}
# op -> what its lowering reads of a layer's neighbours (`lowering`'s `context`)
CONTEXT_READS: dict[str, Callable[[LowerContext, Layer], Hashable]] = {}


def lowering(
    *ops: str,
    onchip: tuple[int, ...] | None = (),
    context: Callable[[LowerContext, Layer], Hashable] | None = None,
) -> Callable[[Lowering], Lowering]:
    """Decorator registering the lowering of one or more canonical ops.

    `onchip`: the inputs the lowering reads only through copies into UB or L0 (which the
    builder redirects to a resident L1 buffer) or in place from L1 (None: all of them).
    NOTE: a copy of a resident tensor into L1 has no data path; such an input is not listed.
    `context`: what the lowering reads of the layer's neighbours in the graph, beyond the layer
    (on a fresh context: the graph and target only); a lowering without one reads none. A memo
    of lowerings by layer signature keys by it too (npucc.backend.estimate.profile).
    """

    def wrap(fn: Lowering) -> Lowering:
        for op in ops:
            if op in LOWERINGS:
                raise ValueError(f"lowering for {op!r} registered twice")
            LOWERINGS[op] = fn
            ONCHIP_READS[op] = onchip
            if context is not None:
                CONTEXT_READS[op] = context
        return fn

    return wrap


SQRT1_2 = 0.7071067811865476
SQRT_2_PI = 0.7978845608028654
GELU_ACTS = {"gelu": "none", "gelu_tanh": "tanh"}  # a fused gelu's act: its approximation


def activation_ops(attrs: dict) -> int:
    """Vector instructions the layer's fused activation (act) adds per output tile."""
    act = attrs.get("act", "")
    if act in GELU_ACTS:
        return 6 if act == "gelu_tanh" else 5
    return int(bool(act))


def activation_temps(attrs: dict) -> int:
    """UB tiles, beside the output tile, the layer's fused activation needs (a gelu's one)."""
    return int(attrs.get("act", "") in GELU_ACTS)


def emit_gelu(
    ctx: LowerContext, out: BufRef, x: BufRef, t: BufRef, n: int, approximate: str
) -> None:
    """out = gelu(x) over `n` UB elements with temporary `t` (`out` may be `x`): the erf form
    x * 0.5 * (1 + erf(x / sqrt 2)), or the tanh approximation x * sigmoid(2 z) (z =
    sqrt(2 / pi) (x + 0.044715 x^3))."""
    bld = ctx.builder

    def un(op: str, dst: BufRef, a: BufRef, *scalars: float) -> None:
        bld.emit(VUnary(op, dst, a, (n,), (1,), (1,), scalars))

    if approximate == "tanh":
        # 0.5 (1 + tanh z) is sigmoid(2 z): one rounding of the factor, not three
        un("pows", t, x, 3.0)
        un("muls", t, t, 0.044715)
        bld.emit(VBinary("add", t, t, x, (n,), (1,), (1,), (1,)))
        un("muls", t, t, 2 * SQRT_2_PI)
        un("sigmoid", t, t)
        bld.emit(VBinary("mul", out, t, x, (n,), (1,), (1,), (1,)))
    else:
        un("muls", t, x, SQRT1_2)
        un("erf", t, t)
        un("adds", t, t, 1.0)
        bld.emit(VBinary("mul", out, t, x, (n,), (1,), (1,), (1,)))
        un("muls", out, out, 0.5)


def apply_activation(ctx: LowerContext, ref: BufRef, elems: int, attrs: dict) -> None:
    """Emit the layer's fused activation (relu, clip or gelu) in place over `elems` elements
    of UB (a gelu's temporary allocated and freed here: `activation_temps`)."""
    act = attrs.get("act", "")
    if not act:
        return
    if act in GELU_ACTS:
        t = ctx.builder.alloc("UB", elems, "gelu.t")
        emit_gelu(ctx, ref, ref, t, elems, GELU_ACTS[act])
        ctx.builder.free(t)
        return
    if act == "relu":
        scalars: tuple[float, ...] = ()
    elif act == "clip":
        scalars = (float(attrs.get("act_min", -math.inf)), float(attrs.get("act_max", math.inf)))
    else:
        raise NpuccError(f"unsupported fused activation {act!r}")
    # NOTE: in place on a buffer of this core: `emit_local` (the same node and edges)
    ctx.builder.emit_local(VUnary(act, ref, ref, (elems,), (1,), (1,), scalars))


def quant_epilogue(layer: Layer) -> tuple[int, int, int] | None:
    """An int8 layer's requantization (zero point, lo, hi), or None for a float layer."""
    a = layer.attrs
    return (int(a["qzp"]), int(a["qlo"]), int(a["qhi"])) if "qzp" in a else None


def window_extent(outputs: int, stride: int, kernel: int, dilation: int) -> int:
    """Input extent a band of `outputs` window positions reads along one axis."""
    return (outputs - 1) * stride + (kernel - 1) * dilation + 1


def split(total: int, tile: int) -> list[tuple[int, int]]:
    """(start, length) pieces of range(total) in tiles of at most `tile`."""
    return [(s, min(tile, total - s)) for s in range(0, total, tile)]


def largest(fits: Callable[[int], bool], hi: int) -> int:
    """The largest v in [1, hi] with fits(v) (fits is monotone decreasing), or 0 if none."""
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def flow(graph: TileGraph | TrialGraph) -> int:
    """The makespan of a core's nodes run in lowering order on each pipe, each as soon as its
    pipe and its predecessors allow (target.timing.in_order: DMA latencies on the critical
    path count, which the busiest pipe alone does not see; a layer on one pipe overlaps the
    next one's on another)."""
    if isinstance(graph, TrialGraph):
        return graph.flow()  # worked out as its nodes came
    cycles, pipes = graph.timing_columns()
    _, finish = in_order(range(len(cycles)), cycles, pipes, graph.preds)
    return max(finish, default=0)


def l1_ones(bld: MeshBuilder, m: int, label: str) -> BufRef:
    """An L1 vector of `m` 1.0s (filled in UB, named `label`): the A operand of a bias added
    by the cube (`cube_bias`)."""
    fill = bld.alloc("UB", m, label)
    bld.emit(VFill(fill, (m,), (1,), 1.0))
    ones = bld.alloc("L1", m, label)
    bld.emit(Copy(ones, fill, (m,), (1,), (1,)))
    bld.free(fill)
    return ones


def cube_bias(
    bld: MeshBuilder, acc: BufRef, ones: BufRef, bias: BufRef, mn: tuple[int, int], label: str
) -> None:
    """acc[m x n] += ones[m x 1] @ bias[1 x n] (`bias` in L0B, `ones` in L1 from `l1_ones`):
    the bias added by the cube, a k = 1 mmad after the products, instead of a vector add over
    the accumulators (`label` names the ones' L0A copy)."""
    m, n = mn
    a1 = bld.alloc("L0A", m, label)
    bld.emit_local(Copy(a1, ones, (m,), (1,), (1,)))  # NOTE: every operand this core's buffer
    bld.emit_local(Mmad(acc, a1, bias, m, n, 1, 1))
    bld.free(a1)
