"""Lowering: graph IR -> tiled IR (one TileGraph per core), one module per op family."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from npucc import progress
from npucc.backend.hypercut.onchip_plan import plan_onchip, staged_key
from npucc.backend.lower import (  # noqa: F401  (register)
    attention,
    conv,
    eltwise,
    host,
    layout,
    matmul,
    movement,
    pool,
    reduce,
)
from npucc.backend.lower.band_view import BandView
from npucc.backend.lower.builder import DdrTracker, MeshBuilder, TileBuilder
from npucc.backend.lower.cascade import (
    WIDE_SHARE,
    Cascades,
    Chains,
    Priced,
    band_graph,
    busiest_pipes,
    layer_spans,
    links,
    paying,
    plan_chains,
    trials,
)
from npucc.backend.lower.concat_fold import NO_FOLDS, ConcatFolds, fold_concats
from npucc.backend.lower.context import LOWERINGS, LowerContext, ReservedFitError
from npucc.backend.lower.memo import forms
from npucc.backend.lower.overlap import overlapped, timed_run
from npucc.backend.lower.resident import NONE as NO_RESIDENT
from npucc.backend.lower.resident import Residency, choose_resident
from npucc.backend.lower.resume import (
    Decisions,
    Mark,
    Resume,
    Splice,
    detach,
    same_prefix,
    shed,
    skeleton,
)
from npucc.backend.lower.stage import stage_const
from npucc.backend.lower.subbatch import (
    Part,
    part_loops,
    part_positions,
    part_spans,
    slice_offset,
    slice_plan,
)
from npucc.backend.lower.sync_points import drop_implied, order_sync_points
from npucc.backend.lower.work import layer_work
from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import VIEW_OPS
from npucc.ir.isa import Copy
from npucc.ir.onchip import OnChip
from npucc.ir.plan import MeshPlan, PlannedGraph
from npucc.ir.program import Core, IoBinding, LayerWork, TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.passes import CompileContext, IRType, Pass
from npucc.target import Target

Placement = dict[str, tuple[int, ...]]  # layer name -> indices of the cores that run it
Staged = dict[str, dict[str, str]]  # layer name -> {constant: key of the on-chip copy it reads}
Memo = dict[Hashable, Any]
# the graph, the compile context, the placement, the layers' work and memo, the marks' sources
_Lowering = tuple[Graph, CompileContext, Placement | None, tuple[list[LayerWork], Memo],
                  frozenset[int]]  # fmt: skip


def lower_graph(
    graph: Graph,
    ctx: CompileContext,
    placement: Placement | None = None,
    onchip: dict[str, OnChip] | None = None,
    slices: dict[str, tuple[str, int, int]] | None = None,
    resident: bool = True,
    staged: Staged | None = None,
    jobs: int = 1,
) -> TiledProgram:
    """Lower every layer of `graph`, layer after layer, onto the target's cores (`jobs`:
    worker processes for the overlap trials, npucc.backend.lower.overlap).

    Each layer's independent tiles go round-robin over its cores (`placement`; by default every
    layer uses every core of the mesh in turn, i.e. layer-sequential execution). The tensors in
    `onchip` are kept on chip and moved over the NoC instead of DDR. A tensor in `slices` is
    slice j of n of another (a sub-batch: npucc.backend.lower.subbatch); a layer in `staged`
    reads those constants from their on-chip copies (staged before their first reader). With
    `resident`, the layer outputs `choose_resident` picks stay in L1 (one core); the rest go
    through DDR, where (one core) a concat's producers write its inputs in place when they can
    (`fold_concats`) and chains of convs whose intermediates do not fit L1 run cascaded in
    bands of rows (`plan_chains`): those whose bands take fewer cycles than their layers, if
    the whole program then does too (`paying`, measured on both lowerings).
    NOTE: if a layer's smallest tile does not fit beside the resident tensors, the graph is
    lowered again without them (the result is what it was before residency); if one does not
    fit beside a cascade's bands, without the cascades.
    """
    target = ctx.target
    one_core = target.cores == 1 and not slices and not onchip
    work = layer_work(graph)
    residency, folds = _residency(graph, target, one_core) if resident else (NO_RESIDENT, NO_FOLDS)
    if not resident and one_core:
        folds = fold_concats(graph, residency)
    args = (graph, ctx, placement, onchip, slices, staged or {})
    memo: Memo = ctx.memo  # what every lowering of a layer signature computes alike (memo.once)
    priced: Priced = {}  # the chains `plan_chains` priced (both calls: every share alike)
    chains = plan_chains(graph, target, priced=priced) if one_core and resident else {}
    # the layers feeding the chains and the convs trials may try (their marks:
    # npucc.backend.lower.resume), and every later one: a cascaded lowering or a trial may
    # splice the kept program's tail from its mark there
    feeding = [i - 1 for i, _ in links(graph, {}, target)] if one_core and resident else []
    feeding += [first - 1 for first in chains]
    record = frozenset(range(max(min(feeding), 0), len(graph.layers))) if feeding else frozenset()
    first = Resume(record)
    try:
        base = _lower_all(*args, residency, folds, work, memo, resume=first)
    except ReservedFitError:
        return _lower_all(*args, NO_RESIDENT, folds, work, memo)
    if not (one_core and resident):
        return base
    before = layer_spans(base) if chains else []
    bound = busiest_pipes(base)  # all `trials` needs of the lowering without cascades
    lowering = (graph, ctx, placement, (work, memo), record)
    kept = _Kept({}, base, first.made, before or None)
    del base, first  # NOTE: held on only as kept's program, until a cascaded one replaces it
    if not _paid(lowering, before, chains, kept):
        return kept.program
    wider = plan_chains(graph, target, WIDE_SHARE, kept.chains, priced)
    before = before or (kept.layer_spans() if wider else [])
    if wider:
        # NOTE: kept if its layers' spans sum below the program's so far (`paying`'s measure)
        beat = sum(c for _, c in kept.layer_spans())
        _paid(lowering, before, {**kept.chains, **wider}, kept, beat)
    kept.settle(lowering)
    tried = trials(graph, kept.chains, ctx.target, bound)

    def lower(cascades: Cascades, resume: Resume) -> TiledProgram:
        return _lower_cascaded(ctx, placement, cascades, work, memo, resume)

    return overlapped(lower, graph, target, (kept.chains, kept.marks), kept.program, tried, jobs)


@dataclass(slots=True)
class _Kept:
    """The lowering kept so far: its chains, its program and its marks (source layer -> the
    mark before it). NOTE: the one reference to the program, so that a lowering replacing
    it need not hold it while it is made (`_paid`).

    A kept lowering that met the one before it (`Splice`) may stand unfinished: `program`
    up to the meet, `rest` the lowering of its tail (the earlier kept tail, renamed; its
    marks so far), made only when the program is read (`settle`); a later lowering that
    replaces it first never makes it. Meanwhile the earlier kept program's marks from the
    meet on are this one's states renamed: a later lowering may meet them (`tail_marks`, on
    graphs without nodes: `resume.skeleton`; `tails`: each such graph with the first source
    layer it holds them from), not start from them.
    """

    chains: Chains
    program: TiledProgram
    marks: dict[int, Mark]
    spans: list[tuple[int, int]] | None = None  # the program's `layer_spans`, once known
    rest: tuple[Cascades, Resume, dict[int, Mark]] | None = None
    tail_marks: dict[int, Mark] = field(default_factory=dict)
    tails: tuple[tuple[TileGraph, int], ...] = ()

    def layer_spans(self) -> list[tuple[int, int]]:
        """The program's `layer_spans` (what `paying` compares), worked out once."""
        if self.spans is None:
            self.spans = layer_spans(self.program)
        return self.spans

    def unfinished(self, met: tuple[Mark, dict[int, int], Mark], marks: dict[int, Mark],
                   ahead: frozenset[int]) -> None:  # fmt: skip
        """Take the tail marks of the lowering that met this one at `met` (those of `ahead`,
        the source layers from the meet on): this one's marks, `marks`, from there on, and
        its tail marks."""
        graph = self.program.cores[0].graph
        bare = skeleton(graph)
        tail: dict[int, Mark] = {}
        for source in ahead:
            mark = self.tail_marks.get(source) or marks.get(source)
            if mark is not None and mark.graphs[0] is graph:
                tail[source] = replace(mark, graphs=[bare])
            elif mark is not None and any(mark.graphs[0] is g for g, _ in self.tails):
                tail[source] = mark
        kept = met[0].graphs[0]
        meet = met[0].decisions.origin[met[0].index]
        self.tails = ((bare if kept is graph else kept, meet), *self.tails)
        self.tail_marks = tail

    def settle(self, lowering: _Lowering) -> None:
        """Lower the unfinished program's tail, if it is (`rest`), and take its marks."""
        if self.rest is None:
            return
        _, ctx, placement, (work, memo), _ = lowering
        cascades, resume, marks = self.rest
        self.rest, self.tails, self.tail_marks = None, (), {}
        del self.program, self.marks
        program = _lower_cascaded(ctx, placement, cascades, work, memo, resume)
        marks = {**marks, **resume.made}
        shed(marks, program)
        self.program, self.marks, self.spans = program, marks, None


