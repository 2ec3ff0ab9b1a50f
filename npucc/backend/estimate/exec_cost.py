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
profiled on its slices, and a part waits for the parts of its producers that cover its slice
and its on-chip writes for the runs the lowering gates them on (npucc.backend.estimate.gates).
docs/cost-model.md ("Interpreter vs cost model") states the rules and the measured errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import islice

from npucc.backend.estimate.core_times import CoreTimes
from npucc.backend.estimate.gates import Gates, Tenants, gate_keys
from npucc.backend.estimate.list_schedule import (
    READY,
    READY_AT,
    LayerRun,
    LayerTiming,
    RunCost,
    channel_bound,
    core_spans,
    covering,
    decisive,
    farthest,
    footprint,
    oldest_first,
    schedule,
    used_cores,
)
from npucc.backend.estimate.prefix import Prefixes, Trace, resumed
from npucc.backend.estimate.profile import (
    CopyRows,
    LayerProfile,
    copy_rows,
    layer_signature,
    noc_priced,
    operand_positions,
    profile_layer,
)
from npucc.backend.estimate.staging import stage_runs
from npucc.backend.estimate.unsplit_places import UnsplitPlaces, number, placed_from
from npucc.backend.hypercut.onchip_plan import (
    Placed,
    Whole,
    plan_onchip,
    staged_key,
    tensor_consumers,
    whole_tensors,
)
from npucc.backend.lower.subbatch import (
    Part,
    loop_parts,
    part_layer,
    part_loops,
    part_spans,
    separable,
    slice_offset,
)
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_schema import VIEW_OPS
from npucc.ir.isa import Copy, NocCopy
from npucc.ir.isa_cost import instr_cycles, instr_energy
from npucc.ir.onchip import OnChip
from npucc.ir.plan import Cost, Rect, Step
from npucc.target import Target
from npucc.target.cost import ddr_channel_held, sync_cycles

# the relative rounding `best_edp`'s bound of all through DDR allows for (a sum of n positive
# floats in another order differs by at most n ulps: far below this)
_MARGIN = 1e-9

_Base = tuple[
    "RunCost", tuple[tuple[int, int], ...], tuple[int, int], tuple[int, int, int, int], int
]
# per non-view layer of a step: its index, its rectangle and corners (x, y, w, h), its cores
_Layout = tuple[tuple[int, tuple[Rect, tuple[int, int, int, int]], tuple[int, ...]], ...]


