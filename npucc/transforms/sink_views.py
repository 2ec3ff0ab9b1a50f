"""sink-views: move a reshape between a cube layer and its element-wise epilogue past it.

Exporters view a dense layer's [M, N] product back as [..., N] before its activation or its
residual add (gemm -> reshape -> gelu, gemm -> reshape -> add): the view hides the pair from
fuse-activations and fuse-residual. Element-wise ops commute with a reshape (a pure row-major
view), so `op(reshape(t), r)` becomes `reshape(op(t, reshape(r)))`: the op reads the cube
layer's output directly and the fusions see it. Only a view whose input is a gemm, matmul or
conv2d output read by nothing else moves, and only past an op that can fuse into one: a relu,
clip or gelu, or an add whose operands have the same shape (no broadcast).
"""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.graph_edit import fresh_layer_name, fresh_name, rewrite_all, single_user
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.passes import CompileContext, GraphPass

CUBE_PRODUCERS = ("gemm", "matmul", "conv2d")
SINKABLE = ("relu", "clip", "gelu", "add")


def _view_of_cube(g: Graph, x: str) -> Layer | None:
    """The reshape writing `x` when it views a cube layer's output that nothing else reads."""
    view = g.producer(x)
    if view is None or view.op != "reshape" or not single_user(g, x) or x in g.outputs:
        return None
    t = view.inputs[0]
    producer = g.producer(t)
    if producer is None or producer.op not in CUBE_PRODUCERS or t in g.outputs:
        return None
    return view if single_user(g, t) else None


def _sinkable_view(g: Graph, op: Layer) -> Layer | None:
    """The view `op` can move past (see the module docstring), or None."""
    if op.op not in SINKABLE:
        return None
    if op.op != "add":
        return _view_of_cube(g, op.inputs[0])
    a, b = op.inputs
    if a == b or g.tensors[a].shape != g.tensors[b].shape:
        return None
    return _view_of_cube(g, a) or _view_of_cube(g, b)


def _sink(g: Graph, op: Layer, view: Layer) -> None:
    """Rewrite `op(view(t), r...)` as `view(op(t, reshape(r)...))`, keeping op's output name."""
    u, t = view.outputs[0], view.inputs[0]
    shape = g.tensors[t].shape
    y = op.outputs[0]
    before: list[Layer] = []
    inputs = []
    for x in op.inputs:
        if x == u:
            inputs.append(t)
            continue
        x2 = g.add_tensor(Tensor(fresh_name(g, f"{x}.view"), shape, g.tensors[x].dtype)).name
        name = fresh_layer_name(g, f"{op.name}.view")
        before.append(Layer(name, "reshape", [x], [x2], src=op.src))
        inputs.append(x2)
    g.set_inputs(op, inputs)
    g.remove_layer(view)
    del g.tensors[u]
    y2 = g.add_tensor(Tensor(fresh_name(g, f"{y}.{op.op}"), shape, g.tensors[y].dtype)).name
    g.set_outputs(op, [y2])
    after = Layer(view.name, "reshape", [y2], [y], src=view.src)
    g.replace_layer(op, [*before, op, after])


@dataclass(frozen=True, slots=True)
class SinkViews(GraphPass):
    """Move each reshape of a cube layer's output past the element-wise op that reads it."""

    name = "sink-views"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Sink every such view (one per op: the op then reads the cube layer's output)."""
        ctx.stats["sink-views.sunk"] = rewrite_all(ir, _sinkable_view, _sink)
        return ir
