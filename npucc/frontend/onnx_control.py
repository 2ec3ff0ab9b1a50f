"""Control flow (If, Loop, Scan) expanded into plain nodes before the graph IR import.

npucc runs no control flow: every decision is taken at compile time. An If whose condition is
known (a constant, or anything that evaluates from constants and static shapes) becomes its
taken branch; one with a run-time condition becomes both branches and a Where per output, when
the branches' outputs have the same static shapes. A Loop with a known trip count and a known
condition is unrolled, a Scan over its static scan length. Each copy of a subgraph has its
tensors renamed `<node>/<name>` (`<node>/<i>/<name>` in iteration i); the model is expanded one
top-level control node at a time, with shapes inferred afresh after each, so nested control
flow is expanded from the outside in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import fold_with_reference, foldable, infer_shapes, node_names

CONTROL_OPS = ("If", "Loop", "Scan")
LIMITATIONS = {  # per ONNX op, for docs/operators.md
    "If": "expanded: the taken branch, or both and a Where when the condition is run-time "
    "and the branches' shapes agree",
    "Loop": "unrolled: trip count and condition known at compile time; no sequence or optional "
    "values",
    "Scan": "unrolled over the static scan length",
}
# nodes the expansion of all control flow may add to a model (each unrolled copy counts)
MAX_ADDED_NODES = 20_000


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held in a node's attributes."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _defined(graph: onnx.GraphProto) -> Iterator[str]:
    """Every name a graph defines, its subgraphs' included: inputs, initializers, outputs."""
    yield from (v.name for v in graph.input)
    yield from (i.name for i in graph.initializer)
    for node in graph.node:
        yield from (t for t in node.output if t)
        for sub in _subgraphs(node):
            yield from _defined(sub)


def tensors_read(nodes: Iterable[onnx.NodeProto]) -> Iterator[str]:
    """Every tensor `nodes` read, their subgraphs' nodes and outputs included."""
    for node in nodes:
        yield from node.input
        for sub in _subgraphs(node):
            yield from tensors_read(sub.node)
            yield from (v.name for v in sub.output)


