"""A lowering resumed where another one, alike up to a layer, stood before that layer.

The cascade trials (npucc.backend.lower `_overlapped`) lower the whole graph again for each
link they try, though the layers before the link lower as in the program kept so far. A
lowering records `Mark`s before the layers asked for (the builders', the tracker's, the
program's and the context's state, and how many nodes and buffers each core had), and a later
lowering starts from one when `same_prefix` finds that every layer before it lowers alike:
the same layers, tensors, neighbours and per-layer decisions (resident tensors, folded
concats, band views, held weights). The lowering loop reads nothing else of a layer before
the mark (its lowering may look at its tensors' producers and users: they are compared), so
the resumed program is the one a whole lowering gives, node for node.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from npucc.backend.lower.builder import DdrTracker, TileBuilder
from npucc.backend.lower.concat_fold import ConcatFolds
from npucc.backend.lower.memo import frozen
from npucc.backend.lower.resident import Residency
from npucc.ir.graph import Graph, Layer
from npucc.ir.program import Core, TiledProgram
from npucc.ir.tiled import TileGraph


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


def _layer_key(layer: Layer | None) -> Hashable:
    """A layer's name, op, operands and attributes (None: no layer)."""
    if layer is None:
        return None
    return layer.name, layer.op, tuple(layer.inputs), tuple(layer.outputs), frozen(layer.attrs)


def _tensor_key(graph: Graph, name: str) -> Hashable:
    """A tensor's type, its data's identity and its producer's and users' keys."""
    t = graph.tensors.get(name)
    if t is None:
        return None
    users = tuple(_layer_key(u) for u in graph.users(name))
    return t.shape, t.dtype, t.quant, id(t.data), _layer_key(graph.producer(name)), users


def _layer_decisions(d: Decisions, index: int) -> Hashable:
    """Layer `index` of `d` with its tensors and the decisions the loop reads for it."""
    layer = d.graph.layers[index]
    names = [n for n in (*layer.inputs, *layer.outputs) if n]
    views = [d.views.get(n) for n in names]
    wholes = [d.folds.parts.get(v[0]) for v in views if v is not None]
    r = d.residency
    return (
        d.origin[index],
        _layer_key(layer),
        tuple(_tensor_key(d.graph, n) for n in names),
        tuple(views),
        tuple(d.folds.parts.get(n) for n in names),
        tuple(wholes),
        index in d.folds.layers,
        (r.live_bytes(index), tuple(r.born(index)), tuple(r.dead(index))),
    )


def same_prefix(a: Decisions, b: Decisions, k: int) -> bool:
    """Whether layers [0, k) of `a` and `b` lower alike (and both have a layer k)."""
    if a.graph.inputs != b.graph.inputs or min(len(a.origin), len(b.origin)) <= k:
        return False
    try:
        if any(_layer_decisions(a, i) != _layer_decisions(b, i) for i in range(k)):
            return False
    except TypeError:  # an attribute without a signature (memo.frozen): not compared
        return False

    def held(d: Decisions) -> dict[str, tuple[int, int]]:
        return {n: (f, min(last, k)) for n, (f, last) in d.held.items() if f < k}

    return held(a) == held(b)


def _prefix(graph: TileGraph, nodes: int, buffers: int) -> TileGraph:
    """A copy of `graph`'s first `nodes` nodes and `buffers` buffers, with their edges
    (nodes and buffers shared: lowering does not change them; edge lists copied)."""
    out = TileGraph(graph.name)
    out.nodes = graph.nodes[:nodes]
    out.buffers = graph.buffers[:buffers]
    # NOTE: a node's successors are added in id order (an edge's head is the newest node)
    out.succs = [s.copy() if not s or s[-1] < nodes else [v for v in s if v < nodes]
                 for s in graph.succs[:nodes]]  # fmt: skip
    out.preds = [p.copy() for p in graph.preds[:nodes]]
    out.alloc_of = {b: v for b, v in graph.alloc_of.items() if v < nodes}
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


@dataclass(slots=True)
class Resume:
    """A lowering's marks: the source layers before whose first lowered layer (a band's,
    in a chain) it records one (`made`, by source layer), and the mark it may start from."""

    record: frozenset[int]
    start: Mark | None = None
    made: dict[int, Mark] = field(default_factory=dict)
