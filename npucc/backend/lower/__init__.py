"""Lowering: graph IR -> tiled IR (one TileGraph per core), one module per op family."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.backend.lower import conv, eltwise, layout, matmul, pool, reduce  # noqa: F401  (register)
from npucc.backend.lower.builder import TileBuilder
from npucc.backend.lower.common import LOWERINGS, LowerContext
from npucc.backend.lower.program import Core, IoBinding, TiledProgram
from npucc.errors import NpuccError
from npucc.ir.graph import Graph
from npucc.ir.tiled import TileGraph
from npucc.passes import CompileContext, Pass, register

VIEW_OPS = ("reshape",)  # ops that only reinterpret a contiguous DDR tensor


def lower_graph(graph: Graph, ctx: CompileContext) -> TiledProgram:
    """Lower every layer of `graph` onto core (0, 0), layer after layer through DDR."""
    target = ctx.target
    program = TiledProgram(graph.name, target)
    tiles = TileGraph("core0_0")
    builder = TileBuilder(tiles, target)
    lctx = LowerContext(graph, program, builder, target)
    for name in graph.inputs:
        program.add_tensor(name, "input", graph.tensors[name].shape)
        program.io.append(IoBinding("input", name, name, graph.tensors[name].shape))
    for layer in graph.layers:
        if layer.op in VIEW_OPS:
            src = layer.inputs[0]
            lctx.ddr(src)
            program.add_alias(layer.outputs[0], src)
            continue
        lower = LOWERINGS.get(layer.op)
        if lower is None:
            raise NpuccError(f"no lowering for operator {layer.op} (node '{layer.name}')")
        for out in layer.outputs:
            program.add_tensor(out, "temp", graph.tensors[out].shape)
        lower(lctx, layer)
        for out in layer.outputs:
            builder.close_ddr(out)
    for name in graph.outputs:
        lctx.ddr(name)
        program.io.append(IoBinding("output", name, program.key(name), graph.tensors[name].shape))
    if builder.open_buffers():
        raise AssertionError(f"lowering left buffers open: {builder.open_buffers()[:5]}")
    program.cores.append(Core(0, 0, tiles))
    return program


@register
@dataclass
class LowerTiles(Pass):
    """Split each layer into tile operations on one core (`lower-tiles`)."""

    name = "lower-tiles"

    def run(self, ir: Graph, ctx: CompileContext) -> TiledProgram:
        program = lower_graph(ir, ctx)
        ctx.stats["tile_ops"] = sum(len(c.graph) for c in program.cores)
        return program
