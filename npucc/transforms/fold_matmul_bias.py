"""fold-matmul-bias: a constant bias Add after a MatMul by a constant matrix, as one gemm.

Exporters write a dense layer on [..., K] activations (PyTorch's Linear, Keras' Dense) as
MatMul(x, W) + Add(b), W a [K, N] and b an [N] (or [1, N], [1, 1, N], ...) constant. The pair
becomes gemm(x as [M, K], W, b) with M the product of x's leading dims, viewed back as
[..., N] (reshapes are views): the bias is added in the gemm's epilogue, so the matmul's output
no longer makes a round trip through memory for a separate element-wise pass. The MatMul's
output must have no other reader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npucc.frontend.graph_edit import (
    add_const,
    const,
    fresh_layer_name,
    fresh_name,
    merged_src,
    single_user,
)
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.passes import CompileContext, GraphPass


def _bias(g: Graph, mm: Layer, add: Layer) -> str | None:
    """The add's constant operand if it is a bias over the matmul's last dim, else None."""
    if len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    y = mm.outputs[0]
    other = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
    out = g.tensors[y].shape
    shape = g.tensors[other].shape
    if not g.is_const(other) or g.tensors[add.outputs[0]].shape != out:
        return None
    if any(g.tensors[t].dtype != "f32" for t in (*mm.inputs, other)):
        return None
    if not shape or shape[-1] != out[-1] or math.prod(shape) != out[-1]:
        return None
    return other


def _view(g: Graph, name: str, src: str, dst: str) -> Layer:
    """A reshape layer (a view) from `src` to `dst`."""
    return Layer(fresh_layer_name(g, name), "reshape", [src], [dst])


def _match(g: Graph, add: Layer) -> tuple[Layer, str] | None:
    """(matmul, bias) of an add that folds into a gemm."""
    for x in add.inputs:
        mm = g.producer(x)
        if mm is None or mm.op != "matmul" or mm.attrs.get("act") or not single_user(g, x):
            continue
        a, w = mm.inputs
        if not g.is_const(w) or len(g.tensors[w].shape) != 2 or len(g.tensors[a].shape) < 2:
            continue
        bias = _bias(g, mm, add)
        if bias is not None:
            return mm, bias
    return None


@dataclass(frozen=True, slots=True)
class FoldMatmulBias(GraphPass):
    """Turn MatMul(x, W const) + Add(b const over the last dim) into one gemm with bias C."""

    name = "fold-matmul-bias"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Fold every matching pair."""
        folded = 0
        for add in list(ir.layers):
            if add.op != "add":
                continue
            found = _match(ir, add)
            if found is None:
                continue
            mm, bias = found
            a, w = mm.inputs
            n = ir.tensors[w].shape[1]
            if ir.tensors[bias].shape != (n,):
                bias = add_const(ir, f"{bias}.row", const(ir, bias).reshape(n))
            shape = ir.tensors[a].shape
            rows = math.prod(shape[:-1])
            layers = []
            if len(shape) > 2:  # NOTE: row-major [..., K] is [M, K]: a reshape is a view
                flat = fresh_name(ir, f"{a}.rows")
                ir.add_tensor(Tensor(flat, (rows, shape[-1])))
                layers.append(_view(ir, f"{mm.name}.rows", a, flat))
                a = flat
            out = add.outputs[0]
            y = out
            if len(shape) > 2:
                y = fresh_name(ir, f"{out}.rows")
                ir.add_tensor(Tensor(y, (rows, n)))
            attrs = {"trans_a": 0, "trans_b": 0, "alpha": 1.0, "beta": 1.0}  # legalize's form
            gemm = Layer(mm.name, "gemm", [a, w, bias], [y], attrs, merged_src(mm, add))
            layers.append(gemm)
            if y != out:
                layers.append(_view(ir, f"{add.name}.view", y, out))
            ir.remove_layer(mm)
            del ir.tensors[mm.outputs[0]]
            ir.replace_layer(add, layers)
            folded += 1
        ctx.stats["fold-matmul-bias.folded"] = folded
        return ir