def _rename(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename tensors in place, in the graph and its subgraphs (unmapped names stay)."""
    for v in (*graph.input, *graph.output, *graph.value_info):
        v.name = names.get(v.name, v.name)
    for init in graph.initializer:
        init.name = names.get(init.name, init.name)
    for node in graph.node:
        for field_ in (node.input, node.output):
            renamed = [names.get(t, t) for t in field_]
            del field_[:]
            field_.extend(renamed)
        for sub in _subgraphs(node):
            _rename(sub, names)


def _static_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """The tensors of a graph whose shape inference found a static shape."""
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    for v in (*graph.input, *graph.value_info, *graph.output):
        shape = _shape_of(v)
        if shape is not None:
            shapes[v.name] = shape
    return shapes


def _shape_of(v: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    """A value's static shape, else None."""
    tt = v.type.tensor_type
    if not v.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    if not all(d.HasField("dim_value") for d in tt.shape.dim):
        return None
    return tuple(d.dim_value for d in tt.shape.dim)


class _Values:
    """The compile-time values of a graph's tensors, evaluated on demand (None: run-time)."""

    def __init__(self, graph: onnx.GraphProto, opset: int) -> None:
        self.opset = opset
        self.shapes = _static_shapes(graph)
        self.known: dict[str, np.ndarray | None] = {
            i.name: numpy_helper.to_array(i) for i in graph.initializer
        }
        self.producer: dict[str, onnx.NodeProto] = {}
        self.add(graph.node)

    def add(self, nodes: list[onnx.NodeProto]) -> None:
        """Register the producers of new nodes' outputs."""
        for node in nodes:
            self.producer.update((t, node) for t in node.output if t)

    def get(self, name: str) -> np.ndarray | None:
        """The value of `name`, evaluating the nodes it depends on (iteratively, no recursion)."""
        stack = [name]
        while stack:
            top = stack[-1]
            node = self.producer.get(top)
            if top in self.known or node is None or not _evaluable(node):
                self.known.setdefault(top, None)
                stack.pop()
                continue
            missing = [t for t in self._needs(node) if t not in self.known]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self._evaluate(node)
        return self.known[name]

    def _needs(self, node: onnx.NodeProto) -> list[str]:
        """The inputs whose values evaluating `node` needs (a Shape of a static shape: none)."""
        if node.op_type in ("Shape", "Size") and node.input[0] in self.shapes:
            return []
        return [t for t in node.input if t]

    def _feed(self, node: onnx.NodeProto, name: str) -> np.ndarray | None:
        """The value `node` reads as input `name` (a shape-only read sees a zero-strided array)."""
        value = self.known.get(name)
        if value is None and node.op_type in ("Shape", "Size") and name in self.shapes:
            return np.broadcast_to(np.float32(0), self.shapes[name])
        return value

    def _evaluate(self, node: onnx.NodeProto) -> None:
        """Evaluate one node whose needed inputs are resolved; its outputs become known."""
        feeds = {t: self._feed(node, t) for t in node.input if t}
        outputs = [t for t in node.output if t]
        if any(v is None for v in feeds.values()):
            self.known.update((t, None) for t in outputs)
            return
        graph = helper.make_graph(
            [node],
            "evaluate",
            [helper.make_empty_tensor_value_info(t) for t in feeds],
            [helper.make_empty_tensor_value_info(t) for t in outputs],
        )
        where = f"node '{node.name or node.op_type}' ({node.op_type})"
        results = fold_with_reference(graph, feeds, where, {"": self.opset})
        self.known.update(zip(outputs, results, strict=True))


def _evaluable(node: onnx.NodeProto) -> bool:
    """A standard node without subgraphs (and not random): its value can be computed here."""
    return (
        node.domain in ("", "ai.onnx") and foldable(node.op_type) and "Random" not in node.op_type
    )


@dataclass(slots=True)
class _Site:
    """One control-flow node being expanded: its context and the nodes replacing it."""

    node: onnx.NodeProto
    name: str  # the node's unique name
    values: _Values
    taken: set[str]  # every tensor name in the model
    read: set[str]  # every tensor the model reads (graph outputs included)
    budget: int  # nodes this expansion may add
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)

    def error(self, message: str) -> NpuccError:
        """An NpuccError naming the node."""
        return NpuccError(f"node '{self.name}' ({self.node.op_type}): {message}")

    def ints(self, name: str, count: int) -> list[int]:
        """An integer list attribute (`count` zeros when absent)."""
        found = [list(a.ints) for a in self.node.attribute if a.name == name]
        return found[0] if found else [0] * count

    def graph(self, name: str) -> onnx.GraphProto:
        """A subgraph attribute; refuses sequences and optionals among its inputs and outputs."""
        graph = next(a.g for a in self.node.attribute if a.name == name)
        if not all(v.type.HasField("tensor_type") for v in (*graph.input, *graph.output)):
            raise self.error("sequence and optional values are not supported")
        return graph

    def fresh(self, base: str) -> str:
        """A tensor name not used in the model yet, derived from `base`."""
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    def emit(self, nodes: list[onnx.NodeProto]) -> None:
        """Append replacement nodes, within the budget."""
        self.nodes.extend(nodes)
        self.values.add(nodes)
        if len(self.nodes) > self.budget:
            raise self.error(
                f"expanding control flow would add more than {MAX_ADDED_NODES} nodes to the model"
            )

    def add(self, op: str, inputs: list[str], base: str, **attrs: Any) -> str:
        """Emit one node writing a fresh tensor named after `base`; returns that tensor."""
        out = self.fresh(base)
        self.emit([helper.make_node(op, inputs, [out], name=out, **attrs)])
        return out

    def take(self, x: str, index: str, axis: int, base: str) -> str:
        """Emit a Gather of one (scalar) index along `axis`; its static shape is recorded."""
        out = self.add("Gather", [x, index], base, axis=axis)
        shape = self.values.shapes.get(x)
        if shape is not None:
            self.values.shapes[out] = shape[:axis] + shape[axis:][1:]
        return out

    def constant(self, base: str, value: np.ndarray) -> str:
        """A new initializer holding `value` (Constant had no int64 before opset 9)."""
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(value, name))
        self.values.known[name] = value
        return name

    def known(self, name: str, what: str) -> np.ndarray:
        """The compile-time value of input `name`; refuses a run-time one."""
        value = self.values.get(name)
        if value is None:
            raise self.error(f"the {what} is not a compile-time constant")
        return value

    def scalar(self, name: str, what: str) -> int:
        """The compile-time value of a one-element input (a boolean gives 0 or 1)."""
        value = self.known(name, what)
        if value.size != 1:
            raise self.error(f"the {what} has {value.size} elements, not 1")
        return int(value.reshape(-1)[0])

    def inline(self, graph: onnx.GraphProto, prefix: str, bound: dict[str, str]) -> list[str]:
        """Emit a renamed copy of `graph`'s nodes (its inputs read `bound`); its outputs."""
        names = dict(bound)
        for name in _defined(graph):
            if name not in names:
                names[name] = self.fresh(f"{prefix}/{name}")
        if graph.sparse_initializer:
            raise self.error("sparse initializers in a subgraph are not supported")
        copy = onnx.GraphProto()
        copy.CopyFrom(graph)
        _rename(copy, names)
        self.inits.extend(copy.initializer)
        self.values.known.update((i.name, numpy_helper.to_array(i)) for i in copy.initializer)
        for node, base in zip(copy.node, node_names(graph), strict=True):
            node.name = f"{prefix}/{base}"
        self.emit(list(copy.node))
        return [names.get(v.name, v.name) for v in graph.output]

    def wanted(self, index: int) -> str:
        """The node's output `index` when present and read, else ''."""
        out = self.node.output[index] if index < len(self.node.output) else ""
        return out if out in self.read else ""

    def output(self, source: str, index: int) -> None:
        """Make the node's output `index` (when wanted) a copy of `source`."""
        out = self.wanted(index)
        if out:
            self.emit([helper.make_node("Identity", [source], [out], name=out)])

    def stacked(self, parts: list[str], axis: int) -> str:
        """The per-iteration `parts` stacked on a new `axis`."""
        if not parts:
            raise self.error("a scan output of zero iterations is not supported")
        rows = [self._unsqueeze(p, axis) for p in parts]
        return self.add("Concat", rows, f"{self.name}/stacked", axis=axis)

    def _unsqueeze(self, name: str, axis: int) -> str:
        """`name` with a new dimension of size 1 at `axis` (axes an attribute before opset 13)."""
        base = f"{name}/unsqueezed"
        if self.values.opset < 13:
            return self.add("Unsqueeze", [name], base, axes=[axis])
        axes = self.constant(f"{name}/axes", np.array([axis], np.int64))
        return self.add("Unsqueeze", [name, axes], base)


