"""sink-pools: a pool of a channel concat becomes a concat of each input's pool, and a max
pool takes the monotone activation of the layer it reads.

A pool works on each channel alone, so `pool(concat(a, b, axis=1))` equals
`concat(pool(a), pool(b), axis=1)`. SqueezeNet's fire modules and GoogLeNet's inception
modules join their branches by a channel concat that a max pool reads: in that order the whole
concat goes through DDR at full resolution (its producers write it, the pool reads it back).
Pooled per branch, each branch's producer is linked to its own pool (a conv -> pool pair the
lowering may cascade in bands, npucc.backend.lower.cascade) and the concat joins the smaller
pooled tensors. Only a concat along axis 1 whose one reader is the pool moves, and each new
pool comes right after its input's producer in the layer order.

A max commutes with a non-decreasing function: `maxpool(relu(x)) = relu(maxpool(x))`, and so
for a clip. So a float layer's fused relu or clip (fuse-activations) moves onto the max pool
that alone reads its output, which applies it to its outputs: a stride-2 3x3 pool has a
quarter as many (SqueezeNet's and GoogLeNet's conv -> max pool pairs, the branches above).
"""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.graph_edit import (
    fresh_layer_name,
    fresh_name,
    merged_src,
    rewrite_all,
    single_user,
    sole_channel_concat,
)
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.passes import CompileContext, GraphPass
from npucc.transforms.fuse_residual import ACT_ATTRS

PER_CHANNEL_POOLS = ("maxpool", "avgpool", "globalmaxpool", "globalavgpool")
MONOTONE_ACTS = ("relu", "clip")  # non-decreasing: they commute with a max


def _concat_under(g: Graph, pool: Layer) -> Layer | None:
    """The channel concat `pool` reads, when the pool is its only reader and layers produce
    every input of the concat."""
    if pool.op not in PER_CHANNEL_POOLS or "q" in pool.attrs:
        return None
    return sole_channel_concat(g, pool.inputs[0])


def _sink(g: Graph, pool: Layer, concat: Layer) -> None:
    """Rewrite `pool(concat(t...))` as `concat(pool(t)...)`, keeping the pool's output name."""
    y = pool.outputs[0]
    out = g.tensors[y]
    pooled: list[str] = []
    for t in concat.inputs:
        shape = (out.shape[0], g.tensors[t].shape[1], *out.shape[2:])
        name = g.add_tensor(Tensor(fresh_name(g, f"{t}.{pool.op}"), shape, out.dtype)).name
        layer = Layer(
            fresh_layer_name(g, f"{pool.name}.{len(pooled)}"),
            pool.op,
            [t],
            [name],
            dict(pool.attrs),
            pool.src,
        )
        g.add_layer(layer, after=g.producer(t))
        pooled.append(name)
    x = pool.inputs[0]
    g.remove_layer(pool)
    g.set_inputs(concat, pooled)
    g.set_outputs(concat, [y])
    del g.tensors[x]


def _act_under(g: Graph, pool: Layer) -> Layer | None:
    """The float layer whose monotone activation max pool `pool` can apply instead, when the
    pool alone reads its output and has no activation of its own."""
    if pool.op != "maxpool" or pool.attrs.get("act"):
        return None
    x = pool.inputs[0]
    producer = g.producer(x)
    if producer is None or producer.attrs.get("act") not in MONOTONE_ACTS:
        return None
    if "qzp" in producer.attrs or not single_user(g, x):
        return None  # an int8 layer's activation is a clamp of its requantization
    return producer


def _take_act(g: Graph, pool: Layer, producer: Layer) -> None:
    """Move the activation of `producer` (`_act_under`) onto `pool`."""
    for name in ACT_ATTRS:
        if name in producer.attrs:
            pool.attrs[name] = producer.attrs.pop(name)
    # NOTE: the fused activation's ONNX nodes are not told apart from the producer's, so the
    # pool's provenance takes all of them (debug map)
    pool.src = merged_src(pool, producer)


@dataclass(frozen=True, slots=True)
class SinkPools(GraphPass):
    """Move each per-channel pool of a channel concat onto the concat's inputs."""

    name = "sink-pools"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Sink every such pool (each branch of the concat then has its own), then every such
        activation."""
        ctx.stats["sink-pools.sunk"] = rewrite_all(ir, _concat_under, _sink)
        ctx.stats["sink-pools.acts"] = rewrite_all(ir, _act_under, _take_act)
        return ir
