"""Host segments: a `host` layer becomes one HostOp on the host queue, its operands in DDR.

NOTE: the host is one in-order queue (HOST) in core (0, 0)'s block, whatever rectangle a mesh
plan gave the layer. Its synchronisation is the lowering's DDR rule: the HostOp reads its
inputs after the BARRIERs closing every core's writes of them (an import BARRIER on core 0),
and its outputs are closed by a BARRIER every later reader waits for.
"""

from __future__ import annotations

import json

from npucc.backend.lower.context import LowerContext, lowering
from npucc.errors import NpuccError
from npucc.ir.graph import Layer
from npucc.ir.graph_schema import HOST_OP
from npucc.ir.isa import HostOp

HOST_CORE = 0  # index of the core whose block holds the host queue


@lowering(HOST_OP)
def lower_host(ctx: LowerContext, layer: Layer) -> None:
    """One HostOp reading the layer's inputs and writing its outputs, all whole DDR tensors."""
    spec = json.loads(layer.attrs["host"])
    if ctx.target.dtype != "f32":  # NOTE: host segments hold integers exactly only in float32
        raise NpuccError(f"host segment '{layer.name}' ({spec['op']}): host fallback runs at "
                         f"precision fp32 only, not {ctx.target.precision}")  # fmt: skip
    shapes = [ctx.shape(t) for t in (*layer.inputs, *layer.outputs)]
    for t, shape in zip((*layer.inputs, *layer.outputs), shapes, strict=True):
        if any(d < 0 for d in shape):
            raise NpuccError(
                f"host segment '{layer.name}' ({spec['op']}): tensor '{t}' has no static shape "
                f"{list(shape)} (npucc lays out DDR at compile time)"
            )
    ctx.begin_layer((HOST_CORE,))
    n = len(layer.inputs)
    types = tuple(zip(spec["in_types"] + spec["out_types"], shapes, strict=True))
    ins = tuple(ctx.ddr(t) for t in layer.inputs)
    outs = tuple(ctx.ddr(t) for t in layer.outputs)
    ctx.builder.emit(HostOp(layer.attrs["host"], ins, outs, types[:n], types[n:]))