def _paid(
    lowering: _Lowering,
    before: list[tuple[int, int]],
    chains: Chains,
    kept: _Kept,
    beat: int | None = None,
) -> bool:
    """Replace `kept` by the chains of `chains` that pay (`paying`, against the lowering
    without cascades timed `before`), with `lowering`'s graph lowered so and its marks, unless
    those that pay are `kept`'s chains or none, or the layers' spans of that lowering sum to
    `beat` or more (False: a tile does not fit beside the bands; `kept` unchanged).
    `lowering`: the graph, the compile context, the placement, the layers' work and memo, and
    the source layers whose marks are kept.

    NOTE: each lowering starts from `kept`'s mark before the first chain it lacks (or, after
    one `paying` cut down, from that one's mark before the first chain it dropped, if the
    layers before it lower alike: `same_prefix`) and stops where its state meets `kept`'s
    after the last (npucc.backend.lower.resume): the layers outside that stretch lower alike,
    their spans are `kept`'s (a run's span reads only its own nodes: the sum is the whole
    lowering's, as `paying` prices it); only a lowering that replaces `kept` goes on from
    where it stopped, `kept`'s program let go first (no two whole programs alive but while a
    lowering is judged).
    """
    graph, ctx, placement, (work, memo), record = lowering
    had, marks = kept.chains, kept.marks
    timed, spans = timed_run(kept.program, marks), kept.layer_spans()
    # the last lowering judged's marks up to the first chain it had and `paying` dropped (the
    # next lowering's chains are those that paid: its layers before that chain are alike)
    prior: dict[int, Mark] = {}
    dropped = -1
    while chains:
        new = [first for first, chain in chains.items() if had.get(first) != chain]
        if not new:
            break
        if kept.rest is not None and min(new) - 1 >= min(first for _, first in kept.tails):
            kept.settle(lowering)  # NOTE: it starts in the unfinished tail: from its own mark
            marks, spans = kept.marks, kept.layer_spans()
            timed = timed_run(kept.program, marks)
        cascades = band_graph(graph, chains, ctx.target)
        last = max(chains[first][0] for first in new) - 1
        splice = Splice({**marks, **kept.tail_marks}, timed, last, kept.tails)
        low = min(new) - 1
        later = prior.get(dropped) if dropped > low else None
        resume = Resume(record, marks.get(low), splice=splice, later=later)
        try:
            banded = _lower_cascaded(ctx, placement, cascades, work, memo, resume)
        except ReservedFitError:
            return False
        made, after, met = resume.made, layer_spans(banded), splice.met
        if later is not None and resume.began is later:
            # NOTE: it went on from the earlier lowering's mark (`same_prefix`): its graphs
            # begin with that mark's prefix, which holds the earlier marks from `low` on (the
            # kept program's there are another lowering's states)
            graphs = [core.graph for core in banded.cores]
            carried = {s: replace(m, graphs=graphs) for s, m in prior.items() if low <= s < dropped}
            made = {**carried, **made}
            del carried, graphs
        prior, later = {}, None
        if met is not None:  # the kept tail from the source layer where it met
            meet = met[0].decisions.origin[met[0].index]
            after += [(layer, c) for layer, c in spans if layer >= meet]
        paid = paying(chains, before, after)
        if paid == chains:
            if beat is not None and sum(c for _, c in after) >= beat:
                return True
            old = marks
            marks = {**marks, **made}
            del timed, splice, resume, made, spans
            if met is not None:  # NOTE: its tail is lowered when read (`_Kept.settle`)
                rest = Resume(record, met[2])
                # NOTE: the marks it records anew (from its start on) are let go first
                ahead = record.intersection(cascades.origin[met[2].index :])
                marks = {source: mark for source, mark in marks.items() if source not in ahead}
                kept.unfinished(met, old, ahead)
                kept.rest = cascades, rest, dict(marks)
            else:
                kept.rest, kept.tails, kept.tail_marks = None, (), {}
            del kept.program, kept.marks, old  # NOTE: its graph goes here (its marks: shed)
            shed(marks, banded)
            kept.chains, kept.program, kept.marks = chains, banded, marks
            kept.spans = None if met is None else after
            return True
        dropped = min(first for first in chains if first not in paid)
        prior = {source: mark for source, mark in made.items() if source <= dropped}
        detach(list(prior.values()))  # NOTE: its prefixes only, while the next is made
        chains = paid
        # NOTE: not held while the next is made (a tiled program; its marks hold its graph)
        del banded, resume, splice, made, met
    return True


