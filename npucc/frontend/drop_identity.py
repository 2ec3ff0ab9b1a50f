"""drop-identity: remove Identity and Dropout layers that are identities (inference, ratio 0)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.frontend.common import node_error, onnx_op, remove_layer_and_outputs
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass


def _random(g: Graph, layer: Layer) -> bool:
    """True when a Dropout drops at random: training mode with a ratio other than 0."""
    mode = layer.inputs[2] if len(layer.inputs) > 2 else ""
    if not mode:
        return False
    if not g.is_const(mode):
        raise node_error(layer, "training_mode must be a constant")
    if not bool(g.tensors[mode].data):
        return False
    ratio = layer.inputs[1]
    if ratio and not g.is_const(ratio):
        raise node_error(layer, "in training mode the ratio must be a constant")
    return not ratio or bool(np.any(g.tensors[ratio].data))


def _drop(g: Graph, layer: Layer) -> bool:
    """Remove `layer` (y = x), keeping graph output names; False when it must stay."""
    x, y = layer.inputs[0], layer.outputs[0]
    if y not in g.outputs:
        g.replace_uses(y, x)
        remove_layer_and_outputs(g, layer)
        return True
    producer = g.producer(x)
    if producer is None or x in g.outputs:
        return False  # y must stay a distinct graph output: legalised as a copy
    # y names a graph output: the producer writes y directly and every reader of x reads y
    g.remove_layer(layer)
    producer.outputs = [y if t == x else t for t in producer.outputs]
    g.replace_uses(x, y)
    del g.tensors[x]
    return True


@dataclass(frozen=True, slots=True)
class DropIdentity(GraphPass):
    """Bypass Identity and Dropout (inference mode) layers."""

    name = "drop-identity"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Drop every removable Identity/Dropout layer."""
        dropped = 0
        for layer in list(ir.layers):
            if onnx_op(layer) not in ("Identity", "Dropout"):
                continue
            if len(layer.outputs) > 1:
                raise node_error(layer, "the dropout mask output is not supported")
            if onnx_op(layer) == "Dropout" and _random(ir, layer):
                raise node_error(
                    layer, "training-mode Dropout with a ratio other than 0 is random: unsupported"
                )
            dropped += _drop(ir, layer)
        ctx.stats["drop-identity.dropped"] = dropped
        return ir
