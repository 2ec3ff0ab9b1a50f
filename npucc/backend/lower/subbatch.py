"""Sub-batches of a mesh plan executed: which slice of the batch each layer runs on, in which order.

A plan's step with nsub = n > 1 pipelines n sub-batches through its groups, and steps flagged
`loop` join the previous step's sub-batch loop (npucc.ir.plan). The lowering executes both by
slicing: the layers of a loop (a lone step is a loop of one step) are lowered sub-batch after
sub-batch, in graph order within a sub-batch, each on slice j of its non-const tensors. Slice j
of n of a tensor of E elements is elements [j·E/n, (j+1)·E/n), i.e. rows [j·D/n, (j+1)·D/n) of
its leading dimension D (a batched graph's tensors lead with the batch, or a multiple of it).
A layer is lowered on slices only when its op computes those output rows from those rows of
each non-const operand (`separable`); a loop holding any other layer runs on the whole batch.

The slices of a tensor are parts of its one DDR (or on-chip) tensor (`TiledProgram.add_slice`)
and their writes close separately (`DdrTracker`), so sub-batch j of a layer starts as soon as
sub-batch j of its producers closed: in a step, whose groups hold disjoint rectangles, group g
runs sub-batch j while its successor runs j − 1; across the steps of a loop, which share
cores, one sub-batch passes through every step, then the next. Each core takes its tiles in
lowering order, hence its sub-batches in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_schema import BINARY_OPS, UNARY_OPS, VIEW_OPS
from npucc.ir.onchip import OnChip
from npucc.ir.plan import MeshPlan, Step

# ops that compute output row r of axis 0 from row r of their inputs (equal leading dims)
ROW_OPS = frozenset(
    {*BINARY_OPS, *UNARY_OPS, "where", "muls", "adds", "pows", "clip", "gelu", "lrn", "conv2d",
     "maxpool", "avgpool", "globalavgpool", "globalmaxpool", "expand"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Part:
    """One layer lowered on one sub-batch: slice `part` of `parts` (1: the whole batch)."""

    layer: int  # index in the planned graph's layers
    part: int = 0
    parts: int = 1
    loop: int = 0  # the sub-batch loop it runs in (plan steps joined by `loop`)
    stage: int = -1  # in a split lone step (a pipeline): its place among the step's layers


def part_loops(parts: Sequence[Part], layers: int) -> list[tuple[int, int, int]]:
    """(loop, sub-batch count, stage) of each layer, by layer index (`plan_onchip`'s loops)."""
    first: dict[int, Part] = {}
    for p in parts:
        first.setdefault(p.layer, p)
    return [(p.loop, p.parts, p.stage) for p in (first[i] for i in range(layers))]


def part_spans(parts: Sequence[Part], layers: int) -> list[tuple[int, int]]:
    """The first and last positions in `parts` of each layer's parts (`plan_onchip`'s spans)."""
    spans = [(len(parts), -1)] * layers
    for at, p in enumerate(parts):
        first, last = spans[p.layer]
        spans[p.layer] = (min(first, at), max(last, at))
    return spans


def part_positions(parts: Sequence[Part], layers: int) -> list[tuple[int, ...]]:
    """The positions in `parts` of each layer's parts, by sub-batch (`plan_onchip`'s
    positions)."""
    found: list[list[int]] = [[] for _ in range(layers)]
    for at, p in enumerate(parts):
        row = found[p.layer]
        if len(row) < p.parts:
            row.extend([-1] * (p.parts - len(row)))
        row[p.part] = at
    return [tuple(row) for row in found]


@dataclass(slots=True)
class Slicing:
    """The graph to lower: a layer per Part, in lowering order, on its slices' tensors."""

    graph: Graph
    parts: list[Part]  # what each of graph.layers is
    slices: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # name -> (of, j, n)


def separable(graph: Graph, layer: Layer, n: int) -> bool:
    """Whether output rows [j·D/n, (j+1)·D/n) of `layer` need only the same share of the
    leading rows of each non-const operand (and none of a per-row constant)."""
    shape = graph.tensors
    data = [t for t in (*layer.inputs, *layer.outputs) if t and not graph.is_const(t)]
    consts = [t for t in layer.inputs if t and graph.is_const(t)]
    if any(not shape[t].shape or shape[t].shape[0] % n for t in data):
        return False
    out = shape[layer.outputs[0]].shape
    rows = out[0]
    attrs = layer.attrs
    op = layer.op

    def leads(t: str) -> bool:  # same rank and leading rows as the output
        return len(shape[t].shape) == len(out) and shape[t].shape[0] == rows

    def broadcast(t: str) -> bool:  # a constant the same for every row
        return len(shape[t].shape) < len(out) or shape[t].shape[0] == 1

    if op in ROW_OPS:
        return all(leads(t) for t in data) and all(broadcast(t) for t in consts if op != "conv2d")
    if op == "gemm":
        a, b = layer.inputs[0], layer.inputs[1]
        c = layer.inputs[2] if len(layer.inputs) > 2 else ""
        return (
            not attrs.get("trans_a")
            and not graph.is_const(a)
            and graph.is_const(b)
            and (not c or (leads(c) if not graph.is_const(c) else broadcast(c)))
        )
    if op == "matmul":
        a, b = layer.inputs
        if graph.is_const(a) or not leads(a):
            return False
        if graph.is_const(b):
            return len(shape[b].shape) <= 2 or broadcast(b)
        return len(out) >= 3 and leads(b)
    if op == "reduce":
        return 0 not in attrs["axes"] and shape[layer.inputs[0]].shape[0] == rows
    if op in ("softmax", "layernorm"):
        return (
            attrs["axis"] % len(out) != 0
            and all(leads(t) for t in data)
            and not any(not broadcast(t) for t in consts)
        )
    if op == "transpose":
        return attrs["perm"][0] == 0
    if op == "concat":
        return attrs["axis"] != 0 and not consts
    if op == "slice":
        return attrs["starts"][0] == 0 and attrs["steps"][0] == 1 and leads(layer.inputs[0])
    if op == "pad":
        pads = attrs["pads"]
        return pads[0] == 0 and pads[len(out)] == 0 and attrs["strides"][0] == 1
    if op == "take":
        if len(layer.inputs) == 2:  # an embedding lookup: rows of the output follow the ids
            return attrs["axis"] == 0 and graph.is_const(layer.inputs[0])
        return attrs["axis"] != 0 and leads(layer.inputs[0])
    if op == "attention":
        q, k, v = layer.inputs[:3]
        m = layer.inputs[3] if len(layer.inputs) > 3 else ""
        strided = all(
            not graph.is_const(t) and attrs[f"{s}_strides"][0] * rows == math.prod(shape[t].shape)
            for t, s in ((q, "q"), (k, "k"), (v, "v"))
        )
        return strided and (not m or (graph.is_const(m) and broadcast(m)))
    return False


def loop_parts(
    graph: Graph, steps: Sequence[Step], split: Callable[[int, int], bool] | None = None
) -> list[Part]:
    """The layers of `graph` (a plan's workload, layer for layer) in the order `steps` lowers
    them: sub-batch loops in step order, each on its sub-batches in turn (a loop that cannot
    split, `split(layer, n)` false for one of its layers, on the whole batch).

    NOTE: with no split to execute it is graph order (every plan's order then).
    """
    can = split or (lambda i, n: separable(graph, graph.layers[i], n))
    loop_of = [0] * len(graph.layers)
    loops: list[tuple[int, int]] = []  # (sub-batch count, steps) of each loop
    for step in steps:
        if step.loop and loops:
            loops[-1] = (loops[-1][0], loops[-1][1] + 1)
        else:
            loops.append((step.nsub, 1))
        for group in step.groups:
            for i in group.layers:
                loop_of[i] = len(loops) - 1
    if all(n == 1 for n, _ in loops):  # nothing split: graph order
        return [_whole(i, loop_of[i]) for i in range(len(graph.layers))]
    members: list[list[int]] = [[] for _ in loops]
    for i in range(len(graph.layers)):
        members[loop_of[i]].append(i)
    order: list[Part] = []
    for loop, ((n, nsteps), layers) in enumerate(zip(loops, members, strict=True)):
        work = [i for i in layers if graph.layers[i].op not in VIEW_OPS]
        if n == 1 or not all(can(i, n) for i in work):
            order += [Part(i, loop=loop) for i in layers]
            continue
        order += [Part(i, loop=loop) for i in layers if i not in work]  # a view aliases, once
        if nsteps == 1:  # a pipeline: sub-batch j of the k-th layer with j − 1 of the next
            k = len(work)
            order += [
                Part(work[s], t - s, n, loop, s)
                for t in range(n + k - 1)
                for s in range(k)
                if 0 <= t - s < n
            ]
        else:  # a loop: its steps share cores, one sub-batch through them all, then the next
            order += [Part(i, j, n, loop) for j in range(n) for i in work]
    if all(p.parts == 1 for p in order):
        return [_whole(i, loop_of[i]) for i in range(len(graph.layers))]
    return order


@lru_cache(maxsize=65536)
def _whole(layer: int, loop: int) -> Part:
    """Layer `layer` on the whole batch in loop `loop` (one shared Part: the search builds the
    order of every plan it prices, most of them unsplit)."""
    return Part(layer, loop=loop)


def part_layer(graph: Graph, layer: Layer, j: int, n: int, tensors: dict[str, Tensor]) -> Layer:
    """`layer` on slice j of n of its non-const tensors (added to `tensors`, if new)."""

    def part_of(t: str) -> str:
        if not t or graph.is_const(t):
            return t
        name = f"{t}@{j}/{n}"
        if name not in tensors:
            tensor = graph.tensors[t]
            rows, *rest = tensor.shape
            tensors[name] = Tensor(name, (rows // n, *rest), tensor.dtype)
        return name

    return Layer(
        f"{layer.name}@{j}/{n}",
        layer.op,
        [part_of(t) for t in layer.inputs],
        [part_of(t) for t in layer.outputs],
        dict(layer.attrs),
        layer.src,
    )


def slice_offset(graph: Graph, name: str, j: int, n: int, home: OnChip | None = None) -> int:
    """The element offset of slice j of n of tensor `name` in the tensor holding it (`home`:
    where it stays on chip; a handoff of a few sub-batches holds slice j in slot j mod slots)."""
    if home is not None and home.slot:
        return j % home.slots * home.slot
    return j * (math.prod(graph.tensors[name].shape) // n)


def slice_plan(graph: Graph, plan: MeshPlan) -> Slicing:
    """The graph the lowering lowers for `plan`: a layer per Part of `loop_parts`."""
    order = loop_parts(graph, plan.steps)
    if all(p.parts == 1 for p in order):
        return Slicing(graph, order)
    out = Graph(graph.name, graph.opset)
    tensors: dict[str, Tensor] = {}
    out.inputs, out.outputs = list(graph.inputs), list(graph.outputs)
    layers = []
    for p in order:
        layer = graph.layers[p.layer]
        if p.parts == 1:
            layers.append(Layer(layer.name, layer.op, list(layer.inputs), list(layer.outputs),
                                dict(layer.attrs), layer.src))  # fmt: skip
        else:
            layers.append(part_layer(graph, layer, p.part, p.parts, tensors))
    for t in (*graph.tensors.values(), *tensors.values()):
        out.add_tensor(t)
    for layer in layers:
        out.add_layer(layer)
    slices = {}
    for name in tensors:
        whole, _, part = name.rpartition("@")
        j, n = map(int, part.split("/"))
        slices[name] = (whole, j, n)
    return Slicing(out, order, slices)
