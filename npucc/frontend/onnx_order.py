"""Topological order of an ONNX graph's nodes (onnxruntime accepts unsorted graphs; so do we).

ONNX asks for nodes in topological order, but exporters and hand-edited models do not always
keep it. A graph out of order is sorted (stable: among ready nodes the earliest first, so a
sorted graph keeps its order byte for byte); a graph whose nodes feed each other in a cycle is
an error naming the nodes of one cycle. Subgraphs (If/Loop/Scan bodies) are sorted the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

from npucc.errors import NpuccError

if TYPE_CHECKING:
    import networkx as nx


def topologically_sorted(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` if every graph in it is in topological order, else a sorted copy."""
    if _all_sorted(model.graph):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    _sort(copy.graph)
    return copy


def _names(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _dependencies(graph: onnx.GraphProto) -> nx.DiGraph:
    """Node index -> node index for every tensor a node reads that another node makes."""
    import networkx as nx  # NOTE: deferred: only an unsorted graph needs it (start-up time)

    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    deps = nx.DiGraph()
    deps.add_nodes_from(range(len(graph.node)))
    for i, node in enumerate(graph.node):
        for name in _reads(node):
            if name in producer and producer[name] != i:
                deps.add_edge(producer[name], i)
    return deps


def _reads(node: onnx.NodeProto) -> set[str]:
    """The tensors a node reads, its subgraphs' reads of outer names included."""
    reads = {name for name in node.input if name}
    for attr in node.attribute:
        for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
            inner = {out for n in sub.node for out in n.output}
            inner |= {v.name for v in (*sub.input, *sub.initializer)}
            reads |= {name for n in sub.node for name in _reads(n)} - inner
    return reads


def _subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    return [
        sub
        for node in graph.node
        for attr in node.attribute
        for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs)
    ]


def _all_sorted(graph: onnx.GraphProto) -> bool:
    made: set[str] = set()
    every = {out for node in graph.node for out in node.output}
    for node in graph.node:
        if any(name in every and name not in made for name in _reads(node)):
            return False
        made.update(node.output)
    return all(_all_sorted(sub) for sub in _subgraphs(graph))


def _sort(graph: onnx.GraphProto) -> None:
    import networkx as nx  # NOTE: deferred with _dependencies'

    deps = _dependencies(graph)
    try:
        order = list(nx.lexicographical_topological_sort(deps))
    except nx.NetworkXUnfeasible:
        cycle = [u for u, _ in nx.find_cycle(deps)]
        names = " -> ".join(_names(graph.node[i], i) for i in [*cycle, cycle[0]])
        raise NpuccError(
            f"the graph's nodes feed each other in a cycle: {names} "
            f"(node '{_names(graph.node[cycle[0]], cycle[0])}')"
        ) from None
    nodes = [graph.node[i] for i in order]
    del graph.node[:]
    graph.node.extend(nodes)
    for sub in _subgraphs(graph):
        _sort(sub)
