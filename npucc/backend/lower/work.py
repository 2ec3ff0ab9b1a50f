"""The least work each graph layer asks of any program: MACs, vector elements, weights.

These are the inputs of the roofline (`npucc.backend.schedule.roofline`): they describe the
model's math, not how the lowering maps it, so a program that wastes work (zero blocks, padding)
scores lower against them.
"""

from __future__ import annotations

import math

from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import HOST_OP, VIEW_OPS
from npucc.ir.program import LayerWork

# ops that only move data: a DMA can do them, so they ask nothing of the vector unit
MOVE_OPS = frozenset({"slice", "take", "expand", "copy", "pad", "concat", "transpose", *VIEW_OPS})
# ops whose every input element must pass the vector unit (reductions over it)
REDUCE_OPS = frozenset({"reduce", "softmax", "layernorm", "globalavgpool", "globalmaxpool"})
CUBE_OPS = frozenset({"conv2d", "gemm", "matmul", "attention"})


def layer_work(graph: Graph) -> list[LayerWork]:
    """Every layer's least work, in layer order; each constant's elements count once, at the
    first layer that reads it."""
    seen: set[str] = set()
    out = []
    for layer in graph.layers:
        weights = 0
        for name in layer.inputs:
            if name and graph.is_const(name) and name not in seen:
                seen.add(name)
                weights += _const_elems(graph, layer, name)
        out.append(LayerWork(layer.name, layer.op, macs(graph, layer), _vector(graph, layer),
                             weights, layer.src))  # fmt: skip
    return out


def macs(graph: Graph, layer: Layer) -> int:
    """Multiply-accumulates of a conv2d, gemm, matmul or attention layer (0 for the rest)."""
    t = graph.tensors
    out = math.prod(t[layer.outputs[0]].shape)
    if layer.op == "conv2d":
        w = t[layer.inputs[1]]
        return out * math.prod(w.shape[1:]) // layer.attrs.get("dense", 1)
    if layer.op == "gemm":
        a = t[layer.inputs[0]].shape
        return out * (a[0] if layer.attrs.get("trans_a") else a[1])
    if layer.op == "matmul":
        return out * t[layer.inputs[0]].shape[-1]
    if layer.op == "attention":
        batch, sq, sk, d, dv = attention_dims(graph, layer)
        return math.prod(batch) * sq * sk * (d + dv)
    return 0


def attention_dims(graph: Graph, layer: Layer) -> tuple[tuple[int, ...], int, int, int, int]:
    """(batch dims, Sq, Sk, D, Dv) of an attention layer; K and V may be broadcast over batch
    dims (stride 0), so only the dims they span count in their sizes."""
    t = graph.tensors
    out_shape = t[layer.outputs[0]].shape
    batch, (sq, dv) = out_shape[:-2], out_shape[-2:]
    v_rows = math.prod(n for n, st in zip(batch, layer.attrs["v_strides"], strict=False) if st)
    d = math.prod(t[layer.inputs[0]].shape) // (math.prod(batch) * sq)
    sk = math.prod(t[layer.inputs[2]].shape) // (v_rows * dv)
    return batch, sq, sk, d, dv


def _vector(graph: Graph, layer: Layer) -> int:
    """Elements the vector unit must process: every output element of a computing layer, every
    input element of a reduction; none for the cube's layers and pure data movement."""
    if layer.op in CUBE_OPS or layer.op in MOVE_OPS or layer.op == HOST_OP:
        return 0  # NOTE: a host segment asks nothing of the NPU
    out = sum(math.prod(graph.tensors[t].shape) for t in layer.outputs)
    if layer.op in REDUCE_OPS:
        return max(out, math.prod(graph.tensors[layer.inputs[0]].shape))
    return out


def _const_elems(graph: Graph, layer: Layer, name: str) -> int:
    """Elements of constant `name` a program must read at least: all of it, except a table
    that a run-time gather reads (`take` with ids): only the rows it gathers."""
    tensor = graph.tensors[name]
    elems = math.prod(tensor.shape)
    if layer.op == "take" and len(layer.inputs) > 1 and name == layer.inputs[0]:
        return min(elems, math.prod(graph.tensors[layer.outputs[0]].shape))
    if layer.op == "conv2d" and name == layer.inputs[1]:
        return elems // layer.attrs.get("dense", 1)
    return elems
