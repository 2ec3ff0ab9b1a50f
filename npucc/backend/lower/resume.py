"""A lowering resumed where another one, alike up to a layer, stood before that layer.

The cascade trials (npucc.backend.lower.overlap `overlapped`) lower the whole graph again for each
link they try, though the layers before the link lower as in the program kept so far. A
lowering records `Mark`s before the layers asked for (the builders', the tracker's, the
program's and the context's state, and how many nodes and buffers each core had), and a later
lowering starts from one when `same_prefix` finds that every layer before it lowers alike:
the same layers, tensors, neighbours and per-layer decisions (resident tensors, folded
concats, band views, held weights). The lowering loop reads nothing else of a layer before
the mark (its lowering may look at its tensors' producers and users: they are compared), so
the resumed program is the one a whole lowering gives, node for node.

A trial may also stop where its state meets the kept program's before a later source layer
(`Splice`): when the layers from there on and everything they may read of the lowering before
them (`_interface`) are the kept program's with other node and buffer ids, the rest of the
trial is the kept program's tail renamed, and the trial is priced over its own nodes and that
tail (`Splice.flow`, from the kept program's run: `Timed`) without lowering it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from itertools import islice

from npucc.backend.lower.builder import DdrTracker, TileBuilder
from npucc.backend.lower.concat_fold import ConcatFolds
from npucc.backend.lower.memo import frozen
from npucc.backend.lower.resident import Residency
from npucc.ir.graph import Graph, Layer
from npucc.ir.program import Core, TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target.timing import in_order


@dataclass(frozen=True, slots=True)
class Decisions:
    """What the lowering loop reads of each layer: the graph lowered, each layer's index in
    the source graph, the band views, the resident tensors, the folded concats and the held
    weights (name -> first and last layer reading them)."""

    graph: Graph
    origin: tuple[int, ...]
    views: dict[str, tuple[str, int]]
    residency: Residency
    folds: ConcatFolds
    held: dict[str, tuple[int, int]]
    # NOTE: each layer's `_layer_decisions`, once worked out (the lowering changes none of the
    # fields above: its banded graph, residency and folds are fixed before it starts)
    keys: dict[int, Hashable] = field(default_factory=dict, compare=False, repr=False)


LayerKeys = dict[int, tuple[Layer | None, Hashable]]  # id(layer) -> the layer, its key


def _layer_key(layer: Layer | None, known: LayerKeys) -> Hashable:
    """A layer's name, op, operands and attributes (None: no layer), worked out once per
    `known` (one comparison's: it holds the layer, whose id is not reused meanwhile)."""
    found = known.get(id(layer))
    if found is None or found[0] is not layer:
        key = None if layer is None else (
            layer.name, layer.op, tuple(layer.inputs), tuple(layer.outputs), frozen(layer.attrs)
        )  # fmt: skip
        found = known[id(layer)] = (layer, key)
    return found[1]


def _tensor_key(graph: Graph, name: str, known: LayerKeys) -> Hashable:
    """A tensor's type, its data's identity and its producer's and users' keys."""
    t = graph.tensors.get(name)
    if t is None:
        return None
    users = tuple(_layer_key(u, known) for u in graph.users(name))
    return t.shape, t.dtype, t.quant, id(t.data), _layer_key(graph.producer(name), known), users


def _layer_decisions(d: Decisions, index: int, known: LayerKeys) -> Hashable:
    """Layer `index` of `d` with its tensors and the decisions the loop reads for it (kept in
    `d.keys`)."""
    found = d.keys.get(index)
    if found is not None:
        return found
    layer = d.graph.layers[index]
    names = [n for n in (*layer.inputs, *layer.outputs) if n]
    views = [d.views.get(n) for n in names]
    wholes = [d.folds.parts.get(v[0]) for v in views if v is not None]
    r = d.residency
    found = d.keys[index] = (
        d.origin[index],
        _layer_key(layer, known),
        tuple(_tensor_key(d.graph, n, known) for n in names),
        tuple(views),
        tuple(d.folds.parts.get(n) for n in names),
        tuple(wholes),
        index in d.folds.layers,
        (r.live_bytes(index), tuple(r.born(index)), tuple(r.dead(index))),
    )
    return found


def same_prefix(a: Decisions, b: Decisions, k: int) -> bool:
    """Whether layers [0, k) of `a` and `b` lower alike (and both have a layer k)."""
    if a.graph.inputs != b.graph.inputs or min(len(a.origin), len(b.origin)) <= k:
        return False
    known: LayerKeys = {}
    try:
        if any(_layer_decisions(a, i, known) != _layer_decisions(b, i, known) for i in range(k)):
            return False
    except TypeError:  # an attribute without a signature (memo.frozen): not compared
        return False

    def held(d: Decisions) -> dict[str, tuple[int, int]]:
        return {n: (f, min(last, k)) for n, (f, last) in d.held.items() if f < k}

    return held(a) == held(b)


def _prefix(graph: TileGraph, nodes: int, buffers: int) -> TileGraph:
    """A copy of `graph`'s first `nodes` nodes and `buffers` buffers, with their edges
    (nodes, buffers and predecessor lists shared: lowering does not change them; successor
    lists copied)."""
    out = TileGraph(graph.name)
    out.nodes = graph.nodes[:nodes]
    out.buffers = graph.buffers[:buffers]
    # NOTE: an edge's head is the newest node: a node's successors are added in id order, and
    # its predecessors all before the next node
    out.succs = [s.copy() if not s or s[-1] < nodes else [v for v in s if v < nodes]
                 for s in graph.succs[:nodes]]  # fmt: skip
    out.preds = graph.preds[:nodes]
    # NOTE: a buffer's ALLOC is added with it (TileBuilder.alloc): in the order of the buffers
    out.alloc_of = dict(islice(graph.alloc_of.items(), buffers))
    out.free_of = {b: v for b, v in graph.free_of.items() if v < nodes}
    return out


def _copied(tracker: DdrTracker) -> DdrTracker:
    """A copy of `tracker` a lowering may go on with (its on-chip homes shared: fixed)."""
    ready = {k: list(v) for k, v in tracker.ready.items()}
    return DdrTracker(ready, dict(tracker.written), list(tracker.cross_edges), tracker.onchip)


@dataclass(slots=True)
class Mark:
    """A lowering's state before layer `index` of `decisions.graph` (one entry per core)."""

    index: int
    decisions: Decisions
    graphs: list[TileGraph]  # each core's graph: its first `nodes` nodes are the prefix
    nodes: list[int]
    buffers: list[int]
    builders: list[tuple[dict, ...]]  # TileBuilder.state()
    tracker: DdrTracker
    program: tuple[dict, dict, dict, list, list]  # tensors, aliases, slices, io, cross_edges
    context: tuple[set[str], set[str], dict[str, tuple[Layer, int]]]  # pooled, col_pooled, fused
    parts: tuple[dict, dict]  # _Parts.read, _Parts.touched
    # NOTE: its `_canonical`, once worked out (in a 1-tuple): a mark's state is copied when
    # taken, and its graphs are only ever replaced by prefixes or skeletons of theirs
    canon: tuple[tuple[Hashable, list[int]] | None] | None = None

    @classmethod
    def capture(
        cls,
        index: int,
        decisions: Decisions,
        program: TiledProgram,
        builders: list[TileBuilder],
        context: tuple[set[str], set[str], dict[str, tuple[Layer, int]]],
        parts: tuple[dict, dict],
    ) -> Mark:
        """The state before layer `index` of a lowering of `decisions`."""
        pooled, col_pooled, fused = context
        return cls(
            index,
            decisions,
            [core.graph for core in program.cores],
            [len(core.graph.nodes) for core in program.cores],
            [len(core.graph.buffers) for core in program.cores],
            [b.state() for b in builders],
            _copied(builders[0].tracker),
            (
                dict(program.tensors),
                dict(program.aliases),
                dict(program.slices),
                list(program.io),
                list(program.cross_edges),
            ),
            (set(pooled), set(col_pooled), dict(fused)),
            ({k: list(v) for k, v in parts[0].items()}, {k: list(v) for k, v in parts[1].items()}),
        )

    def detach(self) -> None:
        """Keep only the prefix of each core's graph (the recording lowering may go)."""
        self.graphs = [_prefix(g, n, b) for g, n, b in zip(self.graphs, self.nodes, self.buffers,
                                                           strict=True)]  # fmt: skip

    def restore(self, program: TiledProgram) -> list[TileBuilder]:
        """Fill the empty `program` with the marked state; its cores' builders (the
        context's and the parts' state: `context`, `parts`, copied by the caller)."""
        tensors, aliases, slices, io, cross_edges = self.program
        program.tensors, program.aliases = dict(tensors), dict(aliases)
        program.slices = dict(slices)
        program.io, program.cross_edges = list(io), list(cross_edges)
        tracker = _copied(self.tracker)
        program.onchip = tracker.onchip
        cols = program.target.mesh.cols
        builders = []
        for index, (graph, nodes, buffers, state) in enumerate(
            zip(self.graphs, self.nodes, self.buffers, self.builders, strict=True)
        ):
            tile = _prefix(graph, nodes, buffers)
            program.cores.append(Core(index // cols, index % cols, tile))
            builders.append(TileBuilder.resumed(tile, program.target, index, tracker, state))
        return builders


def shed(marks: dict[int, Mark], program: TiledProgram) -> None:
    """Let the lowerings `marks` were recorded on go, but `program`'s: the marks on a graph
    whose nodes `program` does not all continue are detached (`detach`).

    NOTE: a graph `program` continues costs only its lists (its nodes are `program`'s); one
    it left (a lowering without cascades, a wider pass's) would hold every node of its tail.
    """
    kept = [core.graph for core in program.cores]
    detach([mark for mark in marks.values() if not all(map(_continues, kept, mark.graphs))])


def detach(marks: list[Mark]) -> None:
    """Keep only the prefixes of the graphs `marks` were recorded on: the marks of one graph
    onto one prefix copy of it (up to the longest of theirs), which restores as that graph
    would."""
    groups: dict[tuple[int, ...], list[Mark]] = {}
    for mark in marks:
        groups.setdefault(tuple(map(id, mark.graphs)), []).append(mark)
    for group in groups.values():
        first = group[0]
        prefix = [
            _prefix(g, max(m.nodes[i] for m in group), max(m.buffers[i] for m in group))
            for i, g in enumerate(first.graphs)
        ]
        for mark in group:
            mark.graphs = prefix


def skeleton(graph: TileGraph) -> TileGraph:
    """A graph of `graph`'s buffers and ALLOCs without its nodes: what `Splice.meets` reads of
    a mark's graph (a mark on it is met, never restored)."""
    out = TileGraph(graph.name)
    out.buffers, out.alloc_of = graph.buffers, graph.alloc_of
    return out


def _continues(graph: TileGraph, old: TileGraph) -> bool:
    """Whether `graph` begins with all of `old`'s nodes and buffers (a lowering resumed
    from its end)."""
    n, b = len(old.nodes), len(old.buffers)
    return (
        n <= len(graph.nodes)
        and b <= len(graph.buffers)
        and (n == 0 or graph.nodes[n - 1] is old.nodes[n - 1])
        and (b == 0 or graph.buffers[b - 1] is old.buffers[b - 1])
    )


def _wholes(d: Decisions, name: str) -> list[str]:
    """The tensors band view or folded concat part `name` lies in, if it is one."""
    return [w[0] for w in (d.views.get(name), d.folds.parts.get(name)) if w is not None]


def _decided(mark: Mark) -> Hashable:
    """The layers from `mark` on and their decisions (`_interface` reads the rest of what they
    may read of the lowering before them; no node or buffer id here)."""
    d, at = mark.decisions, mark.index
    spans = {n: (max(f - at, -1), last - at) for n, (f, last) in d.held.items() if last >= at}
    known: LayerKeys = {}
    return (tuple(_layer_decisions(d, i, known) for i in range(at, len(d.graph.layers))),
            tuple(d.graph.inputs), tuple(d.graph.outputs), spans)  # fmt: skip


def _interface(mark: Mark, ids: Callable[[int], int], bufs: Callable[[int], int]) -> Hashable:
    """What the layers from `mark` on may read of the lowering before them but their decisions
    (`_decided`), its node and buffer ids passed through `ids` and `bufs`: the live
    buffers (size, tier, ALLOC, last writer, readers since), the resident tensors and, of the
    DDR tensors those layers name (and the graph's outputs, and the tensors their band views
    and folded concat parts lie in), the closes of their writes with
    the runs each covers, the builder's imports of them and their band views, the program's
    tensors, aliases and slices, and the context's pooled and fused layers among them.

    NOTE: a builder's last writer of a freed buffer is never read again (a buffer is used
    only while allocated), nor a close of a tensor no later layer names.
    """
    d, at = mark.decisions, mark.index
    layers = d.graph.layers[at:]
    known: LayerKeys = {}
    names = {n for layer in layers for n in (*layer.inputs, *layer.outputs) if n}
    names.update(d.graph.outputs)
    wholes = names
    while wholes:  # the tensors a band view or a folded concat's part lies in, and theirs
        wholes = {w for n in wholes for w in _wholes(d, n)} - names
        names |= wholes
    tensors, aliases, slices, _, _ = mark.program
    last_write, readers, imports, writers, gates, resident, views, _ = mark.builders[0]
    keys = {(aliases.get(n, n) if n not in slices else slices[n][0]) for n in names}
    keys |= {views[k].key for k in keys | names if k in views}
    graph = mark.graphs[0]
    ready = {k: tuple((c, ids(v), lo, hi) for c, v, lo, hi in mark.tracker.ready[k])
             for k in sorted(keys) if k in mark.tracker.ready}  # fmt: skip
    written = {
        ids(v): (w.starts.tobytes(), w.ends.tobytes(), tuple(map(ids, w.nodes.tolist())), w.longest)
        for k in ready
        for c, v, _, _ in mark.tracker.ready[k]
        if (w := mark.tracker.written.get((c, v))) is not None
    }
    buffers = graph.buffers
    live = tuple(
        (bufs(b), buffers[b].size, buffers[b].tier, buffers[b].name, ids(graph.alloc_of[b]),
         ids(last_write[b]) if b in last_write else None, tuple(map(ids, readers[b])))
        for b in sorted(readers)
    )  # fmt: skip
    pooled, col_pooled, fused = mark.context
    layer_names = {layer.name for layer in layers}
    return (
        live,
        {k: (bufs(r.buf), r.tier, r.off, r.core) for k, r in resident.items()},
        ready,
        written,
        {(k, tuple(map(ids, after))): ids(v) for (k, after), v in imports.items() if k in keys},
        {k: v for k, v in views.items() if k in keys or k in names},
        {n: (aliases.get(n), slices.get(n)) for n in names},
        {k: (t.role, t.shape, t.dtype, t.quant, id(t.data)) for k in keys if (t := tensors.get(k))},
        (pooled & layer_names, col_pooled & layer_names),
        {
            n: (_layer_key(layer, known), share)
            for n, (layer, share) in fused.items()
            if n in layer_names
        },
    )


def _canonical(mark: Mark) -> tuple[Hashable, list[int]] | None:
    """`_decided` and `_interface` of a one-core mark, the latter with its node and buffer ids
    renumbered in order (0, 1, ...), and the node ids in that order; None: a mesh's or an open
    DDR write's state (not compared). Kept in `mark.canon`."""
    if mark.canon is None:
        mark.canon = (_renumbered(mark),)
    return mark.canon[0]


def _renumbered(mark: Mark) -> tuple[Hashable, list[int]] | None:
    """`_canonical`, worked out."""
    _, _, _, writers, gates, _, _, _ = mark.builders[0]
    tracker = mark.tracker
    if len(mark.builders) != 1 or writers or gates or tracker.cross_edges or tracker.onchip:
        return None
    if any(mark.parts) or mark.program[4]:
        return None
    nodes: list[int] = []
    bufs: list[int] = []
    try:
        # NOTE: the ids it is given noted (`append`: what it returns so is not read)
        _interface(mark, nodes.append, bufs.append)  # type: ignore[arg-type]
        ids = sorted(set(nodes))
        ranks = {v: i for i, v in enumerate(ids)}
        buf_ranks = {b: i for i, b in enumerate(sorted(set(bufs)))}
        return (_decided(mark), _interface(mark, ranks.__getitem__, buf_ranks.__getitem__)), ids
    except TypeError:  # an attribute without a signature (memo.frozen): not compared
        return None


_Run = tuple[list[int], list[str | None], list[int], dict[int, dict[Hashable, int]]]


class Timed:
    """A core graph's nodes run in lowering order as `flow` runs them: their cycles, pipes and
    finish times, and each pipe's free time after the first n nodes for each cut n.

    NOTE: run when first read (`Splice.flow`, `span`): a cascaded lowering judged by
    `layer_spans` (npucc.backend.lower `_paid`) reads only `graph` of its Splice's."""

    __slots__ = ("graph", "_cuts", "_run")

    def __init__(self, graph: TileGraph, cuts: list[int]) -> None:
        """`graph`, to be run with the pipes' free times kept at each of `cuts` (node counts)."""
        self.graph = graph
        self._cuts = cuts
        self._run: _Run | None = None  # (cycles, pipes, finish, free), once run

    def _ran(self) -> _Run:
        """The run: each node's cycles, pipe and finish, each cut's pipes' free times."""
        if self._run is None:
            graph = self.graph
            nodes = graph.nodes
            n = len(nodes)
            cycles, pipes = [v.cycles for v in nodes], [v.pipe for v in nodes]
            finish, start = [0] * n, [0] * n
            free: dict[int, dict[Hashable, int]] = {}
            pipe_free: dict[Hashable, int] = {}
            at = 0
            for cut in sorted({c for c in self._cuts if 0 < c < n} | {n}):
                in_order(range(at, cut), cycles, pipes, graph.preds,
                         timed=(start, finish, pipe_free))  # fmt: skip
                free[cut] = dict(pipe_free)
                at = cut
            self._run = cycles, pipes, finish, free
        return self._run

    @property
    def cycles(self) -> list[int]:
        """Each node's cycles."""
        return self._ran()[0]

    @property
    def pipes(self) -> list[str | None]:
        """Each node's pipe."""
        return self._ran()[1]

    @property
    def finish(self) -> list[int]:
        """Each node's finish."""
        return self._ran()[2]

    @property
    def free(self) -> dict[int, dict[Hashable, int]]:
        """Each cut's (node count's) pipes' free times."""
        return self._ran()[3]

    @property
    def span(self) -> int:
        """The graph's `flow`."""
        return max(self.finish, default=0)


class SpliceMiss(LookupError):
    """A spliced tail reads an earlier node its mark does not map: price the trial whole."""


@dataclass(slots=True)
class Splice:
    """The kept lowering's marks (source layer -> mark; `kept` its core's graph run) a trial
    lowering may meet after source layer `after`: when the trial's state before a source
    layer is the kept one's at that layer with other node and buffer ids (`_interface`,
    renumbered in the same order), the layers after it lower alike, the kept tail renamed, so
    the trial stops there (`met`: the kept mark, kept -> trial ids of the nodes the tail
    reads, and the trial's mark, from which its lowering may go on) and `flow` prices it with
    the kept program's tail. `tails`: other graphs whose marks are the kept program's states
    renamed, each from a source layer on (an unfinished kept program's: npucc.backend.lower
    `_Kept`; met only where `flow` is not read)."""

    marks: dict[int, Mark]
    kept: Timed
    after: int
    tails: tuple[tuple[TileGraph, int], ...] = ()
    met: tuple[Mark, dict[int, int], Mark] | None = None
    tried: set[int] = field(default_factory=set)

    def wants(self, source: int) -> bool:
        """Whether the trial compares its state before `source`'s first lowered layer."""
        return source > self.after and source in self.marks and source not in self.tried

    def meets(self, source: int, mark: Mark) -> bool:
        """Whether the trial's state `mark` before `source` is the kept one's, renamed."""
        self.tried.add(source)
        kept = self.marks[source]
        graph = kept.graphs[0]
        if graph is not self.kept.graph and not any(
            graph is g and source >= first for g, first in self.tails
        ):
            return False
        theirs, here = _canonical(kept), _canonical(mark)
        if theirs is None or here is None or theirs[0] != here[0]:
            return False
        self.met = kept, dict(zip(theirs[1], here[1], strict=True)), mark
        return True

    def flow(self, trial: TileGraph) -> int:
        """`flow` of the trial's nodes, followed, if it `met` the kept state, by the kept tail
        from there, whose reads of earlier nodes are the trial's (`SpliceMiss`: one is not
        in the map). NOTE: the nodes the trial shares with the kept graph (its prefix, from a
        mark) finish as there."""
        nodes, kept = trial.nodes, self.kept
        n, shared = len(nodes), kept.graph.nodes
        m = max((c for c in kept.free if c <= n and nodes[c - 1] is shared[c - 1]), default=0)
        finish = kept.finish[:m] + [0] * (n - m)
        pipe_free = dict(kept.free[m]) if m else {}
        cycles = [0] * m + [v.cycles for v in nodes[m:]]
        pipes = [None] * m + [v.pipe for v in nodes[m:]]
        in_order(range(m, n), cycles, pipes, trial.preds, timed=([0] * n, finish, pipe_free))
        span = max(finish, default=0)
        if self.met is None:
            return span
        mark, renamed, _ = self.met
        at, total = mark.nodes[0], len(shared)
        known: list = [None] * total  # NOTE: a read of an unmapped node fails in in_order
        for old, new in renamed.items():
            known[old] = finish[new]
        try:
            in_order(range(at, total), kept.cycles, kept.pipes, kept.graph.preds,
                     timed=([0] * total, known, pipe_free))  # fmt: skip
        except TypeError:
            raise SpliceMiss("a spliced tail reads a node its mark does not map") from None
        return max(span, max(known[at:], default=0))


@dataclass(slots=True)
class Resume:
    """A lowering's marks: the source layers before whose first lowered layer (a band's,
    in a chain) it records one (`made`, by source layer), the marks it may start from (the
    first whose layers before it lower alike: `later`, then `start`), and the kept lowering
    whose tail it may splice (it stops where it meets it)."""

    record: frozenset[int]
    start: Mark | None = None
    made: dict[int, Mark] = field(default_factory=dict)
    splice: Splice | None = None
    later: Mark | None = None  # a mark tried before `start` (an earlier trial's, further on)
    began: Mark | None = None  # the mark the lowering started from (`later`, `start`, None)

    def wants(self, source: int) -> bool:
        """Whether the lowering takes a mark before `source`'s first lowered layer."""
        if source in self.record and source not in self.made:
            return True
        return self.splice is not None and self.splice.wants(source)