@dataclass(slots=True)
class ExecCostModel:
    """Prices plans of one graph on one mesh target as the lowering will execute them."""

    graph: Graph
    target: Target
    memo: dict = field(default_factory=dict)  # the lowerings' (`profile_layer`)
    _srcs: list[tuple[int | None, ...]] = field(default_factory=list)  # producer per input
    _origin: list[tuple[int | None, ...]] = field(default_factory=list)  # the same, past views
    _data: list[tuple[int, ...]] = field(default_factory=list)  # non-const input classes
    _profiles: dict[tuple, LayerProfile] = field(default_factory=dict)
    # by signature, whatever the operands on chip: the profiles by decision (`profile_layer`)
    _decided: dict[tuple, dict] = field(default_factory=dict)
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
    # `_noc_copy` by DdrCopy.shape, then hops
    _noc_copies: dict[tuple, dict[int, tuple[int, float]]] = field(default_factory=dict)
    # `copy_rows` by (id of the profile, cores); NOTE: an id stays its profile's: `_profiles`
    # holds every profile for the model's life
    _copy_rows: dict[tuple[int, int], CopyRows] = field(default_factory=dict)
    # `noc_layer`'s timings by (profile, cores, every core's copies' cycles: `noc_priced`'s)
    _timed_cores: dict[tuple, tuple[LayerTiming, ...]] = field(default_factory=dict)
    _core_times: CoreTimes = field(default_factory=CoreTimes)  # `noc_layer`'s per core
    # a closing flag's cycles by the footprint ids of reader and writer
    _flags: dict[int, dict[int, int]] = field(default_factory=dict)
    _footprints: dict[tuple[int, ...], int] = field(default_factory=dict)  # `_footprint_id`
    _consumers: dict[str, list[int] | None] = field(default_factory=dict)  # tensor_consumers
    _whole: Whole = ()  # whole_tensors
    _views: set[int] = field(default_factory=set)  # the view layers (no run of their own)
    # per layer, its run's position in an unsplit plan's runs (its number among the non-views)
    _run_of: list[int] = field(default_factory=list)
    _whole_parts: list[Part] = field(default_factory=list)  # every layer whole, graph order
    _base: dict[tuple, _Base] = field(default_factory=dict)  # `_base_run` by (layer, n, rect)
    _homes: dict[tuple[int, int, int], tuple[tuple[int, str], ...]] = field(
        default_factory=dict
    )  # (layer, n, loop) -> (operand, on-chip key) of each operand a plan may keep on chip
    _producer: dict[str, int] = field(default_factory=dict)  # tensor -> the layer writing it
    _gate_keys: dict[tuple[int, int, int], tuple] = field(default_factory=dict)  # `gate_keys`
    _tenants: Tenants = field(init=False)  # the write gates of unsplit plans
    _places: UnsplitPlaces = field(init=False)  # the placements of unsplit plans
    _prefixes: Prefixes = field(default_factory=Prefixes)  # the unsplit plans priced
    _layouts: dict[Step, _Layout] = field(default_factory=dict)  # `_layout`
    _wheres: dict[Step, tuple[dict, dict]] = field(default_factory=dict)  # `_where_of`
    # `_unsplit_runs`' runs (and their all-DDR bounds) by what they depend on
    _runs: dict[tuple, tuple[LayerRun, float, int, float, int]] = field(default_factory=dict)
    # per layer, the run positions + 1 of the writers of its inputs (`_origin`; 0: a graph
    # input), their places in a `Trace`'s `ats`
    _wires: list[tuple[int, ...]] = field(default_factory=list)
    # per layer, the on-chip keys of the operands `noc_layer` may find on chip (unsplit)
    _home_keys: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._consumers = tensor_consumers(self.graph)
        self._whole = whole_tensors(self.graph, self._consumers)
        producer = self._producer
        for index, layer in enumerate(self.graph.layers):
            self._srcs.append(tuple(producer.get(t) for t in layer.inputs))
            self._origin.append(tuple(self._past_views(p) for p in self._srcs[-1]))
            is_const = self.graph.is_const
            self._data.append(
                tuple(c for c, t in enumerate(layer.inputs, 1) if t and not is_const(t))
            )
            for t in layer.outputs:
                producer[t] = index
            self._run_of.append(index - len(self._views))
            if layer.op in VIEW_OPS:
                self._views.add(index)
                self._key[layer.outputs[0]] = self._key.get(layer.inputs[0], layer.inputs[0])
        self._tenants = Tenants(self._origin, self._data, self._whole)
        self._places = UnsplitPlaces(self.graph, self.target, self._consumers, self._whole)
        self._whole_parts = [Part(index) for index in range(len(self.graph.layers))]
        self._wires = [
            tuple(0 if p is None else self._run_of[p] + 1 for p in o) for o in self._origin
        ]
        self._home_keys = [
            tuple(key for _, key in self._lookups(i, 1, 0)) for i in range(len(self.graph.layers))
        ]

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
        """The tensors the lowering keeps on chip under `steps` (as `plan_tensors` decides, but
        each tensor's life whole: without its lives home by home), none of `offchip`; `parts`:
        the plan's `loop_parts`, if known."""
        n = len(self.graph.layers)
        if parts is None:
            parts = loop_parts(self.graph, steps, self.splits)
        loops: list[tuple[int, int, int]] | None = None
        spans: list[tuple[int, int]] | None = None
        # NOTE: one part per layer is no split (a split layer has a part per sub-batch), in
        # graph order (`loop_parts`): `plan_onchip`'s defaults, which place alike (no handoff
        # and no staged weight without a split), without building them per plan
        if len(parts) != n:
            loops, spans = part_loops(parts, n), part_spans(parts, n)
        cores_of: list[tuple[int, ...] | None] = [None] * n
        layout = self._layouts.get
        for step in steps:
            for index, _, cores in layout(step) or self._layout(step):
                cores_of[index] = cores
        # NOTE: without `positions`: the estimate prices every tensor's life whole, and the
        # lowering's lives home by home only free room for it (npucc.backend.hypercut.onchip_plan)
        return plan_onchip(
            self.graph, cores_of, self.target, offchip, loops, spans, self._consumers,
            whole=self._whole,
        )  # fmt: skip

    @property
    def every_tensor(self) -> frozenset[str]:
        """Every tensor of the graph: as `offchip`, nothing stays on chip."""
        return frozenset(self.graph.tensors)

    def best_edp(self, steps: tuple[Step, ...]) -> float:
        """EDP of a complete plan: the lowest of keeping on chip all it can, all but the staged
        weights, and nothing."""
        # NOTE: no step split, graph order (`loop_parts`): an unsplit plan's pricing never
        # reads its parts' loop numbers (they name a split loop's staged constants only)
        nosplit = all(step.nsub == 1 for step in steps)
        parts = self._whole_parts if nosplit else loop_parts(self.graph, steps, self.splits)
        # NOTE: with every tensor through DDR only a split loop's weights may stay on chip
        split = any(p.parts > 1 for p in parts)
        if not split:  # nothing staged: all it can on chip, and nothing
            trace = self._unsplit_trace(steps, parts)
            best = trace.edp
            energy, held = trace.ddr[-1]
            # NOTE: all through DDR is bounded out (`_edp`) when its energy times its channel
            # bound is not below `best`; the running sums prove it without pricing it, their
            # rounding (against `sum`'s) covered by a relative margin far above it
            if energy * held * (1 - _MARGIN) >= best:
                return best
            return min(best, self._edp(steps, parts, {}, best))
        kept = self.onchip(steps, frozenset(), parts)
        staged = frozenset(key for key in kept if key not in self.graph.tensors)
        variants = [kept, self.onchip(steps, self.every_tensor | staged, parts)]
        if staged:
            # NOTE: `plan_onchip` places the staged copies after every tensor, in the room they
            # left: without them the tensors are placed as in `kept`
            variants.append({key: where for key, where in kept.items() if key not in staged})
        best = math.inf
        for onchip in variants:
            # NOTE: on light ResNet-50 mesh8x8 all through DDR never wins and is bounded out
            # 11,379 times of 11,418
            best = min(best, self._edp(steps, parts, onchip, best))
        return best

    def _edp(
        self,
        steps: tuple[Step, ...],
        parts: list[Part],
        onchip: dict[str, OnChip],
        beat: float = math.inf,
    ) -> float:
        """The EDP of `evaluate` given the plan's `loop_parts` and what it keeps on chip;
        infinite, unscheduled, when its energy times its DDR channel bound (`channel_bound`)
        is not below `beat` (then neither is its EDP)."""
        priced = self._priced(self._rects(steps)[0], parts, onchip)
        energy = sum(_cost_of(item).energy for item in priced)
        if energy * float(channel_bound(self.target, map(_cost_of, priced))) >= beat:
            return math.inf
        return self._timed(energy, self._linked(priced, onchip)).edp

    def _unsplit_trace(
        self, steps: tuple[Step, ...], parts: list[Part], offchip: frozenset[str] = frozenset()
    ) -> Trace:
        """The `Trace` of an unsplit plan keeping on chip all it can but `offchip`, priced
        going on from the longest prefix of its rectangles (and of its layers whose output
        `offchip` holds) a plan priced before shares (npucc.backend.estimate.prefix)."""
        rect_of, key_of = self._rects(steps)
        keys: list[tuple[int, ...] | None] = list(map(key_of.get, range(len(parts))))  # view: None
        layers = self.graph.layers
        for index, t in sorted((self._producer[t], t) for t in offchip):
            keys[index] = (*(keys[index] or ()), -1 - layers[index].outputs.index(t))  # DDR
        trace, depth, newer = self._prefixes.find(keys)
        if trace is not None and depth == len(keys):
            return trace
        placed: list[Placed] = []
        kept: dict[str, OnChip] = {}
        energy: list[float] = [0]
        ddr: list[tuple[float, int]] = [(0.0, 0)]
        tensors, items = 0, 0
        if trace is not None:
            tensors, items = self._upto(trace, depth)
            placed = trace.placed[:tensors]
            kept = dict(islice(trace.kept.items(), tensors))
            energy = trace.energy[: items + 1]
            ddr = trace.ddr[: items + 1]
        states = trace.states[: depth + 1] if trace is not None else [0]
        where_ids = trace.ids[:tensors] if trace is not None else []
        placed_from(self._places, keys, rect_of, offchip, states, placed, kept, where_ids)
        runs: list[LayerRun] = trace.runs[:items] if trace is not None else []
        ats = trace.ats[: items + 1] if trace is not None else [READY_AT]
        waits = self._tenants.waits(placed, kept, tensors)
        ids = dict(zip(kept, where_ids, strict=True))
        total = self._unsplit_runs(rect_of, depth, kept, ids, runs, ats, energy, ddr, waits)
        at = resumed(self.target, trace, items, len(runs))
        edp = total * float(schedule(self.target, runs[items:], at))
        made = Trace(placed, kept, runs, energy, at, edp, ddr, where_ids, states, ats)
        self._prefixes.add(keys, newer, made)
        return made

    def _unsplit_runs(
        self,
        rect_of: dict[int, tuple[Rect, tuple[int, int, int, int]]],
        depth: int,
        kept: dict[str, OnChip],
        ids: dict[str, int],
        runs: list[LayerRun],
        ats: list[int],
        energy: list[float],
        ddr: list[tuple[float, int]],
        waits: dict[int, set[int]],
    ) -> float:
        """An unsplit plan's runs of its layers from `depth` on (`_priced` then `_linked`),
        appended to `runs` (its runs before `depth`), with their footprint ids `ats`, the
        running sums `energy` and `ddr` (`Trace`'s); returns the energy. `ids`: `where_id` of
        each of `kept`; `waits`: `Tenants.waits`.

        NOTE: a run is a function of its layer, its rectangle, the `where_id` of each operand
        `noc_layer` may find on chip (None: not on chip), the footprint ids of the runs writing
        its inputs (a flag is one of the reader's and the writer's footprints) and the runs its
        writes wait for with theirs: `_runs` holds each by these, shared by the plans that
        meet it (light ResNet-50 mesh8x8: ~8,500 distinct of ~250,000)."""
        views, memo, run_of = self._views, self._runs, self._run_of
        wires, homes, id_of, at_of = self._wires, self._home_keys, ids.get, ats.__getitem__
        total = energy[-1]
        ddr_energy, held = ddr[-1]
        for index in range(depth, len(self.graph.layers)):
            if index in views:
                continue
            got = waits.get(index)
            key = (
                index, rect_of[index][1], *map(id_of, homes[index]), *map(at_of, wires[index])
            )  # fmt: skip
            if got:
                ks = sorted([run_of[j] + 1 for j in got])
                key = (*key, *ks, *map(at_of, ks))
            value = memo.get(key)
            if value is None:
                value = memo[key] = self._unsplit_run(index, rect_of[index], kept, ids, runs, got)
            run, mine, at, bound, channel = value
            runs.append(run)
            ats.append(at)
            total += mine
            energy.append(total)
            ddr_energy += bound
            held += channel
            ddr.append((ddr_energy, held))
        return total

    def _unsplit_run(
        self,
        index: int,
        where: tuple[Rect, tuple[int, int, int, int]],
        kept: dict[str, OnChip],
        ids: dict[str, int],
        runs: list[LayerRun],
        got: set[int] | None,
    ) -> tuple[LayerRun, float, int, float, int]:
        """`_unsplit_runs`' run of layer `index` on `where` (its rectangle and corners) after
        `runs`, its energy and footprint id, and its all-DDR run's energy and `channel_bound`
        (`best_edp`'s bound)."""
        r, corners = where
        base = self._base.get((index, 1, corners))
        if base is None:
            base = self._base[(index, 1, corners)] = self._base_run(index, r, 1)
        bound, channel = base[0].energy, channel_bound(self.target, (base[0],))
        if kept:
            base = self.noc_layer(index, r, corners, kept, self._whole_parts[index], ids) or base
        cost, spans, first, box, at = base
        row = self._flags.get(at)
        if row is None:
            row = self._flags[at] = {}
        srcs = []
        for src in self._origin[index]:
            k = -1 if src is None else self._run_of[src]
            srcs.append(((k + 1, self._flag(row, *_written(runs, k), first)),))
        if got:
            self._gate(row, runs, sorted([self._run_of[j] for j in got]), first, srcs, index)
        run = LayerRun(cost, spans, box, self._data[index], tuple(srcs), at)
        return run, cost.energy, at, bound, channel

    def _upto(self, trace: Trace, depth: int) -> tuple[int, int]:
        """How many of an unsplit plan's kept tensors and priced items (both in graph order)
        belong to its layers before `depth`."""
        tensors = 0
        for key in trace.kept:
            if self._producer[key] >= depth:
                break
            tensors += 1
        return tensors, self._run_of[depth]  # NOTE: a run per non-view layer, in graph order

    def refine_offchip(self, steps: tuple[Step, ...]) -> frozenset[str]:
        """Tensors to send through DDR although they could stay on chip (NoC copies save
        energy but are slower than DDR ones for large tiles). From the better of all on chip
        and none, greedily in graph order: each candidate that lowers the plan's EDP when it
        moves to DDR (resp. back on chip)."""
        parts = loop_parts(self.graph, steps, self.splits)
        split = any(p.parts > 1 for p in parts)

        def edp(offchip: frozenset[str], beat: float = math.inf) -> float:
            """The plan's EDP with `offchip` through DDR (infinite, or unbounded by `beat`,
            when it is not below `beat`: either way not chosen)."""
            if split:
                return self._edp(steps, parts, self.onchip(steps, offchip, parts), beat)
            return self._unsplit_trace(steps, parts, offchip).edp  # NOTE: shares the prefix

        candidates = list(self.onchip(steps, frozenset(), parts))
        offchip: frozenset[str] = frozenset()
        best = edp(offchip)
        ddr = edp(frozenset(candidates), best)
        start_off = ddr < best
        if start_off:
            offchip, best = frozenset(candidates), ddr
        for t in candidates:
            trial = offchip - {t} if start_off else offchip | {t}
            value = edp(trial, best)
            if value < best:
                offchip, best = trial, value
        return offchip

    def noc_layer(
        self,
        index: int,
        r: Rect,
        corners: tuple[int, int, int, int],
        onchip: dict[str, OnChip],
        part: Part,
        ids: dict[str, int],
    ) -> _Base | None:
        """As `_base_run` (the run cost: timings of every used core, energy, DDR bytes and
        channel cycles; and the cores it uses) of layer `index` (or of its `part`) on `r` when
        some of its tensors stay on chip (None when none does; a constant of a split part: its
        staged copy), profiled with the tilers knowing which. Copies of those become NoC
        transfers, priced by cost.py from each tile's core to the homes it reaches. `corners`:
        `r`'s (x, y, w, h); `ids`: `where_id` of each of `onchip`."""
        j, n, loop = part.part, part.parts, part.loop
        lookups = self._homes.get((index, n, loop))
        if lookups is None:
            lookups = self._homes[(index, n, loop)] = self._lookups(index, n, loop)
        # NOTE: `ids` holds exactly the keys of `onchip` a lookup may find
        placed = tuple([(o, i) for o, key in lookups if (i := ids.get(key)) is not None])
        if not placed:
            return None
        memo = (index, j, n, corners, placed)
        value = self._noc.get(memo)
        if value is not None:
            return value
        homes = {operand: onchip[key] for operand, key in lookups if key in onchip}
        prof = self.profile(index, r.cores, n, tuple(sorted(homes)))
        layer = self.graph.layers[index]
        names = (*layer.inputs, *layer.outputs)  # a shared profile's operands, by position
        used = used_cores(r, prof.ntiles)
        offsets = {
            o: slice_offset(self.graph, names[o], j, n, where)
            if n > 1 and not self.graph.is_const(names[o])
            else 0
            for o, where in homes.items()
        }
        cores = len(used)
        rows = self._copy_rows.get((id(prof), cores))
        if rows is None:
            mesh = self.target.mesh
            rows = self._copy_rows[(id(prof), cores)] = copy_rows(
                prof, cores, self._noc_copies, mesh.rows + mesh.cols - 1
            )
        over, energy, ddr, lead = noc_priced(prof, rows, homes, offsets, used, self._noc_copy)
        # NOTE: equal timings once each (the list schedule takes the first of the latest); all
        # of a function of the profile, its cores and their copies' cycles
        at = (id(prof), cores, over.tobytes())
        timings = self._timed_cores.get(at)
        if timings is None:
            timings = self._timed_cores[at] = self._core_times.timings(prof, rows, over)
        cores_used, first, box = footprint(r, prof.ntiles, self.target.mesh.cols)
        value = self._noc[memo] = (
            self._run_cost(timings, energy, ddr, lead),
            core_spans(cores_used),
            first,
            box,
            self._footprint_id(cores_used),
        )
        return value

    def _noc_copy(self, ins: Copy, hops: int) -> tuple[int, float]:
        """Cycles and energy of DDR copy `ins` made a NoC transfer over `hops` hops."""
        noc = NocCopy(ins.dst, ins.src, ins.dims, ins.dst_strides, ins.src_strides, hops)
        return instr_cycles(self.target, noc), instr_energy(self.target, noc)

    def _lookups(self, index: int, n: int, loop: int) -> tuple[tuple[int, str], ...]:
        """Per operand of layer `index` (on one of n sub-batches, in sub-batch loop `loop`)
        that a plan may keep on chip, in order: its position and the key `plan_onchip` keeps
        it by (a const: its copy staged for the loop, and only when split)."""
        layer = self.graph.layers[index]
        out = []
        for name, operand in operand_positions((*layer.inputs, *layer.outputs)).items():
            if not self.graph.is_const(name):
                out.append((operand, self._key.get(name, name)))
            elif n > 1:
                out.append((operand, staged_key(name, loop)))
        return tuple(out)

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
            sig = layer_signature(graph, layer, single, self.target)
            key = self._keys[(index, n, single, noc)] = (*sig, noc)
        prof = self._profiles.get(key)
        if prof is None:
            graph, layer = self.part(index, n)
            # NOTE: any neighbours (`near`), `single` and `noc` (ProfileContext)
            known = self._decided.setdefault(key[:-3], {})
            prof = self._profiles[key] = profile_layer(
                graph, layer, self.target, single, noc, self.memo, known
            )
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
        """`evaluate` given the plan's `loop_parts` and what it keeps on chip: how each layer
        (each part of a split one) runs, in lowering order, list-scheduled."""
        runs = self._linked(self._priced(self._rects(steps)[0], parts, onchip), onchip)
        return self._timed(sum(run.cost.energy for run in runs), runs)

    def _timed(self, energy: float, runs: list[LayerRun]) -> Cost:
        """The cost of `runs` (their energy summed in order: `energy`), list-scheduled."""
        ddr = sum(run.cost.ddr for run in runs)
        latency = schedule(self.target, runs)
        return Cost(energy_pj=energy, latency_cycles=float(latency), dram_bytes=float(ddr))

    def _priced(
        self,
        rect_of: dict[int, tuple[Rect, tuple[int, int, int, int]]],
        parts: list[Part],
        onchip: dict[str, OnChip],
        ids: dict[str, int] | None = None,
    ) -> list[LayerRun | tuple[Part, _Base]]:
        """`_runs` before their inputs are linked: per layer part its `_base_run` (or
        `noc_layer`), per staging its run, in lowering order; `rect_of`: per layer its
        rectangle and its corners (`_rects`); `ids`: `where_id` of each of `onchip`, if known."""
        out: list[LayerRun | tuple[Part, _Base]] = []
        views, base_runs = self._views, self._base
        if ids is None:
            ids = {key: self._places.where_id(where) for key, where in onchip.items()}
        for p in oldest_first(parts):
            index, n = p.layer, p.parts
            if index in views:
                continue
            r, corners = rect_of[index]
            if n > 1 and p.part == 0:
                out += stage_runs(self.graph, self.target, index, p.loop, onchip)
            base = base_runs.get((index, n, corners))
            if base is None:
                base = base_runs[(index, n, corners)] = self._base_run(index, r, n)
            if onchip:
                base = self.noc_layer(index, r, corners, onchip, p, ids) or base
            out.append((p, base))
        return out

    def _linked(
        self, priced: list[LayerRun | tuple[Part, _Base]], onchip: dict[str, OnChip]
    ) -> list[LayerRun]:
        """The runs of `_priced` (keeping `onchip` on chip), each input linked to the runs
        writing it and to those its on-chip writes wait for (`Gates`), with their flags."""
        runs: list[LayerRun] = []
        runs_of: dict[int, list[int]] = {}  # layer -> its runs so far, part by part
        parts_of: dict[int, int] = {}  # layer -> how many parts it runs in
        gates = Gates(onchip, self.target.elem_bytes) if onchip else None
        flags, origin, data = self._flags, self._origin, self._data
        for item in priced:
            if isinstance(item, LayerRun):  # a staging: read by none
                runs.append(item)
                continue
            p, (cost, spans, first, box, at) = item
            index, n = p.layer, p.parts
            # per input, per run writing it (none: a graph input): its position + 1 in the
            # schedule's ends (0: READY's finish) and its closing flag's cycles to `first`
            row = flags.get(at)
            if row is None:
                row = flags[at] = {}
            srcs = []
            for src in origin[index]:
                if src is None:
                    ks: tuple[int, ...] = (-1,)
                elif parts_of[src] == 1:  # NOTE: `covering`'s answer, without the call
                    ks = (runs_of[src][0],)
                else:
                    ks = covering(runs_of[src], parts_of[src], p.part, n)
                links = [(k + 1, self._flag(row, *_written(runs, k), first)) for k in ks or (-1,)]
                srcs.append(tuple(links))
            if gates is not None:
                self._gate(row, runs, sorted(self._gated(gates, len(runs), p)), first, srcs, index)
            runs_of.setdefault(index, []).append(len(runs))
            parts_of[index] = n
            runs.append(LayerRun(cost, spans, box, data[index], tuple(srcs), at))
        return runs

    def _flag(self, row: dict[int, int], at: int, box: tuple, first: tuple) -> int:
        """The cycles of the closing flag of a run of footprint id `at` and bounding box `box`
        (`_written`) to core `first`, by `at` in `row` (the reader's: `_flags`)."""
        flag = row.get(at)
        if flag is None:
            flag = row[at] = sync_cycles(self.target, farthest(box, first), first)
        return flag

    def _gate(
        self, row: dict, runs: list[LayerRun], waits: list, first: tuple, srcs: list, index: int
    ) -> None:
        """Each data input of layer `index` (its `srcs`) waits for the runs `waits` too, with
        their flags (its writes' gates hold its data inputs' release)."""
        if waits:
            gated = tuple([(k + 1, self._flag(row, *_written(runs, k), first)) for k in waits])
            for c in self._data[index]:
                srcs[c - 1] += gated

    def _gated(self, gates: Gates, run: int, p: Part) -> set[int]:
        """The runs the on-chip writes of run `run` (part `p`) wait for (`Gates.gate`)."""
        index, n = p.layer, p.parts
        keys = self._gate_keys.get((index, n, p.loop))
        if keys is None:
            lookups = self._homes.get((index, n, p.loop))
            if lookups is None:
                lookups = self._homes[(index, n, p.loop)] = self._lookups(index, n, p.loop)
            keys = self._gate_keys[(index, n, p.loop)] = gate_keys(
                self.graph.layers[index].inputs, lookups, n, p.loop
            )
        return gates.gate(run, index, keys, p.part, n)

    def _base_run(self, index: int, r: Rect, n: int) -> _Base:
        """Layer `index` (on one of n sub-batches) on `r` with every tensor through DDR: its
        cost, its cores (`core_spans`), its first core, their bounding box (`footprint`) and
        their number (`_footprint_id`)."""
        prof = self.profile(index, r.cores, n)
        cost = self._run_cost(
            self.timing(index, r.cores, n), prof.energy_pj, prof.ddr_bytes, prof.lead_ddr_bytes
        )
        cores, first, box = footprint(r, prof.ntiles, self.target.mesh.cols)
        return cost, core_spans(cores), first, box, self._footprint_id(cores)

    def _run_cost(
        self, timings: tuple[LayerTiming, ...], energy: float, ddr: int, lead: int
    ) -> RunCost:
        """A run's figures from its timings, energy, DDR bytes and leading const DDR bytes."""
        held = ddr_channel_held(self.target, lead)
        rest = ddr_channel_held(self.target, ddr - lead)
        after = max(t.mte2_tail for t in timings)
        return RunCost(decisive(timings), energy, ddr, held, rest, after)

    def _footprint_id(self, cores: tuple[int, ...]) -> int:
        """A number per distinct set of cores a run uses (its first core and box follow)."""
        return number(self._footprints, cores)

    def _layout(self, step: Step) -> _Layout:
        """Per non-view layer of `step`: its index, its rectangle and corners, and its cores
        (memoised: the children of a plan and their completions share most of its steps)."""
        cols, views = self.target.mesh.cols, self._views
        out: list = []
        for group in step.groups:
            r = group.rect
            where, cores = (r, (r.x, r.y, r.w, r.h)), r.indices(cols)
            out.extend((index, where, cores) for index in group.layers if index not in views)
        value = self._layouts[step] = tuple(out)
        return value

    def _rects(self, steps: tuple[Step, ...]) -> tuple[dict, dict]:
        """Per non-view layer of `steps`: its rectangle and corners (`rect_of`), its corners."""
        rect_of: dict = {}
        key_of: dict = {}  # NOTE: one tuple a group (the prefix trie compares them)
        for rects, corners in map(self._where_of, steps):
            rect_of.update(rects)
            key_of.update(corners)
        return rect_of, key_of

    def _where_of(self, step: Step) -> tuple[dict, dict]:
        """`_rects` of one step (memoised)."""
        if (value := self._wheres.get(step)) is None:
            rects = {i: where for i, where, _ in self._layouts.get(step) or self._layout(step)}
            value = self._wheres[step] = (rects, {index: w[1] for index, w in rects.items()})
        return value


def _cost_of(item: LayerRun | tuple[Part, _Base]) -> RunCost:
    """The RunCost of an item of `ExecCostModel._priced`."""
    return item.cost if isinstance(item, LayerRun) else item[1][0]


def _written(runs: list[LayerRun], k: int) -> tuple[int, tuple[int, int, int, int]]:
    """The footprint id and bounding box of run k of `runs` (k < 0: READY's, a graph input's)."""
    return (READY_AT, READY) if k < 0 else (runs[k].at, runs[k].box)
