"""Execution-faithful mesh cost: the lowering's own tiles, priced by cost.py, list-scheduled.

The SET-aligned model (`npucc.backend.hypercut.set_model`) prices a plan analytically; this module
prices what the lowering will emit for it. Each distinct layer is lowered once through the
real tilers on one core (memoised by its signature). The sum of its instructions'
`instr_energy` is its energy, whatever its rectangle (the interpreter charges no
position-dependent energy); an in-order per-pipe replay of the tiles the first core of its
rectangle gets (round-robin, as `LowerContext.next_tile`) is its duration there. The plan's
latency is a list schedule of the layers in lowering order, as the lowering chains them (a
BARRIER chain per core, every tensor through DDR): a layer's reads of an input wait for its
producers' closing barriers plus the flag's hops and for its cores' previous barrier; its
const loads wait only for its cores' DMA. Sub-batch splits are priced as the lowering executes
them (npucc.backend.lower.subbatch): a split loop's layers run once per sub-batch, each part
profiled on its slices, and a part waits for the parts of its producers that cover its slice.
docs/cost-model.md ("Interpreter vs cost model") states the rules and the measured errors.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache

from npucc.backend.estimate.list_schedule import (
    READY,
    READY_AT,
    LayerRun,
    LayerTiming,
    RunCost,
    core_spans,
    covering,
    farthest,
    oldest_first,
    schedule,
)
from npucc.backend.hypercut.onchip_plan import plan_onchip, staged_key, tensor_consumers
from npucc.backend.lower.builder import DdrTracker, MeshBuilder, TileBuilder
from npucc.backend.lower.context import LOWERINGS, LowerContext
from npucc.backend.lower.stage import stage_chunk
from npucc.backend.lower.subbatch import (
    Part,
    loop_parts,
    part_layer,
    part_loops,
    part_spans,
    separable,
    slice_offset,
)
from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_schema import VIEW_OPS
from npucc.ir.isa import PIPES, Copy, DdrRef, NocCopy, pattern_extent
from npucc.ir.isa_cost import ddr_bytes, instr_cycles, instr_energy
from npucc.ir.onchip import OnChip
from npucc.ir.plan import Cost, Rect, Step
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import Target
from npucc.target.cost import ddr_channel_held, sync_cycles
from npucc.target.timing import in_order


@dataclass(frozen=True, slots=True)
class DdrCopy:
    """A copy between a core tier and a DDR tensor of the layer: a NoC transfer if it is on
    chip (a constant: its staged copy)."""

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
        nodes = [i for t in range(core, len(self.tiles), cores) for i in self.span(t)]
        pos = {v: k for k, v in enumerate(nodes)}
        pipe, preds, classes = self.pipe, self.preds, self.classes
        return (
            nodes,
            [pipe[v] for v in nodes],
            [tuple(pos[u] for u in preds[v] if u in pos) for v in nodes],
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


MTE2 = PIPES.index("MTE2")
CoreNodes = tuple[list[int], list[int | None], list[tuple[int, ...]], list[int]]


def _replay(
    timed: tuple[list[int], list[int | None], list[tuple[int, ...]]],
    release: list[int] | None = None,
) -> tuple[int, int]:
    """End and last MTE2 finish of nodes 0.. (cycles, pipes, predecessors) on in-order pipes,
    none starting before its `release`."""
    duration, pipe, preds = timed
    _, finish = in_order(range(len(duration)), duration, pipe, preds, release)
    end = max(finish, default=0)
    mte2 = max((f for f, p in zip(finish, pipe, strict=True) if p == MTE2), default=0)
    return end, mte2


def core_timing(
    duration: list[int], pipe: list[int | None], preds: list[tuple[int, ...]], classes: list[int]
) -> LayerTiming:
    """Cold duration and per-class tails of one core's nodes 0.. (their cycles, pipes,
    predecessors among them and classes).

    The nodes keep the lowering order: the per-core scheduler runs a layer's loads in about
    that order (it prefers a ready load to a new ALLOC), so a const load behind an input load
    waits for it.
    """
    timed = duration, pipe, preds
    cold, mte2 = _replay(timed)
    present = 0
    for c in classes:
        present |= c
    late = sum(duration) + 1  # after everything else
    tails = []
    for cls in range(present.bit_length()):
        if present >> cls & 1:
            release = [late if c >> cls & 1 else 0 for c in classes]
            end, _ = _replay(timed, release)
            tails.append((cls, end - late))
    return LayerTiming(cold, cold - mte2 if mte2 else cold, tuple(tails))


def layer_signature(graph: Graph, layer: Layer, single: bool) -> tuple:
    """What the lowering of a layer depends on: op, operand shapes and kinds, attributes, and
    which operands are one tensor (x * x has one input class, x * y two)."""
    ins = tuple(
        (graph.tensors[t].shape, graph.tensors[t].dtype, graph.is_const(t), layer.inputs.index(t))
        if t
        else None
        for t in layer.inputs
    )
    outs = tuple(graph.tensors[t].shape for t in layer.outputs)
    return (layer.op, ins, outs, repr(sorted(layer.attrs.items())), single)


def profile_layer(
    graph: Graph, layer: Layer, target: Target, single: bool, noc: tuple[int, ...] = ()
) -> LayerProfile:
    """Lower one layer through the real tilers, every tile on one core.

    `single` lowers it as on a one-core rectangle (some tilers then load a broadcast operand
    once for all tiles); otherwise as on a larger rectangle. `noc`: the operands (positions in
    (*inputs, *outputs)) the plan keeps on chip, which the tilers know (their copies stay DDR
    copies here, re-priced by the caller).
    """
    program = TiledProgram(graph.name, target)
    names = (*layer.inputs, *layer.outputs)
    program.onchip = {names[o]: OnChip(((0, 0),), 1) for o in noc}
    tile_graph = TileGraph("profile")
    builders = [TileBuilder(tile_graph, target, 0)]
    if not single:
        builders.append(TileBuilder(TileGraph("unused"), target, 1))
    lctx = ProfileContext(graph, program, MeshBuilder(builders), target)
    lctx.begin_layer(tuple(range(len(builders))))
    lower = LOWERINGS.get(layer.op)
    if lower is None:
        raise NpuccError(f"no lowering for operator {layer.op} (node '{layer.name}')")
    lower(lctx, layer)
    for out in layer.outputs:
        lctx.builder.close_ddr(out)
    bit: dict[str, int] = {}  # DDR key -> release-class bit of the nodes reading it
    for i, name in enumerate(layer.inputs):
        if name:
            bit.setdefault(name, 1 if graph.is_const(name) else 1 << (1 + i))
    return _summarise(tile_graph, lctx.starts or [0], target, bit, _operands(names))


@lru_cache(maxsize=4096)
def stage_profile(target: Target, elems: int) -> LayerProfile:
    """One home core staging `elems` elements of a constant on chip (`stage_chunk`)."""
    home = OnChip(((0, 0),), max(elems, 1))
    tracker = DdrTracker(onchip={"staged": home})
    builder = TileBuilder(TileGraph("stage"), target, 0, tracker)
    stage_chunk(builder, DdrRef("const"), DdrRef("staged"), elems)
    return _summarise(builder.graph, [0], target, {})


def _summarise(
    g: TileGraph,
    starts: list[int],
    target: Target,
    bit: dict[str, int],
    movable: dict[str, int] | None = None,
) -> LayerProfile:
    """Pack a lowered TileGraph into a LayerProfile (`bit`: release class of each DDR key;
    `movable`: the keys a plan may keep on chip, by operand position)."""
    pipe: list[int | None] = []
    cycles: list[int] = []
    preds: list[tuple[int, ...]] = []
    classes: list[int] = []
    busy = [0] * len(PIPES)
    energy = 0.0
    ddr = lead_ddr = 0
    leading = True  # no input-dependent DDR copy seen yet
    copies: list[DdrCopy] = []
    for node in g.nodes:
        p = PIPES.index(node.pipe) if node.pipe is not None else None
        mask = 0
        for q in g.preds[node.id]:
            mask |= classes[q]
        ins = node.instr
        if ins is not None:
            assert p is not None  # NOTE: every instruction runs on a pipe
            spent = instr_energy(target, ins)
            energy += spent
            busy[p] += node.cycles
            for name in ins.reads:
                ref = getattr(ins, name)
                if isinstance(ref, DdrRef):
                    mask |= bit.get(ref.key, 1)  # a const the lowering generated: bit 0
            mask = mask or 1  # needs no input (a fill): free to run ahead as a const load
            moved = ddr_bytes(target, ins)
            ddr += moved
            if moved and mask != 1:
                leading = False
            lead_ddr += moved if leading else 0
            if type(ins) is Copy:
                side, strides = (
                    (ins.src, ins.src_strides) if isinstance(ins.src, DdrRef) else
                    (ins.dst, ins.dst_strides)
                )  # fmt: skip
                if isinstance(side, DdrRef) and side.key in (movable or {}):
                    hi = side.off + pattern_extent(ins.dims, strides)
                    operand = (movable or {})[side.key]
                    lead = leading and mask == 1
                    tile = max(bisect_right(starts, len(pipe)) - 1, 0)
                    shape = (ins.src.tier, ins.dst.tier, math.prod(ins.dims))
                    copies.append(
                        DdrCopy(
                            len(pipe), operand, side.off, hi, ins, lead, tile, spent, moved, shape
                        )
                    )
        pipe.append(p)
        cycles.append(node.cycles)
        preds.append(tuple(g.preds[node.id]))
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


@dataclass(slots=True)
class ProfileContext(LowerContext):
    """A LowerContext that keeps every tile on the first core and records where tiles start."""

    starts: list[int] = field(default_factory=list)  # first node of each tile

    def next_tile(self) -> None:
        """Start a tile: on core 0, at the next node."""
        self.builder.current = 0
        self.starts.append(len(self.builder.builders[0].graph))
        self.tiles += 1


_Base = tuple[
    "RunCost", tuple[tuple[int, int], ...], tuple[int, int], tuple[int, int, int, int], int
]


@dataclass(slots=True)
class ExecCostModel:
    """Prices plans of one graph on one mesh target as the lowering will execute them."""

    graph: Graph
    target: Target
    _srcs: list[tuple[int | None, ...]] = field(default_factory=list)  # producer per input
    _origin: list[tuple[int | None, ...]] = field(default_factory=list)  # the same, past views
    _data: list[tuple[int, ...]] = field(default_factory=list)  # non-const input classes
    _profiles: dict[tuple, LayerProfile] = field(default_factory=dict)
    # (layer, n, single, operands on chip)
    _keys: dict[tuple[int, int, bool, tuple[int, ...]], tuple] = field(default_factory=dict)
    _by_layer: dict[tuple[int, int, bool, tuple[int, ...]], LayerProfile] = field(
        default_factory=dict
    )  # the same
    _timing_by_layer: dict[tuple[int, int, int], tuple[LayerTiming, ...]] = field(
        default_factory=dict
    )  # (layer, cores, n)
    _parts: dict[int, tuple[Graph, dict[int, Layer]]] = field(default_factory=dict)  # by n
    _split: dict[tuple[int, int], bool] = field(default_factory=dict)  # (layer, n) separable
    _timings: dict[tuple[tuple, int], tuple[LayerTiming, ...]] = field(default_factory=dict)
    _key: dict[str, str] = field(default_factory=dict)  # view tensor -> the tensor it views
    _noc: dict[tuple, _Base] = field(default_factory=dict)  # `noc_layer`
    # `_noc_copy` by (DdrCopy.shape, hops)
    _noc_copies: dict[tuple, tuple[int, float]] = field(default_factory=dict)
    # `_core_timing` by the core's nodes' shape (pipes, predecessors, classes) and cycles
    _core: dict[tuple, LayerTiming] = field(default_factory=dict)
    # (profile, cores, core) -> the core's nodes and the number of their shape
    _core_nodes: dict[tuple, tuple[list[int], int]] = field(default_factory=dict)
    _shapes: list[tuple[list[int | None], list[tuple[int, ...]], list[int]]] = field(
        default_factory=list
    )  # by number
    _shape_ids: dict[str, int] = field(default_factory=dict)  # repr of a shape -> its number
    _flags: dict[tuple[int, int], int] = field(default_factory=dict)  # by footprint ids
    _footprints: dict[tuple[int, ...], int] = field(default_factory=dict)  # `_footprint_id`
    _consumers: dict[str, list[int] | None] = field(default_factory=dict)  # tensor_consumers
    _where: dict[tuple, int] = field(default_factory=dict)  # `_where_id`
    _views: set[int] = field(default_factory=set)  # the view layers (no run of their own)
    _base: dict[tuple, _Base] = field(default_factory=dict)  # `_base_run` by (layer, n, rect)
    _homes: dict[tuple[int, int], tuple[tuple[int, str, bool], ...]] = field(
        default_factory=dict
    )  # (layer, n) -> (operand, on-chip key, const) of each operand a plan may keep on chip

    def __post_init__(self) -> None:
        self._consumers = tensor_consumers(self.graph)
        producer: dict[str, int] = {}
        for index, layer in enumerate(self.graph.layers):
            self._srcs.append(tuple(producer.get(t) for t in layer.inputs))
            self._origin.append(tuple(self._past_views(p) for p in self._srcs[-1]))
            is_const = self.graph.is_const
            self._data.append(
                tuple(c for c, t in enumerate(layer.inputs, 1) if t and not is_const(t))
            )
            for t in layer.outputs:
                producer[t] = index
            if layer.op in VIEW_OPS:
                self._views.add(index)
                self._key[layer.outputs[0]] = self._key.get(layer.inputs[0], layer.inputs[0])

    def _past_views(self, producer: int | None) -> int | None:
        """The layer that wrote the data `producer` writes (a view's: its input's writer)."""
        while producer is not None and self.graph.layers[producer].op in VIEW_OPS:
            producer = self._srcs[producer][0]
        return producer

    def splits(self, index: int, n: int) -> bool:
        """Whether layer `index` runs on n sub-batches (`separable`, memoised)."""
        value = self._split.get((index, n))
        if value is None:
            value = self._split[(index, n)] = separable(self.graph, self.graph.layers[index], n)
        return value

    def part(self, index: int, n: int) -> tuple[Graph, Layer]:
        """Layer `index` as it runs on one of n sub-batches, and a graph holding its tensors."""
        if n == 1:
            return self.graph, self.graph.layers[index]
        if n not in self._parts:
            graph = Graph(self.graph.name, self.graph.opset)
            for t in self.graph.tensors.values():
                graph.add_tensor(t)
            self._parts[n] = (graph, {})
        graph, layers = self._parts[n]
        layer = layers.get(index)
        if layer is None:
            new: dict[str, Tensor] = {}
            layer = layers[index] = part_layer(self.graph, self.graph.layers[index], 0, n, new)
            for t in new.values():
                if t.name not in graph.tensors:
                    graph.add_tensor(t)
        return graph, layer

    def onchip(
        self,
        steps: tuple[Step, ...],
        offchip: frozenset[str] = frozenset(),
        parts: list[Part] | None = None,
    ) -> dict[str, OnChip]:
        """The tensors the lowering keeps on chip under `steps` (as `plan_tensors` decides),
        none of `offchip`; `parts`: the plan's `loop_parts`, if known."""
        cols = self.target.mesh.cols
        cores_of: list[tuple[int, ...] | None] = [None] * len(self.graph.layers)
        for step in steps:
            for group in step.groups:
                cores = group.rect.indices(cols)
                for index in group.layers:
                    if self.graph.layers[index].op not in VIEW_OPS:
                        cores_of[index] = cores
        if parts is None:
            parts = loop_parts(self.graph, steps, self.splits)
        n = len(self.graph.layers)
        loops, spans = part_loops(parts, n), part_spans(parts, n)
        return plan_onchip(
            self.graph, cores_of, self.target, offchip, loops, spans, self._consumers
        )

    @property
    def every_tensor(self) -> frozenset[str]:
        """Every tensor of the graph: as `offchip`, nothing stays on chip."""
        return frozenset(self.graph.tensors)

    def best_edp(self, steps: tuple[Step, ...]) -> float:
        """EDP of a complete plan: the lowest of keeping on chip all it can, all but the staged
        weights, and nothing."""
        parts = loop_parts(self.graph, steps, self.splits)
        kept = self.onchip(steps, frozenset(), parts)
        staged = frozenset(key for key in kept if key not in self.graph.tensors)
        # NOTE: with every tensor through DDR only a split loop's weights may stay on chip
        split = any(p.parts > 1 for p in parts)
        variants = [kept, self.onchip(steps, self.every_tensor | staged, parts) if split else {}]
        if staged:
            variants.append(self.onchip(steps, staged, parts))
        return min(self._cost(steps, parts, v).edp for v in variants)

    def refine_offchip(self, steps: tuple[Step, ...]) -> frozenset[str]:
        """Tensors to send through DDR although they could stay on chip (NoC copies save
        energy but are slower than DDR ones for large tiles). From the better of all on chip
        and none, greedily in graph order: each candidate that lowers the plan's EDP when it
        moves to DDR (resp. back on chip)."""
        candidates = list(self.onchip(steps))
        offchip: frozenset[str] = frozenset()
        best = self.evaluate(steps, offchip).edp
        ddr = self.evaluate(steps, frozenset(candidates)).edp
        start_off = ddr < best
        if start_off:
            offchip, best = frozenset(candidates), ddr
        for t in candidates:
            trial = offchip - {t} if start_off else offchip | {t}
            edp = self.evaluate(steps, trial).edp
            if edp < best:
                offchip, best = trial, edp
        return offchip

    def noc_layer(
        self,
        index: int,
        r: Rect,
        onchip: dict[str, OnChip],
        part: Part | None = None,
        ids: dict[str, int] | None = None,
    ) -> _Base | None:
        """As `_base_run` (the run cost: timings of every used core, energy, DDR bytes and
        channel cycles; and the cores it uses) of layer `index` (or of its `part`) on `r` when
        some of its tensors stay on chip (None when none does; a constant of a split part: its
        staged copy), profiled with the tilers knowing which. Copies of those become NoC
        transfers, priced by cost.py from each tile's core to the homes it reaches. `ids`:
        `_where_id` of each of `onchip`, if known."""
        j, n = (0, 1) if part is None else (part.part, part.parts)
        lookups = self._homes.get((index, n))
        if lookups is None:
            lookups = self._homes[(index, n)] = self._lookups(index, n)
        homes: dict[int, OnChip] = {}
        placed = []
        for operand, key, const in lookups:
            if const and part is not None:
                key = staged_key(key, part.loop)
            where = onchip.get(key)
            if where is not None:
                homes[operand] = where
                placed.append((operand, self._where_id(where) if ids is None else ids[key]))
        if not homes:
            return None
        memo = (index, j, n, r.x, r.y, r.w, r.h, tuple(placed))
        value = self._noc.get(memo)
        if value is not None:
            return value
        prof = self.profile(index, r.cores, n, tuple(sorted(homes)))
        layer = self.graph.layers[index]
        names = (*layer.inputs, *layer.outputs)  # a shared profile's operands, by position
        used = _used_cores(r, prof.ntiles)
        over: list[dict[int, int]] = [{} for _ in used]
        energy = prof.energy_pj
        ddr, lead = prof.ddr_bytes, prof.lead_ddr_bytes
        offsets = {
            o: slice_offset(self.graph, names[o], j, n, where)
            if n > 1 and not self.graph.is_const(names[o])
            else 0
            for o, where in homes.items()
        }
        cores = len(used)
        for c in prof.copies:
            where = homes.get(c.operand)
            if where is None:
                continue
            k = c.tile % cores
            at = offsets[c.operand]
            hops = where.hops(used[k], c.lo + at, c.hi + at)
            priced = self._noc_copies.get((c.shape, hops))
            if priced is None:
                priced = self._noc_copies[(c.shape, hops)] = self._noc_copy(c.instr, hops)
            over[k][c.node] = priced[0]
            energy += priced[1] - c.energy_pj
            ddr -= c.ddr
            lead -= c.ddr if c.lead else 0
        # NOTE: equal timings once each (the list schedule takes the first of the latest)
        timings = tuple(
            dict.fromkeys(self._core_timing(prof, cores, k, over[k]) for k in range(cores))
        )
        footprint, first, box = _footprint(r, prof.ntiles, self.target.mesh.cols)
        value = self._noc[memo] = (
            self._run_cost(timings, energy, ddr, lead),
            core_spans(footprint),
            first,
            box,
            self._footprint_id(footprint),
        )
        return value

    def _noc_copy(self, ins: Copy, hops: int) -> tuple[int, float]:
        """Cycles and energy of DDR copy `ins` made a NoC transfer over `hops` hops."""
        noc = NocCopy(ins.dst, ins.src, ins.dims, ins.dst_strides, ins.src_strides, hops)
        return instr_cycles(self.target, noc), instr_energy(self.target, noc)

    def _where_id(self, where: OnChip) -> int:
        """A number per distinct (homes, chunk, slot, slots) of an on-chip tensor: what its
        NoC copies depend on (not its offset or life)."""
        return _number(self._where, (where.homes, where.chunk, where.slot, where.slots))

    def _lookups(self, index: int, n: int) -> tuple[tuple[int, str, bool], ...]:
        """Per operand of layer `index` (on one of n sub-batches) that a plan may keep on chip,
        in order: its position, the key `plan_onchip` keeps it by (a const: its name, staged
        per loop, and only when split) and whether it is a const."""
        layer = self.graph.layers[index]
        out = []
        for name, operand in _operands((*layer.inputs, *layer.outputs)).items():
            if not self.graph.is_const(name):
                out.append((operand, self._key.get(name, name), False))
            elif n > 1:
                out.append((operand, name, True))
        return tuple(out)

    def _core_timing(
        self, prof: LayerProfile, cores: int, core: int, cycles: dict[int, int]
    ) -> LayerTiming:
        """`prof.core_timing` memoised by what it depends on, the core's nodes' shape and cycles:
        cores with alike tiles and layers of one signature often get the same NoC cycles
        (repeated blocks on equal rectangles)."""
        local = self._core_nodes.get((id(prof), cores, core))
        if local is None:
            nodes, pipe, preds, classes = prof.core_nodes(cores, core)
            shaped = (pipe, preds, classes)
            shape = self._shape_ids.setdefault(repr(shaped), len(self._shapes))
            if shape == len(self._shapes):
                self._shapes.append(shaped)
            local = self._core_nodes[(id(prof), cores, core)] = (nodes, shape)
        nodes, shape = local
        duration = prof.cycles
        key = (shape, tuple([cycles.get(v, duration[v]) for v in nodes]))
        value = self._core.get(key)
        if value is None:
            value = self._core[key] = core_timing(list(key[1]), *self._shapes[shape])
        return value

    def profile(
        self, index: int, cores: int, n: int = 1, noc: tuple[int, ...] = ()
    ) -> LayerProfile:
        """The profile of layer `index` (on one of n sub-batches) on a rectangle of `cores`
        cores, with its operands `noc` on chip (memoised)."""
        single = cores == 1
        # NOTE: by layer first: a signature is a deep tuple, hashed anew on every lookup
        prof = self._by_layer.get((index, n, single, noc))
        if prof is not None:
            return prof
        key = self._keys.get((index, n, single, noc))
        if key is None:
            graph, layer = self.part(index, n)
            sig = layer_signature(graph, layer, single)
            key = self._keys[(index, n, single, noc)] = (*sig, noc)
        prof = self._profiles.get(key)
        if prof is None:
            graph, layer = self.part(index, n)
            prof = self._profiles[key] = profile_layer(graph, layer, self.target, single, noc)
        self._by_layer[(index, n, single, noc)] = prof
        return prof

    def timing(self, index: int, cores: int, n: int = 1) -> tuple[LayerTiming, ...]:
        """Timings of layer `index` (on one of n sub-batches) on a rectangle of `cores` cores
        (memoised)."""
        value = self._timing_by_layer.get((index, cores, n))
        if value is not None:
            return value
        prof = self.profile(index, cores, n)
        used = min(cores, prof.ntiles)
        key = (self._keys[(index, n, cores == 1, ())], used)
        value = self._timings.get(key)
        if value is None:
            value = self._timings[key] = prof.timing(used)
        self._timing_by_layer[(index, cores, n)] = value
        return value

    def evaluate(self, steps: tuple[Step, ...], offchip: frozenset[str] = frozenset()) -> Cost:
        """Energy, latency and DDR bytes of a complete plan (single-layer groups).

        Layers in lowering order; a layer's input-reading nodes start once its cores passed
        their previous barrier and the input's producers closed it (plus the flag's hops); its
        const loads once its cores' MTE2 finished the previous layer's loads. Its end is the
        latest of (release + tail) over its classes and (earliest release + cold duration).
        On a mesh each layer's DDR bytes also pass the shared DDR channel, in lowering order:
        its leading const loads once its cores' MTE2 is free, the rest once its first non-const
        input is released; it ends no earlier than the channel is done with it plus the cycles
        its slowest core runs after its last load.
        """
        parts = loop_parts(self.graph, steps, self.splits)
        return self._cost(steps, parts, self.onchip(steps, offchip, parts))

    def _cost(self, steps: tuple[Step, ...], parts: list[Part], onchip: dict[str, OnChip]) -> Cost:
        """`evaluate` given the plan's `loop_parts` and what it keeps on chip."""
        runs = self._runs(steps, parts, onchip)
        energy = sum(run.cost.energy for run in runs)
        ddr = sum(run.cost.ddr for run in runs)
        latency = schedule(self.target, runs)
        return Cost(energy_pj=energy, latency_cycles=float(latency), dram_bytes=float(ddr))

    def _runs(
        self, steps: tuple[Step, ...], parts: list[Part], onchip: dict[str, OnChip]
    ) -> list[LayerRun]:
        """How each layer (each part of a split one) runs under the plan (its `loop_parts`,
        keeping `onchip` on chip), in lowering order; views are none (a reader waits for the
        layer that wrote the data)."""
        rect_of: dict[int, tuple[Rect, tuple[int, int, int, int]]] = {}
        for step in steps:
            for group in step.groups:
                r = group.rect
                where = (r, (r.x, r.y, r.w, r.h))
                for index in group.layers:
                    rect_of[index] = where
        runs: list[LayerRun] = []
        runs_of: dict[int, list[int]] = {}  # layer -> its runs so far, part by part
        parts_of: dict[int, int] = {}  # layer -> how many parts it runs in
        views, base_runs = self._views, self._base
        ids = {key: self._where_id(where) for key, where in onchip.items()}
        for p in oldest_first(parts):
            index, n = p.layer, p.parts
            if index in views:
                continue
            r, corners = rect_of[index]
            if n > 1 and p.part == 0:
                runs += self._stages(index, p.loop, onchip)
            base = base_runs.get((index, n, corners))
            if base is None:
                base = base_runs[(index, n, corners)] = self._base_run(index, r, n)
            if onchip:
                base = self.noc_layer(index, r, onchip, p, ids) or base
            cost, spans, first, box, at = base
            srcs = tuple(
                self._flagged(
                    runs,
                    () if src is None else covering(runs_of[src], parts_of[src], p.part, n),
                    first,
                    at,
                )
                for src in self._origin[index]
            )
            runs_of.setdefault(index, []).append(len(runs))
            parts_of[index] = n
            runs.append(LayerRun(cost, spans, box, self._data[index], srcs, at))
        return runs

    def _base_run(self, index: int, r: Rect, n: int) -> _Base:
        """Layer `index` (on one of n sub-batches) on `r` with every tensor through DDR: its
        cost, its cores (`core_spans`), its first core, their bounding box (`_footprint`) and
        their number (`_footprint_id`)."""
        prof = self.profile(index, r.cores, n)
        cost = self._run_cost(
            self.timing(index, r.cores, n), prof.energy_pj, prof.ddr_bytes, prof.lead_ddr_bytes
        )
        cores, first, box = _footprint(r, prof.ntiles, self.target.mesh.cols)
        return cost, core_spans(cores), first, box, self._footprint_id(cores)

    def _run_cost(
        self, timings: tuple[LayerTiming, ...], energy: float, ddr: int, lead: int
    ) -> RunCost:
        """A run's figures from its timings, energy, DDR bytes and leading const DDR bytes."""
        held = ddr_channel_held(self.target, lead)
        rest = ddr_channel_held(self.target, ddr - lead)
        return RunCost(timings, energy, ddr, held, rest, max(t.mte2_tail for t in timings))

    def _flagged(
        self, runs: list[LayerRun], srcs: tuple[int, ...], first: tuple[int, int], at: int
    ) -> tuple[tuple[int, int], ...]:
        """Per run in `srcs` (none: a graph input), its position + 1 in the schedule's ends
        (0: READY's finish) and the cycles its closing flag takes to core `first` (of the
        cores numbered `at`, `_footprint_id`)."""
        out = []
        flags = self._flags
        for k in srcs or (-1,):
            src = READY_AT if k < 0 else runs[k].at
            flag = flags.get((src, at))
            if flag is None:
                box = READY if k < 0 else runs[k].box
                flag = flags[(src, at)] = sync_cycles(self.target, farthest(box, first), first)
            out.append((k + 1, flag))
        return tuple(out)

    def _footprint_id(self, cores: tuple[int, ...]) -> int:
        """A number per distinct set of cores a run uses (its first core and box follow)."""
        return _number(self._footprints, cores)

    def _stages(self, index: int, loop: int, onchip: dict[str, OnChip]) -> list[LayerRun]:
        """The stagings of layer `index`'s constants that sub-batch loop `loop` keeps on chip
        (the lowering's `stage_const`, before the layer's first sub-batch): each home core
        copies its chunk from DDR into its on-chip buffer."""
        runs = []
        cols, eb = self.target.mesh.cols, self.target.elem_bytes
        for name in self.graph.layers[index].inputs:
            home = onchip.get(staged_key(name, loop)) if name else None
            if home is None:
                continue
            elems = math.prod(self.graph.tensors[name].shape)
            sizes = [min(home.chunk, elems - i * home.chunk) for i in range(len(home.homes))]
            timing = stage_profile(self.target, sizes[0]).timing(1)
            ys = [y for y, _ in home.homes]
            xs = [x for _, x in home.homes]
            energy = sum(stage_profile(self.target, size).energy_pj for size in sizes)
            cost = RunCost(
                timing, energy, elems * eb, ddr_channel_held(self.target, elems * eb), 0,
                timing[0].mte2_tail,
            )  # fmt: skip
            cores = tuple(y * cols + x for y, x in home.homes)
            box = (min(ys), min(xs), max(ys), max(xs))
            runs.append(
                LayerRun(cost, core_spans(cores), box, (), (), READY_AT)
            )  # NOTE: read by none
        return runs


