"""Batch-1 models made batch-symbolic, so that `--batch N` (CompileOptions.batch) applies."""

from __future__ import annotations

import onnx
from onnx import numpy_helper


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
