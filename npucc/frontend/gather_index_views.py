"""gather-index-views: a Gather whose run-time indices are a reshaped integer graph input
gathers by the input itself, and its output is reshaped instead (GPT-2 flattens its token ids
first), so that an input read only as indices stays a raw int64 input.

Gathering by a row-major view of the indices gives the same values in the same order as
gathering by the indices, so Gather(data, view(ids)) is a reshape of Gather(data, ids).
"""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.common import fresh_layer_name, fresh_name, onnx_op
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.passes import CompileContext, GraphPass

# views that keep the row-major order of the values (the index input's views we look through)
ORDER_KEEPING_VIEWS = ("Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten")


def index_source(g: Graph, indices: str) -> tuple[str, list[Layer]]:
    """The graph input `indices` is a view of (itself if none) and the view layers between."""
    views: list[Layer] = []
    producer = g.producer(indices)
    while producer is not None and onnx_op(producer) in ORDER_KEEPING_VIEWS:
        views.append(producer)
        indices = producer.inputs[0]
        producer = g.producer(indices)
    return indices, views


@dataclass(frozen=True, slots=True)
class GatherIndexViews(GraphPass):
    """Gather by the index input itself, reshaping the output, when the indices are its view."""

    name = "gather-index-views"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Rewrite every such Gather; drop the views nothing else reads."""
        for layer in [x for x in ir.layers if onnx_op(x) == "Gather"]:
            root, views = index_source(ir, layer.inputs[1])
            if not views or root not in ir.inputs or ir.tensors[root].dtype not in ("i64", "i32"):
                continue
            data = ir.tensors[layer.inputs[0]].shape
            axis = int(layer.attrs.get("axis", 0)) % len(data)
            out = layer.outputs[0]
            gathered = fresh_name(ir, f"{out}.gathered")
            shape = (*data[:axis], *ir.tensors[root].shape, *data[axis + 1 :])
            ir.add_tensor(Tensor(gathered, shape, ir.tensors[out].dtype))
            layer.inputs[1], layer.outputs[0] = root, gathered
            reshape = Layer(
                fresh_layer_name(ir, f"{layer.name}.view"), "reshape", [gathered], [out]
            )
            ir.add_layer(reshape, ir.layers.index(layer) + 1)
            for view in views:
                if not any(ir.users(t) for t in view.outputs) and view.outputs[0] not in ir.outputs:
                    ir.remove_layer(view)
                    for t in view.outputs:
                        del ir.tensors[t]
        return ir