@lru_cache(maxsize=65536)
def _footprint(
    r: Rect, tiles: int, cols: int
) -> tuple[tuple[int, ...], tuple[int, int], tuple[int, int, int, int]]:
    """Of the cores of `r` that get a tile: their row-major indices, the first's (row, col)
    and their bounding box y0, x0, y1, x1."""
    used = _used_cores(r, tiles)
    ys = [y for y, _ in used]
    xs = [x for _, x in used]
    return tuple(y * cols + x for y, x in used), used[0], (min(ys), min(xs), max(ys), max(xs))


@lru_cache(maxsize=65536)
def _used_cores(r: Rect, tiles: int) -> tuple[tuple[int, int], ...]:
    """(row, col) of the cores of `r` that get a tile: the first `tiles` in row-major order."""
    return r.coords()[:tiles]


def _number(table: dict, key: tuple) -> int:
    """`key`'s number in `table`, the next one if it is new (0, 1, ... in order of first use)."""
    value = table.get(key)
    if value is None:
        value = table[key] = len(table)
    return value


def _operands(names: tuple[str, ...]) -> dict[str, int]:
    """Each tensor among a layer's operands `names` (*inputs, *outputs) by its first position
    (a profile's operand index)."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name:
            first.setdefault(name, i)
    return first