def _lower_cascaded(
    ctx: CompileContext,
    placement: Placement | None,
    cascades: Cascades,
    work: list[LayerWork],
    memo: Memo,
    resume: Resume | None = None,
) -> TiledProgram:
    """The one-core lowering of `cascades`' banded graph (ReservedFitError: a tile does not
    fit beside the band intermediates and the resident tensors; `resume`: `_lower_all`'s)."""
    graph = cascades.graph
    made = cascades.outputs()
    # NOTE: a band view (one chain's output rows, perhaps the next chain's image) stays in DDR
    ddr = cascades.wholes() | frozenset(cascades.views)
    residency, folds = _residency(graph, ctx.target, True, ddr, cascades.bands, made)
    return _lower_all(graph, ctx, placement, None, None, {}, residency, folds, work, memo,
                      cascades, resume)  # fmt: skip


def _residency(
    graph: Graph,
    target: Target,
    one_core: bool,
    exclude: frozenset[str] = frozenset(),
    pinned: frozenset[str] = frozenset(),
    made: frozenset[str] = frozenset(),
) -> tuple[Residency, ConcatFolds]:
    """The resident tensors (none of `exclude`, all of `pinned`) and the folded concats (whose
    inputs may be `made` in bands by cascaded chains)."""
    residency = choose_resident(graph, target, exclude, pinned)
    folds = fold_concats(graph, residency, made) if one_core else NO_FOLDS
    if folds.layers:
        residency = choose_resident(graph, target, exclude | folds.tensors(), pinned)
    return residency, folds