def _expand_if(site: _Site) -> None:
    """The taken branch of an If; both branches and Wheres for a run-time condition."""
    if site.values.get(site.node.input[0]) is None:
        _select(site)
        return
    taken = "then_branch" if site.scalar(site.node.input[0], "condition") else "else_branch"
    for index, out in enumerate(site.inline(site.graph(taken), site.name, {})):
        site.output(out, index)


def _select(site: _Site) -> None:
    """Both branches of an If with a run-time condition, each output chosen by a Where."""
    then, other = site.graph("then_branch"), site.graph("else_branch")
    shapes = [_shape_of(v) for v in (*then.output, *other.output)]
    same = shapes[: len(then.output)] == shapes[len(then.output) :]
    if site.values.opset < 9 or not same or None in shapes:
        raise site.error(
            "the condition is not a compile-time constant and the branches' outputs do not "
            "have the same static shapes (or the opset has no Where)"
        )
    cond = site.node.input[0]
    if site.values.shapes.get(cond) != ():
        scalar = site.constant(f"{site.name}/scalar", np.zeros(0, np.int64))
        cond = site.add("Reshape", [cond, scalar], f"{site.name}/condition")
    picks = zip(
        site.inline(then, f"{site.name}/then", {}),
        site.inline(other, f"{site.name}/else", {}),
        strict=True,
    )
    for index, (a, b) in enumerate(picks):
        site.output(site.add("Where", [cond, a, b], f"{site.name}/selected{index}"), index)


