"""fuse-residual: a residual Add (and its activation) into the conv or gemm producing one of
its operands, which then adds the other operand's tile to each output tile before storing it.

At int8 the add requantizes its sum (`q`: scale and zero point of each operand and of the
sum); an int8 producer keeps its own requantization out of L0C (the add's operand is an int8
tensor in ONNX's QDQ semantics) and takes the add's `q`, its operands ordered (producer's
output, residual), as `res_q`: the same two roundings as the separate add, on the UB tile.
"""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.graph_edit import merged_src, single_user
from npucc.ir.graph import Graph, Layer
from npucc.passes import CompileContext, GraphPass

ACT_ATTRS = ("act", "act_min", "act_max")


def _fusible(g: Graph, add: Layer) -> tuple[Layer, str, str] | None:
    """(producer, its output, the residual) of an add that one of its operands' producers can
    compute: a group-1 conv2d or a gemm, without an activation or a residual of its own, whose
    output has no other reader and has the add's shape (no broadcast)."""
    if len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    shape = g.tensors[add.outputs[0]].shape
    if any(g.tensors[t].shape != shape for t in add.inputs):
        return None
    for x, residual in (add.inputs, add.inputs[::-1]):
        producer = g.producer(x)
        if producer is None or producer.attrs.get("act") or len(producer.inputs) > 3:
            continue
        if ("q" in add.attrs) != ("qzp" in producer.attrs):  # int8 add of an int8 product
            continue
        cube = producer.op == "gemm" or (
            producer.op == "conv2d" and producer.attrs.get("group", 1) == 1
        )
        if cube and single_user(g, x):
            return producer, x, residual
    return None


@dataclass(frozen=True, slots=True)
class FuseResidual(GraphPass):
    """Make a conv2d/gemm read an add's other operand as its residual (inputs[3]), where the
    add was, with the add's activation: one element-wise pass (2 reads, 1 write) fewer."""

    name = "fuse-residual"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fuse every residual add whose conv or gemm operand has no other reader."""
        fused = 0
        for add in list(ir.layers):
            if add.op != "add":
                continue
            found = _fusible(ir, add)
            if found is None:
                continue
            producer, x, residual = found
            # NOTE: the fused layer takes the add's place: every operand of both is ready there
            ir.remove_layer(producer)
            bias = producer.inputs[2] if len(producer.inputs) > 2 else ""
            producer.inputs = [*producer.inputs[:2], bias, residual]
            producer.outputs = list(add.outputs)
            producer.attrs.update({a: add.attrs[a] for a in ACT_ATTRS if a in add.attrs})
            if "q" in add.attrs:
                q = tuple(add.attrs["q"])
                producer.attrs["res_q"] = q if x == add.inputs[0] else (*q[2:4], *q[:2], *q[4:])
            producer.src = merged_src(producer, add)
            ir.replace_layer(add, [producer])
            del ir.tensors[x]
            fused += 1
        ctx.stats["fuse-residual.fused"] = fused
        return ir
