"""fuse-activations: fold a Relu/Clip into the layer producing its input, and a gelu into the
float cube layer (gemm, matmul, group-1 conv2d) producing it, whose epilogue computes it on the
output tile in UB (with one temporary tile) instead of a separate pass over DDR."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.graph_edit import merged_src, single_user
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass

PRODUCERS = ("conv2d", "gemm", "matmul", "add", "sub", "mul", "div")
GELU_PRODUCERS = ("conv2d", "gemm", "matmul")


def _fusible_producer(g: Graph, act: Layer) -> Layer | None:
    x = act.inputs[0]
    producer = g.producer(x)
    if producer is None or producer.op not in PRODUCERS or producer.attrs.get("act", ""):
        return None
    if act.op == "gelu" and (
        producer.op not in GELU_PRODUCERS
        or "qzp" in producer.attrs  # an int8 layer: its act is a clamp of its requantization
        or producer.attrs.get("group", 1) != 1  # a grouped conv may lower to the vector pipe
    ):
        return None
    return producer if single_user(g, x) else None


@dataclass(frozen=True, slots=True)
class FuseActivations(GraphPass):
    """Set act="relu"|"clip" on conv2d/gemm/matmul/element-wise producers, act="gelu"|
    "gelu_tanh" (the gelu's approximation) on float gemm/matmul/group-1 conv2d producers."""

    name = "fuse-activations"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every activation whose input has no other reader."""
        fused = 0
        for act in list(ir.layers):
            if act.op not in ("relu", "clip", "gelu"):
                continue
            producer = _fusible_producer(ir, act)
            if producer is None:
                continue
            producer.attrs["act"] = act.op
            if act.op == "gelu" and act.attrs.get("approximate", "none") == "tanh":
                producer.attrs["act"] = "gelu_tanh"
            if act.op == "clip":
                producer.attrs["act_min"] = act.attrs["min"]
                producer.attrs["act_max"] = act.attrs["max"]
            # the producer writes the activation's output; its own output had no other reader
            ir.remove_layer(act)
            producer.src = merged_src(producer, act)
            ir.set_outputs(producer, list(act.outputs))
            del ir.tensors[act.inputs[0]]
            fused += 1
        ctx.stats["fuse-activations.fused"] = fused
        return ir
