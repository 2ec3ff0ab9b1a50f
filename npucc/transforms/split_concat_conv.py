"""split-concat-conv: a conv of a channel concat becomes one conv per branch, summed as residuals.

A conv's product sums over its input channels, so `conv(concat(a, b), W)` equals
`conv(a, W[:, :ca]) + conv(b, W[:, ca:])`. SqueezeNet's fire modules concatenate two expand
convs that the next squeeze (a 1x1 conv) alone reads: in that order the whole concat goes
through DDR (both expands write it, the squeeze reads it back). Split, each expand is linked to
its own part of the squeeze (a conv -> conv pair the lowering may cascade in bands or keep
resident), and only the squeeze-sized partial sums are handed on: the first part computes
`t = conv(a, W_a)`, the last reads `t` as its fused residual (fuse-residual's epilogue) and
adds the bias and the activation. Only a float group-1 conv without a residual of its own
whose input is a concat along axis 1 of layers' outputs, read by nothing else, splits; each
part comes right after its branch's producer (and the previous part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npucc.frontend.graph_edit import (
    add_const,
    const,
    fresh_layer_name,
    fresh_name,
    rewrite_all,
    sole_channel_concat,
)
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.passes import CompileContext, GraphPass
from npucc.transforms.fuse_residual import ACT_ATTRS


def _concat_of(g: Graph, conv: Layer) -> Layer | None:
    """The channel concat `conv` splits over (see the module docstring), or None."""
    if conv.op != "conv2d" or conv.attrs.get("group", 1) != 1 or "qzp" in conv.attrs:
        return None
    if len(conv.inputs) > 3:
        return None
    x = conv.inputs[0]
    concat = sole_channel_concat(g, x)
    if concat is None or any(t in g.outputs for t in concat.inputs):
        return None
    if math.prod(g.tensors[conv.outputs[0]].shape) >= math.prod(g.tensors[x].shape):
        return None  # the partial sums handed on would outweigh the concat
    return concat


def _split(g: Graph, conv: Layer, concat: Layer) -> None:
    """Replace `conv(concat(t...))` by one conv per branch, each adding the previous one's sum
    as its residual; the last keeps the conv's bias, activation and output name."""
    w = const(g, conv.inputs[1])
    bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
    y = conv.outputs[0]
    out = g.tensors[y]
    order = {id(layer): i for i, layer in enumerate(g.layers)}
    plain = {k: v for k, v in conv.attrs.items() if k not in ACT_ATTRS}
    partial, after, at, c0 = "", conv, -1, 0
    for i, t in enumerate(concat.inputs):
        c1 = c0 + g.tensors[t].shape[1]
        weights = add_const(g, f"{conv.inputs[1]}.c{c0}", w[:, c0:c1].copy())
        last = i == len(concat.inputs) - 1
        if last:
            name = y
        else:
            name = g.add_tensor(Tensor(fresh_name(g, f"{y}.part{i}"), out.shape, out.dtype)).name
        inputs = [t, weights]
        if partial or (last and bias):
            inputs.append(bias if last else "")
        if partial:
            inputs.append(partial)
        attrs = dict(conv.attrs) if last else dict(plain)
        layer = Layer(fresh_layer_name(g, f"{conv.name}.part{i}"), "conv2d", inputs, [name],
                      attrs, conv.src)  # fmt: skip
        producer = g.producer(t)
        assert producer is not None
        if order[id(producer)] > at:  # else right after the previous part
            after, at = producer, order[id(producer)]
        if last:
            g.remove_layer(conv)
        g.add_layer(layer, after=after)
        after, partial, c0 = layer, name, c1
    g.remove_layer(concat)
    del g.tensors[concat.outputs[0]]


@dataclass(frozen=True, slots=True)
class SplitConcatConv(GraphPass):
    """Split each float conv of a channel concat into one conv per branch (summed in turn)."""

    name = "split-concat-conv"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Split every such conv."""
        ctx.stats["split-concat-conv.split"] = rewrite_all(ir, _concat_of, _split)
        return ir
