"""fuse-shortcut: a 1x1 conv whose output only a fused residual reads (a ResNet projection
shortcut) becomes more K of the 1x1 conv that adds it.

    y = act(conv1x1(x, Wx) + bx + conv1x1(s, Ws, strides) + bs)
      = act(conv1x1([x ; s at strides], [Wx | Ws]) + bx + bs)

The consumer reads `s` as its second image (input 4, `s_strides`): its K is x's channels
then s's, each output pixel reading s at the shortcut's strides. The shortcut's output (the
size of the block's output) is then neither written nor read back: on ResNet-50, 3.2 MB
written and read at 56 x 56 and half as much at each later stage. On one core only (a mesh
plans its layers' handoffs over the NoC, HyperCut's decision); float layers only; only when
the shortcut's output exceeds a quarter of L1 (npucc.backend.lower.resident's RESIDENT_SHARE,
which this pass cannot import): a smaller one could stay resident, and the fused conv's
images are loaded from DDR (neither is read in place).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from npucc.frontend.graph_edit import add_const, const, merged_src, single_user
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass
from npucc.target import Target


def _pointwise(g: Graph, layer: Layer, strided: bool) -> bool:
    """A float group-1 1x1 conv without pads or dilation (`strided`: any strides, else 1)
    and with constant weights (and bias)."""
    a = layer.attrs
    if layer.op != "conv2d" or a.get("group", 1) != 1 or "qzp" in a or "dense" in a:
        return False
    if any(a.get("pads", (0, 0, 0, 0))) or tuple(a.get("dilations", (1, 1))) != (1, 1):
        return False
    if not strided and tuple(a.get("strides", (1, 1))) != (1, 1):
        return False
    bias = layer.inputs[2] if len(layer.inputs) > 2 else ""
    w = g.tensors[layer.inputs[1]]
    return w.shape[2:] == (1, 1) and g.is_const(layer.inputs[1]) and (not bias or g.is_const(bias))


def _shortcut(g: Graph, conv: Layer, target: Target) -> Layer | None:
    """The 1x1 conv producing `conv`'s residual, when `conv` can compute it as more K and
    the residual is too large to stay in L1 between the two (RESIDENT_SHARE)."""
    if len(conv.inputs) != 4 or not conv.inputs[3] or not _pointwise(g, conv, False):
        return None
    r = conv.inputs[3]
    if math.prod(g.tensors[r].shape) * target.elem_bytes <= target.memory.capacity("L1") // 4:
        return None
    producer = g.producer(r)
    if producer is None or producer is conv or r in g.outputs or not single_user(g, r):
        return None
    if len(producer.inputs) > 3 or producer.attrs.get("act") or not _pointwise(g, producer, True):
        return None
    return producer


def _bias(g: Graph, layer: Layer, co: int) -> np.ndarray:
    """The layer's bias (zeros without one)."""
    name = layer.inputs[2] if len(layer.inputs) > 2 else ""
    return const(g, name).astype(np.float64) if name else np.zeros(co)


@dataclass(frozen=True, slots=True)
class FuseShortcut(GraphPass):
    """Fold every 1x1 conv that only feeds a 1x1 conv's fused residual into that conv's K."""

    name = "fuse-shortcut"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse each shortcut conv into the conv reading it as its residual (one core)."""
        fused = 0
        for conv in list(ir.layers) if ctx.target.cores == 1 else []:
            shortcut = _shortcut(ir, conv, ctx.target)
            if shortcut is None:
                continue
            wx, ws = const(ir, conv.inputs[1]), const(ir, shortcut.inputs[1])
            co = wx.shape[0]
            w = add_const(ir, f"{conv.inputs[1]}.shortcut", np.concatenate([wx, ws], axis=1))
            bias = _bias(ir, conv, co) + _bias(ir, shortcut, co)
            b = add_const(ir, f"{conv.inputs[1]}.shortcut_bias", bias.astype(np.float32))
            r = conv.inputs[3]
            ir.remove_layer(shortcut)
            ir.set_inputs(conv, [conv.inputs[0], w, b, "", shortcut.inputs[0]])
            conv.attrs["s_strides"] = tuple(shortcut.attrs.get("strides", (1, 1)))
            conv.src = merged_src(conv, shortcut)
            del ir.tensors[r]
            fused += 1
        ctx.stats["fuse-shortcut.fused"] = fused
        return ir