def _lower_all(
    graph: Graph,
    ctx: CompileContext,
    placement: Placement | None,
    onchip: dict[str, OnChip] | None,
    slices: dict[str, tuple[str, int, int]] | None,
    staged: Staged,
    residency: Residency,
    folds: ConcatFolds,
    work: list[LayerWork],
    memo: Memo,
    cascades: Cascades | None = None,
    resume: Resume | None = None,
) -> TiledProgram:
    """`lower_graph` with the resident tensors `residency`, the folded concats `folds` and the
    cascaded chains `cascades` (`graph` is their banded graph; `work`: the source graph's;
    `memo`: shared by every lowering of one `lower_graph`; `resume`: the marks to record and
    the one to start from, if its layers before it lower alike: npucc.backend.lower.resume)."""
    target = ctx.target
    program = TiledProgram(graph.name, target)
    rows, cols = target.mesh.rows, target.mesh.cols
    held = _HeldWeights(graph, cascades.weights if cascades is not None else frozenset())
    origin = tuple(range(len(graph.layers))) if cascades is None else cascades.origin
    parts = _Parts(slices or {}, {} if cascades is None else cascades.views)
    decided = None
    start = None
    if resume is not None:
        spans = {name: (first, held.last[name]) for name, first in held.first.items()}
        decided = Decisions(graph, origin, parts.views, residency, folds, spans)
        for mark in (resume.later, resume.start):
            if mark is not None and same_prefix(mark.decisions, decided, mark.index):
                start = resume.began = mark
                break
    if start is None:
        tracker = DdrTracker(onchip=dict(onchip or {}))
        program.onchip = tracker.onchip
        builders = []
        for index in range(rows * cols):
            row, col = divmod(index, cols)
            core = Core(row, col, TileGraph(f"core{row}_{col}"))
            program.cores.append(core)
            builders.append(TileBuilder(core.graph, target, index, tracker, forms(memo)))
        for name in graph.inputs:
            t = graph.tensors[name]
            program.add_tensor(name, "input", t.shape, dtype=t.dtype, quant=t.quant)
            program.io.append(IoBinding("input", name, name, t.shape, t.dtype, t.quant))
    else:
        builders = start.restore(program)
        tracker = builders[0].tracker
    builder = MeshBuilder(builders)
    lctx = LowerContext(graph, program, builder, target, memo=memo)
    if start is not None:
        pooled, col_pooled, fused = start.context
        lctx.pooled, lctx.col_pooled, lctx.fused = set(pooled), set(col_pooled), dict(fused)
        parts.read = {k: list(v) for k, v in start.parts[0].items()}
        parts.touched = {k: list(v) for k, v in start.parts[1].items()}
    program.layers = work
    every_core = tuple(range(rows * cols))
    with progress.task("lower-tiles", len(graph.layers)) as bar:
        for index in range(0 if start is None else start.index, len(graph.layers)):
            layer = graph.layers[index]
            if bar is not None and index % 8 == 0:
                bar.update(index)
            source = origin[index]
            if decided is not None and resume is not None and resume.wants(source):
                context = (lctx.pooled, lctx.col_pooled, lctx.fused)
                mark = Mark.capture(index, decided, program, builders, context,
                                    (parts.read, parts.touched))  # fmt: skip
                if source in resume.record:
                    resume.made.setdefault(source, mark)
                if resume.splice is not None and resume.splice.wants(source):
                    if resume.splice.meets(source, mark):
                        return program  # NOTE: unfinished: the kept tail follows (Splice)
            builder.set_layer(source)
            held.load(lctx, index)
            lctx.reserved = residency.live_bytes(index) + held.live_bytes(lctx, index)
            for name in residency.born(index):
                builder.hold(program.key(name), math.prod(lctx.shape(name)))
            if index not in folds.layers:
                cores = (placement or {}).get(layer.name, every_core)
                _lower_staged(lctx, layer, cores, parts, folds, staged.get(layer.name, {}))
            for name in residency.dead(index):
                builder.release(program.key(name))
            held.free(lctx, index)
    for name in graph.outputs:
        lctx.ddr(name)
        t = graph.tensors[name]
        program.io.append(IoBinding("output", name, program.key(name), t.shape, t.dtype, t.quant))
    if builder.open_buffers():
        raise AssertionError(f"lowering left buffers open: {builder.open_buffers()[:5]}")
    program.cross_edges = tracker.cross_edges
    if program.cross_edges:
        order_sync_points(program)
        program.cross_edges = drop_implied(program.cross_edges, len(program.cores))
    return program