def _expand_loop(site: _Site) -> None:
    """A Loop unrolled while its trip count and condition (both compile-time) allow."""
    body = site.graph("body")
    trip, cond, *carried = site.node.input
    trips = site.scalar(trip, "trip count") if trip else None
    going = site.scalar(cond, "loop condition") if cond else True
    inputs, outputs = [v.name for v in body.input], [v.name for v in body.output]
    scans: list[list[str]] = [[] for _ in outputs[1 + len(carried) :]]
    i = 0
    while going and (trips is None or i < trips):
        prefix = f"{site.name}/{i}"
        bound = dict(zip(inputs[2:], carried, strict=True))
        bound[inputs[0]] = site.constant(f"{prefix}/{inputs[0]}", np.array(i, np.int64))
        bound[inputs[1]] = site.constant(f"{prefix}/{inputs[1]}", np.array(True))
        ends = site.inline(body, prefix, bound)
        carried = ends[1 : 1 + len(carried)]
        for parts, part in zip(scans, ends[1 + len(carried) :], strict=True):
            parts.append(part)
        going = site.scalar(ends[0], "loop condition") if cond else True
        i += 1
    for index, value in enumerate(carried):
        site.output(value, index)
    for index, parts in enumerate(scans, start=len(carried)):
        if site.wanted(index):
            site.output(site.stacked(parts, 0), index)


def _expand_scan(site: _Site) -> None:
    """A Scan unrolled over its static scan length (opset 8: per batch entry)."""
    body = site.graph("body")
    n_scan = next(a.i for a in site.node.attribute if a.name == "num_scan_inputs")
    if site.values.opset < 9:
        _expand_batched_scan(site, body, n_scan)
        return
    states, xs = list(site.node.input[:-n_scan]), list(site.node.input[-n_scan:])
    axes, reverse = site.ints("scan_input_axes", n_scan), site.ints("scan_input_directions", n_scan)
    n_out = len(body.output) - len(states)
    out_axes = site.ints("scan_output_axes", n_out)
    prepend = site.ints("scan_output_directions", n_out)
    states, scans = _scan_steps(site, body, states, _Slices(xs, axes, reverse), site.name)
    for index, value in enumerate(states):
        site.output(value, index)
    for k, parts in enumerate(scans):
        if site.wanted(len(states) + k):
            stacked = site.stacked(parts[::-1] if prepend[k] else parts, out_axes[k])
            site.output(stacked, len(states) + k)


def _expand_batched_scan(site: _Site, body: onnx.GraphProto, n_scan: int) -> None:
    """An opset-8 Scan: every input and output has a leading batch axis, the scan axis is 1."""
    lens, *inputs = site.node.input
    states, xs = inputs[:-n_scan], inputs[-n_scan:]
    batch, length = (site.values.shapes.get(xs[0]) or (-1, -1))[:2]
    if batch < 0:
        raise site.error(f"scan input '{xs[0]}' has no static shape")
    if lens and not np.all(site.known(lens, "sequence_lens") == length):
        raise site.error(f"sequence_lens must be the scan length {length} for every batch entry")
    outs: list[list[str]] = [[] for _ in body.output]
    for b in range(batch):
        prefix = f"{site.name}/{b}"
        entry = site.constant(f"{prefix}/batch", np.array(b, np.int64))
        rows = [site.take(t, entry, 0, f"{t}/{b}") for t in inputs]
        slices = _Slices(rows[len(states) :], [0] * n_scan, site.ints("directions", n_scan))
        ends, scans = _scan_steps(site, body, rows[: len(states)], slices, prefix)
        for parts, part in zip(outs, [*ends, *(site.stacked(p, 0) for p in scans)], strict=True):
            parts.append(part)
    for index, parts in enumerate(outs):
        site.output(site.stacked(parts, 0), index)


