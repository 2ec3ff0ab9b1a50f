"""Batch-1 models made batch-symbolic, so that `--batch N` (CompileOptions.batch) applies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import onnx
from onnx import numpy_helper

import npucc
from npucc.compiler import batch_input_shapes, pipeline
from npucc.ir.plan import MeshPlan, PlannedGraph
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target


def symbolic_batch(model: onnx.ModelProto, name: str = "batch") -> onnx.ModelProto:
    """A copy of a batch-1 model whose inputs and outputs lead with the symbolic dimension
    `name`; a Reshape's constant target shape leading with 1 copies its input's leading
    dimension instead (0), so the batch flows through (as exporters write it)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inits = {i.name: i for i in graph.initializer}
    for value in (*graph.input, *graph.output):
        if value.name in inits:
            continue
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].Clear()
            dims[0].dim_param = name
    del graph.value_info[:]
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[1] not in inits:
            continue
        shape = numpy_helper.to_array(inits[node.input[1]]).copy()
        if shape.size and shape[0] == 1:
            shape[0] = 0
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
    return out


def compile_with_plan(
    model: onnx.ModelProto,
    target: str,
    batch: int,
    edit: Callable[[MeshPlan], MeshPlan],
    beam_width: int = 8,
) -> tuple[npucc.Program, PlannedGraph]:
    """Compile `model` at `batch` on `target` with its HyperCut plan changed by `edit` (the
    passes after `hypercut` lower what the changed plan says); the program and its plan."""
    options = CompileOptions(target=target, beam_width=beam_width)
    shapes = batch_input_shapes(model, None, batch)
    passes = pipeline(replace(options, input_shapes=shapes))
    split = [p.name for p in passes].index("hypercut") + 1
    ctx = CompileContext(load_target(target))
    planned = PassManager(passes[:split]).run(model, ctx)
    planned = PlannedGraph(planned.graph, edit(planned.plan))
    generated = PassManager(passes[split:]).run(planned, ctx)
    program = npucc.Program(
        generated.stream,
        generated.image,
        ctx.target,
        generated.inputs,
        generated.outputs,
        ctx.stats,
    )
    return program, planned


def split_every_step(nsub: int, loop: bool = False) -> Callable[[MeshPlan], MeshPlan]:
    """A plan edit: every step split in `nsub` sub-batches (with `loop`, all in one loop)."""

    def edit(plan: MeshPlan) -> MeshPlan:
        steps = tuple(
            replace(step, nsub=nsub, loop=loop and s > 0) for s, step in enumerate(plan.steps)
        )
        return replace(plan, steps=steps)

    return edit
