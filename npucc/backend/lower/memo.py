"""Work a lowering does once per compile for every layer of the same signature.

A layer's signature is everything of it a lowering can read from the graph, with the names
left out: its op, its attributes, which of its operands are the same tensor, and each operand's
shape, element type, quantization and whether it is a constant (not its data: no lowering
decision reads weights). A memoized computation runs on `scratch`, a graph rebuilt from the
signature alone (tensors t0, t1, ..., constants of zeros, the layer named "scratch"), on a
fresh program and builder: it cannot read anything its key leaves out, so two layers of equal
keys get equal results by construction, not by a list of what the code happens to read.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from npucc.backend.lower.builder import Forms, MeshBuilder
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.trial_graph import TrialBuilder, TrialGraph
from npucc.errors import NpuccError
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.program import TiledProgram

T = TypeVar("T")

Operand = tuple[tuple[int, ...], str, tuple[float, int] | None, bool]  # shape, dtype, quant, const
Wiring = tuple[tuple[int, ...], tuple[int, ...]]  # each input's, output's operand (-1: absent)
Signature = tuple[str, Hashable, Wiring, tuple[Operand, ...]]


def frozen(value: Any) -> Hashable:
    """A hashable value, equal for equal attribute values only (lists, tuples, dicts, arrays,
    scalars; a float by its bits, so 0.0 and -0.0 differ)."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, frozen(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(frozen(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, float):
        return ("float", value.hex()) if value == value else ("float", "nan")
    if isinstance(value, (str, bytes, int, bool, type(None), np.generic)):
        return (type(value).__name__, value)
    raise TypeError(f"attribute value of type {type(value).__name__} has no signature")


def signature(graph: Graph, layer: Layer) -> Signature:
    """The layer's signature: op, attributes, operand wiring and each operand's type."""
    names = list(dict.fromkeys(n for n in (*layer.inputs, *layer.outputs) if n))
    index = {name: i for i, name in enumerate(names)}
    types = tuple(
        (t.shape, t.dtype, t.quant, t.data is not None)
        for t in map(graph.tensors.__getitem__, names)
    )
    wiring: Wiring = (
        tuple(index.get(n, -1) for n in layer.inputs),
        tuple(index[n] for n in layer.outputs),
    )
    return (layer.op, frozen(layer.attrs), wiring, types)


def layer_signature(ctx: LowerContext, layer: Layer) -> Signature:
    """`signature` of the layer in `ctx`'s graph, worked out once per graph and layer (the
    memo holds both beside it: their ids are not reused while it is kept).

    NOTE: a graph is complete before it is lowered (band graphs, scratch graphs): the
    operands a signature reads do not change while it is lowered."""
    graph = ctx.graph
    known: dict[tuple[int, int], tuple[Graph, Layer, Signature]]
    known = ctx.memo.setdefault(SIGNATURES, {})
    found = known.get((id(graph), id(layer)))
    if found is None or found[0] is not graph or found[1] is not layer:
        found = known[id(graph), id(layer)] = (graph, layer, signature(graph, layer))
    return found[2]


SIGNATURES = ("signatures",)  # the memo's key of `layer_signature`'s


def fresh(ctx: LowerContext, graph: Graph) -> LowerContext:
    """A context on `graph` with `ctx`'s target, L1 reservation and memo, a fresh program and
    one fresh core (what is emitted there reaches no output: a `TrialGraph`, `trial_graph`)."""
    program = TiledProgram(graph.name, ctx.target)
    builder = MeshBuilder([TrialBuilder(TrialGraph(), ctx.target, forms(ctx.memo))])
    out = LowerContext(graph, program, builder, ctx.target, reserved=ctx.reserved, memo=ctx.memo)
    out.begin_layer((0,))
    return out


def trial_graph(trial: LowerContext) -> TrialGraph:
    """What a lowering on `fresh` context `trial` emitted."""
    graph = trial.builder.builders[0].graph
    assert isinstance(graph, TrialGraph)
    return graph


def forms(memo: dict[Hashable, Any]) -> Forms:
    """The instruction forms' figures every builder of one compile shares (its lowerings'
    `memo`: one target)."""
    found: Forms = memo.setdefault(FORMS, {})
    return found


FORMS = ("forms",)  # the memo's key of `forms`


def scratch(layer: Layer, sig: Signature) -> tuple[Graph, Layer]:
    """A graph of the layer alone rebuilt from its signature `sig`, and its layer."""
    _, _, (ins, outs), types = sig
    graph = Graph("scratch")
    for i, (shape, dtype, quant, const) in enumerate(types):
        data = np.broadcast_to(np.float32(0), shape) if const else None  # no bytes per element
        graph.add_tensor(Tensor(f"t{i}", shape, dtype, data, quant))
    one = Layer("scratch", layer.op, [f"t{i}" if i >= 0 else "" for i in ins],
                [f"t{i}" for i in outs], dict(layer.attrs))  # fmt: skip
    graph.add_layer(one)
    return graph, one


def once(
    ctx: LowerContext, layer: Layer, key: Hashable, work: Callable[[LowerContext, Layer], T]
) -> T:
    """`work` of the layer run on a `fresh` context of its `scratch` graph, once per compile for
    every layer of the same signature, L1 reservation and `key` (whatever else `work` reads:
    the arguments it closes over).

    NOTE: an NpuccError is not kept: `work` runs again on a fresh context of the layer itself,
    so that the error names it.
    """
    sig = layer_signature(ctx, layer)
    full = (sig, ctx.reserved, key)
    if full not in ctx.memo:
        graph, one = scratch(layer, sig)
        try:
            ctx.memo[full] = work(fresh(ctx, graph), one)
        except NpuccError:
            return work(fresh(ctx, ctx.graph), layer)
    result: T = ctx.memo[full]
    return result
