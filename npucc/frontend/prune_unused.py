"""prune-unused: remove layers and constants whose values are never read."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.frontend.common import remove_layer_and_outputs
from npucc.ir.graph import Graph
from npucc.passes import CompileContext, GraphPass


@dataclass(frozen=True, slots=True)
class PruneUnused(GraphPass):
    """Drop dead layers (no output read, none a graph output) and unread constants."""

    name = "prune-unused"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """One backward sweep over the layers, then the constants."""
        live = set(ir.outputs)
        removed = 0
        for layer in reversed(list(ir.layers)):
            if any(t in live for t in layer.outputs):
                live.update(layer.inputs)
            else:
                remove_layer_and_outputs(ir, layer)
                removed += 1
        dead = [n for n, t in ir.tensors.items() if t.data is not None and n not in live]
        for name in dead:
            del ir.tensors[name]
        ctx.stats["prune-unused.layers"] = removed
        ctx.stats["prune-unused.constants"] = len(dead)
        return ir