class _HeldWeights:
    """Constants a cascade holds in L1 from their first band layer to their last: each loaded
    with one DMA, read in place by every band (npucc.backend.lower.cascade)."""

    __slots__ = ("first", "last")

    def __init__(self, graph: Graph, names: frozenset[str]) -> None:
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}
        for index, layer in enumerate(graph.layers):
            for name in layer.inputs:
                if name in names:
                    self.first.setdefault(name, index)
                    self.last[name] = index

    def load(self, lctx: LowerContext, index: int) -> None:
        """Load the constants layer `index` is the first to read into L1."""
        for name, first in self.first.items():
            if first == index:
                elems = math.prod(lctx.shape(name))
                ref = lctx.builder.alloc("L1", elems, f"{name}.held")
                lctx.builder.emit(Copy(ref, lctx.ddr(name), (elems,), (1,), (1,)))
                lctx.builder.keep(lctx.program.key(name), ref)

    def live_bytes(self, lctx: LowerContext, index: int) -> int:
        """L1 bytes of the constants held while layer `index` is lowered."""
        return lctx.tile_bytes(
            tuple(
                math.prod(lctx.shape(name))
                for name, first in self.first.items()
                if first <= index <= self.last[name]
            ),
            "L1",
        )

    def free(self, lctx: LowerContext, index: int) -> None:
        """Free the constants layer `index` is the last to read."""
        for name, last in self.last.items():
            if last == index:
                lctx.builder.release(lctx.program.key(name))


