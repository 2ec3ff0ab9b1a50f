"""The planner's view of a graph: per-layer MACs, element operations and tensor volumes."""

from __future__ import annotations

import math

from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import HOST_OP, VIEW_OPS
from npucc.ir.plan import LayerLoad, Workload


def _macs(graph: Graph, layer: Layer) -> int:
    """Multiply-accumulates of the layer over the graph's whole batch."""
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
    """Element operations of non-MAC layers over the graph's whole batch (window size for
    pooling)."""
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


def graph_batch(graph: Graph) -> int:
    """The batch the graph carries: its inputs' common leading dimension (after `--batch N`),
    when every non-const tensor's elements divide by it (so a sample is 1/N of each); else 1.
    """
    leading = {graph.tensors[t].shape[0] for t in graph.inputs if graph.tensors[t].shape}
    if len(leading) != 1:
        return 1
    batch = leading.pop()
    if batch < 1 or any(
        math.prod(t.shape) % batch for name, t in graph.tensors.items() if not graph.is_const(name)
    ):
        return 1
    return batch


def workload_from_graph(graph: Graph, batch: int | None = None) -> Workload:
    """Per-sample loads of every layer (a sample is 1/`graph_batch` of each tensor) for a
    batch of `batch` samples (by default the graph's own)."""
    samples = graph_batch(graph)
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
                continue
            size //= samples
            if t in index:
                inputs[index[t]] = inputs.get(index[t], 0) + size
            else:
                ext += size
        for t in layer.outputs:
            index[t] = i
        out = sum(math.prod(graph.tensors[t].shape) for t in layer.outputs) // samples
        layers.append(
            LayerLoad(
                name=layer.name,
                macs=_macs(graph, layer) // samples,
                vops=_vops(graph, layer) // samples,
                weights=weights,
                out=out,
                inputs=tuple(sorted(inputs.items())),
                ext_in=ext,
                is_output=any(t in graph.outputs for t in layer.outputs),
            )
        )
    return Workload(graph.name, tuple(layers), samples if batch is None else batch)
