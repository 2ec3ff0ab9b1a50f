"""A layer lowered through the real tilers on one core, packed for the mesh cost model.

`profile_layer` lowers one layer as the lowering will (every tile on one core, the plan's
on-chip operands known to the tilers) and `_summarise` packs its nodes into a `LayerProfile`:
pipes, cycles, predecessors, release classes, tile spans, energy, DDR bytes and the copies a
plan may move onto the NoC. `core_timing` (npucc.backend.estimate.share_timing) replays one
core's share on in-order pipes.
npucc.backend.estimate.exec_cost prices plans from these profiles.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from npucc.backend.estimate import timing_kernel
from npucc.backend.estimate.list_schedule import LayerTiming
from npucc.backend.estimate.share_timing import core_timing
from npucc.backend.lower.builder import DdrTracker, MeshBuilder, TileBuilder
from npucc.backend.lower.context import CONTEXT_READS, LOWERINGS, LowerContext
from npucc.backend.lower.stage import stage_chunk
from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer
from npucc.ir.instr_form import instr_fields
from npucc.ir.isa import PIPES, Copy, DdrRef, HostOp, Instr, pattern_extent
from npucc.ir.isa_cost import ddr_bytes, instr_energy
from npucc.ir.onchip import OnChip
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import Target


@dataclass(slots=True, unsafe_hash=True)
class DdrCopy:
    """A copy between a core tier and a DDR tensor of the layer: a NoC transfer if it is on
    chip (a constant: its staged copy).

    NOTE: a value, never assigned to, not declared frozen (as `conv_geom.ConvGeom`): a profile
    makes one per copy of an operand a plan may keep on chip."""

    node: int  # index in the profile
    operand: int  # the tensor: index into the layer's (*inputs, *outputs)
    lo: int  # first element of the tensor the copy touches
    hi: int  # one past the last
    instr: Copy
    lead: bool = False  # among the const loads ahead of the first input-dependent DDR copy
    tile: int = 0  # the tile it belongs to
    energy_pj: float = 0.0  # instr_energy of `instr`
    ddr: int = 0  # ddr_bytes of `instr`
    shape: tuple[str, str, int] = ("", "", 0)  # its tiers and elements: what a NoC copy's costs
    # depend on besides its hops


@dataclass(frozen=True, slots=True)
class LayerProfile:
    """One layer lowered on one core: its nodes in lowering order, tile spans and totals."""

    pipe: tuple[int | None, ...]  # index into PIPES per node, None for ALLOC/FREE/BARRIER
    cycles: tuple[int, ...]  # instr_cycles per node
    preds: tuple[tuple[int, ...], ...]  # earlier nodes of the layer each node waits for
    classes: tuple[int, ...]  # bit 0: needs no input; bit 1 + i: needs input i
    tiles: tuple[int, ...]  # first node of each tile (the first tile also takes the prologue)
    tile_classes: tuple[int, ...]  # the classes of each tile's nodes
    energy_pj: float  # sum of instr_energy
    ddr_bytes: int  # bytes moved to or from DDR
    lead_ddr_bytes: int  # of those, by const loads ahead of the first input-dependent DDR copy
    busy: tuple[int, ...]  # cycles per pipe
    copies: tuple[DdrCopy, ...] = ()  # copies to or from the layer's non-const tensors
    copied: tuple[int, ...] = ()  # the operands those copies touch, each once

    @property
    def ntiles(self) -> int:
        """Independent tiles (the lowering deals them round-robin over the rectangle)."""
        return len(self.tiles)

    def core_nodes(self, cores: int, core: int = 0) -> CoreNodes:
        """The nodes of the tiles core `core` of `cores` runs, in lowering order, renumbered
        0..: their index in the profile, pipe, predecessors among them (one outside finishes
        at 0, so it never delays a node) and classes."""
        span = self.span
        nodes = [i for t in range(core, len(self.tiles), cores) for i in span(t)]
        pipe, preds, classes = self.pipe, self.preds, self.classes
        if len(nodes) == len(pipe):  # every tile: the nodes as they are
            return nodes, list(pipe), list(preds), list(classes)
        pos = [-1] * len(pipe)  # each node's place among them (-1: another core's)
        for k, v in enumerate(nodes):
            pos[v] = k
        at = pos.__getitem__
        return (
            nodes,
            [pipe[v] for v in nodes],
            [tuple([u for u in map(at, preds[v]) if u >= 0]) for v in nodes],
            [classes[v] for v in nodes],
        )

    def timing(self, cores: int) -> tuple[LayerTiming, ...]:
        """Timings on `cores` cores: of the first core of each distinct set of classes (the
        first gets the most tiles, dealt round-robin; e.g. a concat's cores read different
        inputs)."""
        firsts: dict[int, int] = {}
        for core in range(cores):
            mask = 0
            for t in range(core, len(self.tiles), cores):
                mask |= self.tile_classes[t]
            firsts.setdefault(mask, core)
        return tuple(self.core_timing(cores, core) for core in firsts.values())

    def core_timing(
        self, cores: int, core: int, cycles: dict[int, int] | None = None
    ) -> LayerTiming:
        """Cold duration and per-class tails of core `core` of `cores` (`cycles` overrides
        some nodes' cycles)."""
        nodes, pipe, preds, classes = self.core_nodes(cores, core)
        over = cycles or {}
        return core_timing([over.get(v, self.cycles[v]) for v in nodes], pipe, preds, classes)

    def span(self, tile: int) -> range:
        """Node indices of one tile (the first tile includes the prologue)."""
        end = self.tiles[tile + 1] if tile + 1 < len(self.tiles) else len(self.pipe)
        return range(0 if tile == 0 else self.tiles[tile], end)


class CopyRows(NamedTuple):
    """A profile's copies on some cores as `timing_kernel.noc_cycles` walks them (`copy_rows`),
    in order, and where their cycles go: laid out core by core."""

    operand: np.ndarray  # per copy: its operand
    core: np.ndarray  # its tile's core (of the rectangle's)
    lo: np.ndarray  # its first element and one past its last
    hi: np.ndarray
    shape: np.ndarray  # its shape's number among `prices`
    spent: np.ndarray  # its energy as a DDR copy
    dest: np.ndarray  # its place in the cycles laid out core by core
    core_off: np.ndarray  # per core: where its copies start in that layout (and the end)
    nodes: list[list[int]]  # per core: its copies' nodes in that layout
    instrs: list[Copy]  # per copy: its instruction (what `price` prices)
    prices: list[dict[int, tuple[int, float]]]  # per shape: the NoC prices by hops (shared)
    # the same as arrays by (shape, hops), filled as the prices are known (-1: not yet)
    cycles_by_hops: np.ndarray
    energy_by_hops: np.ndarray
    sums: dict[int, tuple[int, int]]  # per operand: DDR bytes of its copies, and leading ones
    # operand, core, lo, hi, shape and dest as the rows of one array (the above are its rows)
    table: np.ndarray
    top: int  # the largest operand (0: no copy)


def copy_rows(
    prof: LayerProfile,
    cores: int,
    known: dict[tuple, dict[int, tuple[int, float]]],
    hops: int,
) -> CopyRows:
    """`prof.copies` on `cores` cores (a tile's core: tiles go round-robin), and per operand
    the DDR bytes of its copies and of those among the leading const loads. `known`: a NoC
    copy's cycles and energy by its shape then hops (shared by every profile); `hops`: more
    than the mesh's longest path in hops."""
    sums: dict[int, tuple[int, int]] = {}
    numbers: dict[tuple, int] = {}
    prices: list[dict[int, tuple[int, float]]] = []
    shape, core = [], []
    nodes: list[list[int]] = [[] for _ in range(cores)]
    for c in prof.copies:
        number = numbers.get(c.shape)
        if number is None:
            number = numbers[c.shape] = len(prices)
            prices.append(known.setdefault(c.shape, {}))
        shape.append(number)
        core.append(c.tile % cores)
        nodes[core[-1]].append(c.node)
        ddr, lead = sums.get(c.operand, (0, 0))
        sums[c.operand] = (ddr + c.ddr, lead + c.ddr * c.lead)
    core_off = [0]
    for mine in nodes:
        core_off.append(core_off[-1] + len(mine))
    filled = core_off[:-1]
    dest = []
    for k in core:
        dest.append(filled[k])
        filled[k] += 1
    by_cycles = np.full((len(prices), hops), -1, np.int64)
    by_energy = np.zeros((len(prices), hops), np.float64)
    for number, by_hops in enumerate(prices):
        for h, (cycles, energy) in by_hops.items():
            by_cycles[number, h], by_energy[number, h] = cycles, energy
    copies = prof.copies
    operands = [c.operand for c in copies]
    table = np.array(
        [operands, core, [c.lo for c in copies], [c.hi for c in copies], shape, dest], np.int64
    ).reshape(6, -1)
    return CopyRows(
        table[0],
        table[1],
        table[2],
        table[3],
        table[4],
        np.array([c.energy_pj for c in copies], np.float64),
        table[5],
        np.array(core_off, np.int64),
        nodes,
        [c.instr for c in copies],
        prices,
        by_cycles,
        by_energy,
        sums,
        table,
        max(operands, default=0),
    )


@lru_cache(maxsize=4096)
def _yx(places: tuple[tuple[int, int], ...]) -> np.ndarray:
    """`places` (row, col) as an array of rows (shared: not to be written)."""
    return np.array(places, np.int64).reshape(-1, 2)


def noc_priced(
    prof: LayerProfile,
    rows: CopyRows,
    homes: dict[int, OnChip],
    offsets: dict[int, int],
    used: tuple[tuple[int, int], ...],
    price: Callable[[Copy, int], tuple[int, float]],
) -> tuple[np.ndarray, float, int, int]:
    """`prof`'s copies (`rows`: its `copy_rows` on `len(used)` cores) of the operands kept on
    chip (`homes`; `offsets`: where a sub-batch's slice starts in its tensor) made NoC
    transfers from each tile's core (`used`: row, col) to the farthest home they reach: the
    copies' NoC cycles laid out core by core (-1: a copy left to DDR), and the profile's
    energy, DDR bytes and leading DDR bytes after. A copy's cycles and energy over some hops:
    its shape's by hops, else `price`'s (`timing_kernel.noc_cycles` states the rule)."""
    # per operand of a copy or kept: its number among the kept (-1: not kept)
    slot = np.empty(max(max(homes, default=0), rows.top) + 1, np.int64)
    slot.fill(-1)  # NOTE: `np.full`'s own Python costs more than the array at this size
    kept: list[tuple[int, int, int, int]] = []
    pairs: list[tuple[int, int]] = []
    for s, (o, where) in enumerate(homes.items()):
        slot[o] = s
        kept.append((len(pairs), len(where.homes), where.chunk, offsets[o]))
        pairs += where.homes
    arrays = (
        rows.table, rows.spent, slot, np.array(kept, np.int64).reshape(-1, 4),
        np.array(pairs, np.int64).reshape(-1, 2), _yx(used), rows.cycles_by_hops,
        rows.energy_by_hops,
    )  # fmt: skip
    out = np.empty(len(rows.instrs), np.int64)
    done, energy = 0, prof.energy_pj
    while True:
        done, energy, hops = timing_kernel.noc_cycles(*arrays, out, done, energy)
        if done == len(rows.instrs):
            break
        hops = int(hops)  # NOTE: numpy's scalar where the kernel is not built
        number = int(rows.shape[done])
        by_hops = rows.prices[number]
        priced = by_hops.get(hops)
        if priced is None:
            priced = by_hops[hops] = price(rows.instrs[done], hops)
        rows.cycles_by_hops[number, hops], rows.energy_by_hops[number, hops] = priced
    ddr, lead = prof.ddr_bytes, prof.lead_ddr_bytes
    for o in homes.keys() & rows.sums.keys():
        ddr -= rows.sums[o][0]
        lead -= rows.sums[o][1]
    return out, float(energy), ddr, lead


CoreNodes = tuple[list[int], list[int | None], list[tuple[int, ...]], list[int]]


def layer_signature(graph: Graph, layer: Layer, single: bool, target: Target) -> tuple:
    """What the lowering of a layer depends on: op, operand shapes and kinds, attributes,
    which operands are one tensor (x * x has one input class, x * y two), and what the
    lowering reads of the layer's neighbours (`CONTEXT_READS`, on a fresh profile context).

    NOTE: a lowering reads the graph beyond its layer only through its `CONTEXT_READS`
    (context.lowering); a profile's context is fresh (`_context`), so those reads answer alike
    here and in `profile_layer`."""
    ins = tuple(
        (graph.tensors[t].shape, graph.tensors[t].dtype, graph.is_const(t), layer.inputs.index(t))
        if t
        else None
        for t in layer.inputs
    )
    outs = tuple(graph.tensors[t].shape for t in layer.outputs)
    near = context_reads(_context(graph, target, single), layer)
    return (layer.op, ins, outs, repr(sorted(layer.attrs.items())), near, single)


def context_reads(lctx: LowerContext, layer: Layer) -> Hashable:
    """What the layer's lowering reads of its neighbours on `lctx` (`CONTEXT_READS`; None:
    nothing)."""
    reads = CONTEXT_READS.get(layer.op)
    return None if reads is None else reads(lctx, layer)


def _context(
    graph: Graph, target: Target, single: bool, noc: tuple[str, ...] = ()
) -> ProfileContext:
    """A fresh profile context on `graph` (one builder, or two unless `single`; `noc`: the
    tensors on chip), its layer begun."""
    program = TiledProgram(graph.name, target)
    program.onchip = {name: OnChip(((0, 0),), 1) for name in noc}
    builders = [TileBuilder(TileGraph("profile"), target, 0)]
    if not single:
        builders.append(TileBuilder(TileGraph("unused"), target, 1))
    lctx = ProfileContext(graph, program, MeshBuilder(builders), target)
    lctx.begin_layer(tuple(range(len(builders))))
    return lctx


def profile_layer(
    graph: Graph,
    layer: Layer,
    target: Target,
    single: bool,
    noc: tuple[int, ...] = (),
    memo: dict | None = None,
    known: dict[Hashable, LayerProfile] | None = None,
) -> LayerProfile:
    """Lower one layer through the real tilers, every tile on one core.

    `single` lowers it as on a one-core rectangle (some tilers then load a broadcast operand
    once for all tiles); otherwise as on a larger rectangle. `noc`: the operands (positions in
    (*inputs, *outputs)) the plan keeps on chip, which the tilers know (their copies stay DDR
    copies here, re-priced by the caller). `memo`: what lowerings of a layer signature compute
    alike (`LowerContext.memo`), shared with other profiles and lowerings of the compile.
    `known`: the profiles of the layer's signature, whatever their `noc`, `single` and
    neighbours, by their lowering's first decision (`ProfileContext.decided`), or `UNREAD`
    and what it reads of the layer's neighbours for a lowering that read no `on_noc` (read
    and filled in).
    """
    names = (*layer.inputs, *layer.outputs)
    lctx = _context(graph, target, single, tuple(names[o] for o in noc))
    lctx.known = known
    if memo is not None:
        lctx.memo = memo
    shared, tile_graph = lctx.memo, lctx.builder.builders[0].graph
    lower = LOWERINGS.get(layer.op)
    if lower is None:
        raise NpuccError(f"no lowering for operator {layer.op} (node '{layer.name}')")
    try:
        unread = (UNREAD, context_reads(lctx, layer))
        lctx.take(unread)
        lower(lctx, layer)
    except KnownProfile as hit:
        return hit.profile
    for out in layer.outputs:
        lctx.builder.close_ddr(out)
    bit: dict[str, int] = {}  # DDR key -> release-class bit of the nodes reading it
    for i, name in enumerate(layer.inputs):
        if name:
            bit.setdefault(name, 1 if graph.is_const(name) else 1 << (1 + i))
    figures = shared.setdefault(FIGURES, {})
    starts = lctx.starts or [0]
    prof = _summarise(tile_graph, starts, target, bit, operand_positions(names), figures)
    if known is not None:
        count = single if lctx.counted else None
        if not lctx.read:
            known[unread, count] = prof
        if lctx.decision is not None and not lctx.late:
            known[lctx.decision, count] = prof
    return prof


@lru_cache(maxsize=4096)
def stage_profile(target: Target, elems: int) -> LayerProfile:
    """One home core staging `elems` elements of a constant on chip (`stage_chunk`)."""
    home = OnChip(((0, 0),), max(elems, 1))
    tracker = DdrTracker(onchip={"staged": home})
    builder = TileBuilder(TileGraph("stage"), target, 0, tracker)
    stage_chunk(builder, DdrRef("const"), DdrRef("staged"), elems)
    return _summarise(builder.graph, [0], target, {})


_PIPE_INDEX: dict[str | None, int] = {name: i for i, name in enumerate(PIPES)}  # PIPES.index


def _no_key(instr: Instr) -> None:
    """No form key (a host segment's: its figures are worked out every time)."""
    return None


UNREAD = ("no on_noc read",)  # `known`'s decision of a lowering that never read `on_noc`
FIGURES = ("profile figures",)  # the lowerings' memo's key of `_summarise`'s `figures`


def _summarise(
    g: TileGraph,
    starts: list[int],
    target: Target,
    bit: dict[str, int],
    movable: dict[str, int] | None = None,
    figures: dict[tuple, tuple[float, int]] | None = None,
) -> LayerProfile:
    """Pack a lowered TileGraph into a LayerProfile (`bit`: release class of each DDR key;
    `movable`: the keys a plan may keep on chip, by operand position; `figures`: each
    instruction form's (`form_key`) energy and DDR bytes, read and filled in)."""
    known = {} if figures is None else figures
    keys: dict[type, Callable[[Instr], tuple | None]] = {}  # each class's form key
    pipe_of = _PIPE_INDEX.get  # NOTE: None (a pipe-less node) is no key: None
    movable = movable or {}
    nodes = g.nodes
    pipe: list[int | None] = [pipe_of(node.pipe) for node in nodes]
    cycles = [node.cycles for node in nodes]
    preds = list(map(tuple, g.preds))
    classes: list[int] = []
    busy = [0] * len(PIPES)
    energy = 0.0
    ddr = lead_ddr = 0
    leading = True  # no input-dependent DDR copy seen yet
    copies: list[DdrCopy] = []
    for v, (node, before) in enumerate(zip(nodes, g.preds, strict=True)):
        mask = 0
        for q in before:
            mask |= classes[q]
        ins = node.instr
        if ins is not None:
            p = pipe[v]
            assert p is not None  # NOTE: every instruction runs on a pipe
            # NOTE: an instruction's energy and DDR bytes depend on its form alone
            # (npucc.ir.instr_form): worked out once per form, a few hundred a compile
            cls = type(ins)
            own = keys.get(cls)
            if own is None:
                own = keys[cls] = _no_key if cls is HostOp else instr_fields(cls).own_key
            key = own(ins)
            found = known.get(key) if key is not None else None
            if found is None:
                found = instr_energy(target, ins), ddr_bytes(target, ins)
                if key is not None:
                    known[key] = found
            spent, moved = found
            energy += spent
            busy[p] += node.cycles
            for name in ins.reads:
                ref = getattr(ins, name)
                if type(ref) is DdrRef:
                    mask |= bit.get(ref.key, 1)  # a const the lowering generated: bit 0
            mask = mask or 1  # needs no input (a fill): free to run ahead as a const load
            ddr += moved
            if moved and mask != 1:
                leading = False
            lead_ddr += moved if leading else 0
            if type(ins) is Copy:
                side, strides = (
                    (ins.src, ins.src_strides) if type(ins.src) is DdrRef else
                    (ins.dst, ins.dst_strides)
                )  # fmt: skip
                if type(side) is DdrRef and side.key in movable:
                    hi = side.off + pattern_extent(ins.dims, strides)
                    operand = movable[side.key]
                    lead = leading and mask == 1
                    tile = max(bisect_right(starts, v) - 1, 0)
                    shape = (ins.src.tier, ins.dst.tier, math.prod(ins.dims))
                    copies.append(
                        DdrCopy(v, operand, side.off, hi, ins, lead, tile, spent, moved, shape)
                    )
        classes.append(mask)
    bounds = (0, *starts[1:], len(pipe))
    tile_classes = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        mask = 0
        for i in range(a, b):
            mask |= classes[i]
        tile_classes.append(mask)
    return LayerProfile(
        tuple(pipe),
        tuple(cycles),
        tuple(preds),
        tuple(classes),
        tuple(starts),
        tuple(tile_classes),
        energy,
        ddr,
        lead_ddr,
        tuple(busy),
        tuple(copies),
        tuple(dict.fromkeys(c.operand for c in copies)),
    )


class KnownProfile(Exception):  # noqa: N818 (not an error: a lowering cut short)
    """A profile's lowering reached a decision whose profile is known: that profile."""

    def __init__(self, profile: LayerProfile) -> None:
        super().__init__()
        self.profile = profile


@dataclass(slots=True)
class ProfileContext(LowerContext):
    """A LowerContext that keeps every tile on the first core and records where tiles start.

    NOTE: the profiles of one layer signature differ by the operands on chip (`on_noc`, a
    lowering's one read of `program.onchip`), the core count (one core or more) and what the
    lowering reads of the layer's neighbours (`context_reads`) only, names only as operand
    positions (`operand_positions`); the answers a lowering read before its first decision
    (`decided`), its neighbours' too, reach what it emits only through that decision, so two
    lowerings of one decision, neither reading `on_noc` after it, emit alike on one core
    count: the second stops there and takes the first's profile (`known` by the decision and
    the count). A decision names no tensor: layers of one signature share it, whatever their
    neighbours. A lowering that never reads `on_noc` emits alike whatever is on chip: its
    profile is known by `UNREAD` and its neighbours' reads before a lowering starts (`take`).
    A lowering that never reads the count (`one_core`, `claim_tiles`: `counted`) emits alike
    on any: its profile is known by the decision alone, to a lowering that has not read it.
    (The profile's builders, one or two, reach nothing but through the count: a lowering moves
    between cores only by `next_tile` and `emit_share`, here always core 0.)"""

    starts: list[int] = field(default_factory=list)  # first node of each tile
    # the profiles by (decision, one core or not; None: on any count), shared
    known: dict[Hashable, LayerProfile] | None = None
    decision: Hashable = None  # the lowering's first decision (None: none yet)
    late: bool = False  # whether it read `on_noc` after it
    read: bool = False  # whether it read `on_noc` at all
    counted: bool = False  # whether it read the core count

    def on_noc(self, name: str) -> bool:
        """LowerContext.on_noc, noting the read (and one after the first decision)."""
        self.late = self.late or self.decision is not None
        self.read = True
        return LowerContext.on_noc(self, name)

    def one_core(self) -> bool:
        """LowerContext.one_core, noting the read."""
        self.counted = True
        return LowerContext.one_core(self)

    def decided(self, decision: Hashable) -> None:
        """The first decision: stop with its profile if known (on any core count, unless
        the count was read, or on this one)."""
        if self.decision is not None:
            return
        self.decision = decision
        self.take(decision)

    def take(self, decision: Hashable) -> None:
        """Stop with the profile known by `decision` on any core count (unless the count was
        read) or on this one, if any."""
        if self.known is None:
            return
        known = None if self.counted else self.known.get((decision, None))
        if known is None:
            known = self.known.get((decision, len(self.cores) == 1))
        if known is not None:
            raise KnownProfile(known)

    def next_tile(self) -> None:
        """Start a tile: on core 0, at the next node."""
        self.builder.current = 0
        self.starts.append(len(self.builder.builders[0].graph))
        self.tiles += 1

    def claim_tiles(self, count: int) -> list[int]:
        """The next `count` tiles: on a larger rectangle each dealt to a core of its own, its
        number (`emit_share` starts it as a tile of the profile); on one core, core 0.

        NOTE: a lowering that claims tiles emits each core's together, software-pipelined
        (`LowerContext.claim_tiles`): on k cores core c runs tiles c, c + k, ... as one
        share. Each tile emitted as a share alone is that share on k >= tiles, and
        `LayerProfile.core_nodes` deals the profile's tiles round-robin as `claim_tiles` deals
        them, so each core gets its tiles' work on any rectangle, and the real nodes when it
        has one tile. With more, the real share's pipeline loads the next tile's window ahead
        of the last taps of the tile before, where the profile's shares follow one another,
        but each pipe gets their instructions in the same order (a window's fills just before
        its taps, `depthwise.pipeline`): timed exactly (MobileNet v2's depthwise convs at
        k = 2 to 16 cores)."""
        self.counted = True
        if len(self.cores) == 1:
            return LowerContext.claim_tiles(self, count)
        first = self.tiles
        self.tiles += count
        return list(range(first, first + count))

    def emit_share(self, core: int) -> None:
        """Emit one core's claimed tiles on core 0: on a larger rectangle, as a new tile."""
        self.builder.current = 0
        if len(self.cores) > 1:
            self.starts.append(len(self.builder.builders[0].graph))


def operand_positions(names: tuple[str, ...]) -> dict[str, int]:
    """Each tensor among a layer's operands `names` (*inputs, *outputs) by its first position
    (a profile's operand index)."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name:
            first.setdefault(name, i)
    return first
