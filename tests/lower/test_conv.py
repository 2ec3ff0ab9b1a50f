"""Conv lowering on a mesh: the images of a batch share each stationary weight block."""

from __future__ import annotations

import numpy as np
from mesh_target import MESH2X2
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime


def _conv_model():
    """x [batch, 32, 16, 16] -> 3x3 conv of 32 channels (37 KB of weights, they fit L1)."""
    w = np.random.default_rng(0).standard_normal((32, 32, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32, 16, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _weight_elems(program) -> int:
    """Elements of `w` all cores load from DDR."""
    return sum(
        int(np.prod(n.instr.dims))
        for core in program.cores
        for n in core.graph.nodes
        if n.op == "COPY_IN" and getattr(n.instr.src, "key", "") == "w"
    )


def test_the_images_of_a_batch_share_the_weight_loads_on_a_mesh():
    model = _conv_model()
    tiled = npucc.compile_until(model, "lower-tiles", MESH2X2, batch=4, beam_width=4)
    assert _weight_elems(tiled) < 4 * 32 * 32 * 9  # fewer than once per image
    program = npucc.compile(model, MESH2X2, batch=4, beam_width=4)
    inputs = random_inputs(program.inputs, 0)
    result = program.execute(inputs)
    for c in compare(result.outputs, run_onnxruntime(model, inputs)):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
    assert result.makespan == program.stats["predicted_makespan"]