def _lower_staged(
    lctx: LowerContext,
    layer: Layer,
    cores: tuple[int, ...],
    parts: _Parts,
    folds: ConcatFolds,
    consts: dict[str, str],
) -> None:
    """`_lower_layer`, reading the constants `consts` (name -> key) from their on-chip copies
    (staged first if they are not yet)."""
    program = lctx.program
    _stage(lctx, consts, parts)
    before = {name: program.aliases.get(name) for name in consts}
    program.aliases.update(consts)
    _lower_layer(lctx, layer, cores, parts, folds)
    for name, alias in before.items():
        if alias is None:
            del program.aliases[name]
        else:
            program.aliases[name] = alias


def _stage(lctx: LowerContext, consts: dict[str, str], parts: _Parts) -> None:
    """Copy each constant of `consts` (name -> key of its on-chip copy) into its homes, unless
    an earlier sub-batch's layer did (after the tensors whose bytes it reuses)."""
    program = lctx.program
    for name, key in consts.items():
        if key in program.tensors:
            continue
        src = lctx.ddr(name)
        shape = lctx.shape(name)
        program.add_tensor(key, "onchip", shape)
        cols = lctx.target.mesh.cols
        home = program.onchip[key]
        parts.after_reused(lctx, key, tuple(r * cols + c for r, c in home.homes))
        closes = stage_const(lctx.builder, src, key, math.prod(shape), home, cols)
        parts.touched.setdefault(key, []).extend(closes)


def plan_placement(plan: MeshPlan, target: Target) -> Placement:
    """Each planned layer on the cores of its group's rectangle (row-major core indices)."""
    cols = target.mesh.cols
    placement: Placement = {}
    for step in plan.steps:
        for group in step.groups:
            cores = group.rect.indices(cols)
            for index in group.layers:
                placement[plan.workload.layers[index].name] = cores
    return placement


def plan_tensors(
    plan: MeshPlan, graph: Graph, target: Target, parts: Sequence[Part] | None = None
) -> dict[str, OnChip]:
    """The tensors `plan` keeps on chip (npucc.backend.hypercut.onchip_plan), lowered as
    `parts` (`loop_parts`) say."""
    placement = plan_placement(plan, target)
    cores = [None if layer.op in VIEW_OPS else placement[layer.name] for layer in graph.layers]
    if parts is None:
        return plan_onchip(graph, cores, target, plan.offchip)
    n = len(graph.layers)
    return plan_onchip(graph, cores, target, plan.offchip, part_loops(parts, n),
                       part_spans(parts, n), positions=part_positions(parts, n) if len(parts) > n
                       else None)  # fmt: skip