@dataclass(slots=True)
class _Slices:
    """The scan inputs of a Scan: tensors, their scan axes and directions (1: from the end)."""

    tensors: list[str]
    axes: list[int]
    reverse: list[int]


def _scan_steps(
    site: _Site, body: onnx.GraphProto, states: list[str], xs: _Slices, prefix: str
) -> tuple[list[str], list[list[str]]]:
    """Unroll a scan body over the inputs: the final states and each scan output's steps."""
    length = _scan_length(site, xs.tensors, xs.axes)
    inputs = [v.name for v in body.input]
    scans: list[list[str]] = [[] for _ in body.output[len(states) :]]
    for t in range(length):
        step = f"{prefix}/{t}"
        slices = [
            site.take(x, _step_index(site, step, t, length, back), a, f"{x}/{t}")
            for x, a, back in zip(xs.tensors, xs.axes, xs.reverse, strict=True)
        ]
        ends = site.inline(body, step, dict(zip(inputs, [*states, *slices], strict=True)))
        states = ends[: len(states)]
        for parts, part in zip(scans, ends[len(states) :], strict=True):
            parts.append(part)
    return states, scans


def _step_index(site: _Site, prefix: str, t: int, length: int, back: int) -> str:
    """The constant index of step `t` along a scan input (from the end when `back`)."""
    return site.constant(f"{prefix}/index", np.array(length - 1 - t if back else t, np.int64))


def _scan_length(site: _Site, xs: list[str], axes: list[int]) -> int:
    """The common static length of the scan inputs along their scan axes."""
    lengths = set()
    for x, axis in zip(xs, axes, strict=True):
        shape = site.values.shapes.get(x)
        if shape is None:
            raise site.error(f"scan input '{x}' has no static shape")
        lengths.add(shape[axis])
    if len(lengths) != 1:
        raise site.error(f"the scan inputs have different lengths {sorted(lengths)}")
    return lengths.pop()


def live_nodes(nodes: Sequence[onnx.NodeProto], read: set[str]) -> list[onnx.NodeProto]:
    """The nodes whose outputs `read` or a later live node reads (unrolling copies dead ones,
    exporters leave some)."""
    needed = set(read)
    live = []
    for node in reversed(nodes):
        if any(t in needed for t in node.output):
            live.append(node)
            needed.update(t for t in tensors_read([node]) if t)  # "": an absent input
    return live[::-1]


EXPANDERS = {"If": _expand_if, "Loop": _expand_loop, "Scan": _expand_scan}


def expand_control_flow(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every If, Loop and Scan replaced by plain nodes (or a refusal raised)."""
    added = 0
    while True:
        graph = model.graph
        sites = [
            (index, name)
            for index, (node, name) in enumerate(zip(graph.node, node_names(graph), strict=True))
            if node.op_type in CONTROL_OPS and node.domain in ("", "ai.onnx")
        ]
        if not sites:
            return model
        index, name = sites[0]
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        site = _Site(
            graph.node[index],
            name,
            _Values(graph, opset),
            set(_defined(graph)) | {v.name for v in graph.output},
            set(tensors_read(graph.node)) | {v.name for v in graph.output},
            MAX_ADDED_NODES - added,
        )
        EXPANDERS[site.node.op_type](site)
        live = live_nodes(site.nodes, site.read)
        added += len(live)
        nodes = [*graph.node[:index], *live, *graph.node[index + 1 :]]
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(site.inits)
        model = infer_shapes(model)
