"""The roofline and the per-layer table against models, the interpreter and the ONNX graph."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.backend.schedule.perf_table import to_csv
from npucc.backend.schedule.roofline import at_makespan
from npucc.checking import random_inputs
from npucc.frontend.onnx_import import load_model
from npucc.ir.tiled_parse import tiled_from_text
from npucc.target import load_target
from npucc.target.cost import cube_bound, ddr_bound, noc_bound, vector_bound

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("small_cnn", "residual_block", "lrn_concat", "decoder_block", "transformer_encoder")


def onnx_macs(model: onnx.ModelProto) -> int:
    """MACs of the Conv, Gemm and MatMul nodes, from ONNX shape inference alone."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*g.input, *g.value_info, *g.output)}  # fmt: skip
    shapes.update({i.name: list(i.dims) for i in g.initializer})
    total = 0
    for node in g.node:
        out = math.prod(shapes[node.output[0]])
        if node.op_type == "Conv":
            total += out * math.prod(shapes[node.input[1]][1:])
        elif node.op_type == "Gemm":
            trans_a = any(a.name == "transA" and a.i for a in node.attribute)
            a = shapes[node.input[0]]
            total += out * (a[0] if trans_a else a[1])
        elif node.op_type == "MatMul":
            total += out * shapes[node.input[0]][-1]
    return total


def depthwise_model(channels: int = 32) -> onnx.ModelProto:
    """A 3x3 depthwise conv (group = channels) then a 1x1 conv: the MobileNet pattern."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, channels, 1, 1)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["d"], group=channels, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "dw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])],
        [w1, w2],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _models() -> list[tuple[str, onnx.ModelProto]]:
    out = [(n, load_model(ROOT / "models" / f"{n}.onnx")) for n in MODELS]
    return [*out, ("mlp", load_model(ROOT / "models" / "mlp.onnx", {"x": (2, 64)})),
            ("depthwise", depthwise_model())]  # fmt: skip


@pytest.fixture(scope="module", params=_models(), ids=lambda m: m[0])
def compiled(request):
    """A model, its program and a timing-only run of it."""
    _, model = request.param
    program = npucc.compile(model)
    result = program.execute(random_inputs(program.inputs, 0), timing_only=True)
    return model, program, result


def test_layer_macs_sum_to_the_onnx_graphs_macs(compiled):
    model, program, _ = compiled
    csv_text = to_csv(program.stats["layers"])
    header, *lines = csv_text.splitlines()
    column = header.split(",").index("macs")
    total = sum(int(line.split(",")[column]) for line in lines)
    assert total == onnx_macs(model) == program.stats["roofline"]["macs"]
    assert total > 0


def test_bound_is_below_the_makespan_and_matches_the_interpreter(compiled):
    _, program, result = compiled
    line = program.stats["roofline"]
    assert 0 < line["bound"] <= line["makespan"] == result.makespan
    assert 0 < line["efficiency"] <= 1
    assert line["bound"] == max(line["compute"], line["memory"])
    assert line["pipe"] <= result.makespan
    # predicted DDR traffic and busy cycles are the interpreter's
    moved = sum(n for path, n in result.counters["bytes"].items() if "DDR" in path)
    assert line["ddr_bytes"] == moved >= line["min_ddr_bytes"]
    assert line["busy"] == {p: c for p, c in result.pipe_cycles.items() if c}
    assert at_makespan(line, 2 * result.makespan).efficiency == pytest.approx(
        line["efficiency"] / 2
    )


def test_layer_rows_cover_the_schedule(compiled):
    _, program, _ = compiled
    rows = program.stats["layers"]
    makespan = program.stats["roofline"]["makespan"]
    assert max(r["finish"] for r in rows) == makespan
    for r in rows:
        assert 0 <= r["start"] <= r["finish"] <= makespan
        assert r["cycles"] == r["finish"] - r["start"]
        assert 0 <= r["cube_util"] <= 1
        if r["cube_cycles"]:
            assert r["macs"] > 0
        elif r["macs"]:  # a depthwise conv multiplies on the vector pipe
            assert r["op"] == "conv2d" and r["busiest_pipe"] == "VECTOR"
    read = sum(r["ddr_read"] for r in rows)
    write = sum(r["ddr_write"] for r in rows)
    assert read + write == program.stats["roofline"]["ddr_bytes"]


def test_depthwise_counts_its_own_macs_not_the_cubes():
    program = npucc.compile(depthwise_model(32))
    depthwise = program.stats["layers"][0]
    assert depthwise["op"] == "conv2d"
    assert depthwise["macs"] == 32 * 16 * 16 * 9  # not 16x that (the block-diagonal form)
    line = program.stats["roofline"]
    assert line["cube"] == math.ceil(line["macs"] / 2048)
    # the weights count once, as the model has them (32 x 9 + 16 x 32), not 16x the diagonal
    assert line["min_ddr_bytes"] == 4 * (32 * 9 + 16 * 32 + 32 * 16 * 16 + 16 * 16 * 16)


def test_tiled_text_keeps_the_layers():
    tiled = npucc.compile_until(ROOT / "models" / "small_cnn.onnx", "lower-tiles")
    text = tiled.to_text()
    assert 'layer 0 "conv1" conv2d macs=221184' in text
    back = tiled_from_text(text)
    assert back.layers == tiled.layers
    assert [n.layer for n in back.cores[0].graph.nodes] == [
        n.layer for n in tiled.cores[0].graph.nodes
    ]
    assert all(n.layer >= 0 for n in tiled.cores[0].graph.nodes)
    with pytest.raises(npucc.NpuccError, match="unknown layer"):
        tiled_from_text(text.replace(" layer=0 ", " layer=99 ", 1))


def test_bounds_use_every_core_and_the_shared_ddr_channel():
    one, mesh = load_target("davinci-core"), load_target("mesh8x8")
    assert cube_bound(one, 2048 * 10) == 10
    assert cube_bound(mesh, mesh.cube.macs * mesh.cores * 3) == 3
    assert vector_bound(one, one.vector.width * 5 + 1) == 6
    # one core reads and writes on two pipes at once; a mesh shares one DDR channel
    assert ddr_bound(one, 640, 640) == 10
    assert ddr_bound(mesh, 640, 640) == 1280 // mesh.mesh.ddr_bandwidth
    # every core's NoC links, reads and writes on two pipes; nothing on one core
    rate = mesh.mesh.noc_bandwidth * mesh.cores
    assert noc_bound(mesh, 3 * rate, rate + 1) == 3
    assert noc_bound(one, 10**6, 10**6) == 0


def test_mesh_program_stays_above_its_bound():
    program = npucc.compile(ROOT / "models" / "small_cnn.onnx", "mesh8x8")
    result = program.execute(random_inputs(program.inputs, 0), timing_only=True)
    line = program.stats["roofline"]
    assert line["makespan"] == result.makespan
    assert 0 < line["bound"] <= result.makespan
    assert line["compute"] == max(line["cube"], line["vector"])
    # its NoC floor is its own on-chip handoffs' bytes over every core's links
    assert line["noc_bytes"] > 0
    assert 0 < line["noc"] <= math.ceil(line["noc_bytes"] / (8 * 8 * 24))
    assert line["bound"] == max(line["compute"], line["memory"], line["noc"])
    assert f"at makespan {result.makespan}" in at_makespan(line, result.makespan).summary()