@dataclass(slots=True)
class _Parts:
    """The sub-batch slices being lowered, and who read the slices of each on-chip handoff."""

    slices: dict[str, tuple[str, int, int]]  # slice name -> (whole tensor, j, n)
    views: dict[str, tuple[str, int]]  # band tensor -> (whole tensor, first row): cascades
    # (key of a handoff, sub-batch) -> the closes (core, BARRIER) of the layers that read it
    read: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)
    # key of an on-chip tensor -> the closes of the layers that wrote or read it
    touched: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def after_reused(
        self,
        lctx: LowerContext,
        key: str,
        cores: tuple[int, ...],
        also: Sequence[tuple[int, int]] = (),
    ) -> None:
        """Make the writes of on-chip tensor `key` on `cores`, until closed, wait for the
        layers that accessed the tensors whose bytes it reuses (`OnChip.precedes`: on some home
        their life ends before its own starts), and `also`."""
        onchip = lctx.program.onchip
        home, eb = onchip[key], lctx.target.elem_bytes
        closes = [
            close
            for other, was in onchip.items()
            if was.precedes(home) and was.shares(home, eb)
            for close in self.touched.get(other, ())
        ] + list(also)
        if closes:
            lctx.builder.gate(key, closes, cores)

    def register(self, lctx: LowerContext, name: str) -> None:
        """Make slice `name` a part of its whole tensor (created with its first slice)."""
        program = lctx.program
        whole, j, n = self.slices[name]
        home = program.onchip.get(program.key(whole))
        if program.key(whole) not in program.tensors:  # the first slice written
            shape = lctx.shape(whole)
            if home is None:
                program.add_tensor(whole, "temp", shape)
            else:  # a handoff holds `slots` sub-batches of it
                rows = shape[0] // n * (home.slots if home.slot else n)
                program.add_tensor(whole, "onchip", (rows, *shape[1:]))
        program.add_slice(name, whole, slice_offset(lctx.graph, whole, j, n, home))

    def reuses(self, lctx: LowerContext, name: str) -> tuple[str, list[tuple[int, int]]] | None:
        """For a slice a handoff holds in a slot used before: the tensor's key and the closes
        of the layers that read the slot's previous slice (its writes wait for them)."""
        whole, j, n = self.slices[name]
        key = lctx.program.key(whole)
        home = lctx.program.onchip.get(key)
        if home is None or not home.slot or j < home.slots:
            return None
        return key, self.read.get((key, j - home.slots), [])

    def turns(self, lctx: LowerContext, name: str) -> list[tuple[int, int]]:
        """For a slice of a handoff taking turns with others in its bytes (`OnChip.alternates`):
        the closes of the layers that read the last slice each other one held there (of this
        sub-batch for those whose turn comes first, else of the previous one)."""
        whole, j, n = self.slices[name]
        program = lctx.program
        key = program.key(whole)
        home = program.onchip.get(key)
        if home is None or home.turn is None:
            return []
        eb = lctx.target.elem_bytes
        closes: list[tuple[int, int]] = []
        for other, was in program.onchip.items():
            if was.turn is not None and was.meets(home) and was.alternates(home):
                if was.shares(home, eb):
                    closes += self.read.get((other, j if was.turn < home.turn else j - 1), ())
        return closes


