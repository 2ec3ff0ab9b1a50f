"""The planner's view of a graph: per-layer MACs, element operations and tensor volumes."""

from __future__ import annotations

import math

from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import HOST_OP, VIEW_OPS
from npucc.ir.plan import LayerLoad, Workload


def _macs(graph: Graph, layer: Layer) -> int:
    """Multiply-accumulates of one sample (batch dimension 1 of the imported graph)."""
    out = graph.tensors[layer.outputs[0]].shape
    if layer.op == "conv2d":
        w = graph.tensors[layer.inputs[1]].shape
        return math.prod(out) * math.prod(w[1:])
    if layer.op == "gemm":
        a = graph.tensors[layer.inputs[0]].shape
        k = a[0] if layer.attrs.get("trans_a") else a[1]
        return math.prod(out) * k
    if layer.op == "matmul":
        return math.prod(out) * graph.tensors[layer.inputs[0]].shape[-1]
    return 0


def _vops(graph: Graph, layer: Layer) -> int:
    """Element operations of one sample for non-MAC layers (window size for pooling)."""
    if layer.op in ("conv2d", "gemm", "matmul", HOST_OP) or layer.op in VIEW_OPS:
        return 0  # NOTE: a host segment is no NPU work
    out = math.prod(graph.tensors[layer.outputs[0]].shape)
    if layer.op in ("maxpool", "avgpool"):
        return out * math.prod(layer.attrs.get("kernel", (1, 1)))
    if layer.op in ("globalavgpool", "globalmaxpool"):
        return math.prod(graph.tensors[layer.inputs[0]].shape)
    if layer.op in ("lrn",):
        return out * int(layer.attrs.get("size", 1))
    return out


def workload_from_graph(graph: Graph, batch: int = 1) -> Workload:
    """Per-sample loads of every layer (the graph's own batch dimension is one sample)."""
    index: dict[str, int] = {}
    layers: list[LayerLoad] = []
    for i, layer in enumerate(graph.layers):
        inputs: dict[int, int] = {}
        ext = weights = 0
        for t in layer.inputs:
            if not t:
                continue
            size = math.prod(graph.tensors[t].shape)
            if graph.is_const(t):
                weights += size
            elif t in index:
                inputs[index[t]] = inputs.get(index[t], 0) + size
            else:
                ext += size
        for t in layer.outputs:
            index[t] = i
        out = sum(math.prod(graph.tensors[t].shape) for t in layer.outputs)
        layers.append(
            LayerLoad(
                name=layer.name,
                macs=_macs(graph, layer),
                vops=_vops(graph, layer),
                weights=weights,
                out=out,
                inputs=tuple(sorted(inputs.items())),
                ext_in=ext,
                is_output=any(t in graph.outputs for t in layer.outputs),
            )
        )
    return Workload(graph.name, tuple(layers), batch)