def _lower_layer(
    lctx: LowerContext, layer: Layer, cores: tuple[int, ...], parts: _Parts, folds: ConcatFolds
) -> None:
    """Lower one layer onto `cores` (a view op only aliases its input's DDR tensor; a slice
    among its tensors is a part of its whole one; an output `folds` places in a concat's
    output is a slice of that, created with its first part)."""
    program = lctx.program
    slices = parts.slices
    for name in (*layer.inputs, *layer.outputs):
        if name in slices and name not in program.slices:
            parts.register(lctx, name)
    lctx.begin_layer(cores)
    for name in (*layer.inputs, *layer.outputs):
        if name in parts.views:
            _view(lctx, name, parts.views[name], folds)
    if layer.op in VIEW_OPS:
        src = layer.inputs[0]
        lctx.ddr(src)
        program.add_alias(layer.outputs[0], src)
        return
    lower = LOWERINGS.get(layer.op)
    if lower is None:
        raise NpuccError(f"no lowering for operator {layer.op} (node '{layer.name}')")
    for out in layer.outputs:
        if out in folds.parts:
            whole, at = folds.parts[out]
            if whole not in program.tensors:
                program.add_tensor(whole, "temp", lctx.shape(whole))
            program.add_slice(out, whole, at)
        elif out not in slices and out not in parts.views:
            role = "onchip" if out in program.onchip else "temp"
            program.add_tensor(out, role, lctx.shape(out))
    for out in layer.outputs:
        reuse = parts.reuses(lctx, out) if out in slices else None
        turns = parts.turns(lctx, out) if out in slices else []
        if reuse is not None:
            lctx.builder.gate(reuse[0], reuse[1] + turns, cores)
        elif program.key(out) in program.onchip:  # a slot's first use, or a whole tensor
            parts.after_reused(lctx, program.key(out), cores, turns)
    lower(lctx, layer)
    closes = []
    for out in layer.outputs:
        if out in parts.views:
            whole = parts.views[out][0]
            band = _view(lctx, out, parts.views[out], folds)
            lctx.builder.close_ddr(program.key(whole), *band.span(math.prod(lctx.shape(out))))
            continue
        lo = program.offset(out)
        closes += lctx.builder.close_ddr(program.key(out), lo, lo + math.prod(lctx.shape(out)))
    for name in layer.inputs:
        if name in slices and program.key(name) in program.onchip:
            parts.read.setdefault((program.key(name), slices[name][1]), []).extend(closes)
    for name in (*layer.inputs, *layer.outputs):
        if name and program.key(name) in program.onchip:
            parts.touched.setdefault(program.key(name), []).extend(closes)


def _view(lctx: LowerContext, name: str, view: tuple[str, int], folds: ConcatFolds) -> BandView:
    """Make band tensor `name` rows [row0, ...) of its whole DDR tensor on the layer's core
    (the whole, a cascade's output, created with its first band: a slice of a folded concat's
    output, if `folds` places it there); the view."""
    program = lctx.program
    whole, row0 = view
    if whole in folds.parts and whole not in program.slices:
        cat, at = folds.parts[whole]
        if cat not in program.tensors:
            program.add_tensor(cat, "temp", lctx.shape(cat))
        program.add_slice(whole, cat, at)
    elif program.key(whole) not in program.tensors:
        program.add_tensor(whole, "temp", lctx.shape(whole))
    h, w = lctx.shape(whole)[2:]
    rows = lctx.shape(name)[2]
    band = BandView(program.key(whole), program.offset(whole), rows * w, h * w, row0 * w)
    lctx.builder.view(name, band)
    return band


@dataclass(frozen=True, slots=True)
class LowerTiles(Pass):
    """Split each layer into tile operations on the cores its plan gives it (`lower-tiles`)."""

    name: ClassVar[str] = "lower-tiles"
    input_ir: ClassVar[IRType] = PlannedGraph
    output_ir: ClassVar[IRType] = TiledProgram
    jobs: int = 1  # worker processes (npucc.parallel); the same program whatever the number

    def run(self, ir: PlannedGraph, ctx: CompileContext) -> TiledProgram:
        """Lower the planned graph: each layer on its group's rectangle, planned tensors on chip."""
        placement = plan_placement(ir.plan, ctx.target)
        sliced = slice_plan(ir.graph, ir.plan)
        onchip = plan_tensors(ir.plan, ir.graph, ctx.target, sliced.parts)
        names = [layer.name for layer in ir.graph.layers]
        parts = {
            layer.name: placement[names[part.layer]]
            for layer, part in zip(sliced.graph.layers, sliced.parts, strict=True)
            if names[part.layer] in placement
        }
        staged: Staged = {}
        for layer, part in zip(sliced.graph.layers, sliced.parts, strict=True):
            for name in layer.inputs:
                key = staged_key(name, part.loop) if name else ""
                if part.parts > 1 and key in onchip:
                    staged.setdefault(layer.name, {})[name] = key
        program = lower_graph(
            sliced.graph, ctx, parts, onchip, sliced.slices, staged=staged, jobs=self.jobs
        )
        ctx.stats["tile_ops"] = sum(len(c.graph) for c in program.cores)
        # NOTE: no pass after lowering reads the memo (the planner's profiles are before it):
        # its blocks (~3 MiB on MobileNet v2) go to the scheduler's objects, not to the peak
        ctx.memo.clear()
        return program
