"""--debug-map: ONNX node -> layers -> tile operations per core -> stream lines, and back."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnx.helper as h
import pytest
from onnx import TensorProto as T
from onnx import numpy_helper as nh

import npucc
from npucc.codegen.debug_map import trace_line
from npucc.tools.cli import main


def _conv_relu_pool() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("Relu", ["c"], ["r"], name="relu"),
        h.make_node("Identity", ["r"], ["i"], name="same"),
        h.make_node("MaxPool", ["i"], ["y"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
    ]
    graph = h.make_graph(
        nodes, "crp", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 8, 8])], [w],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("map")
    model = folder / "crp.onnx"
    onnx.save(_conv_relu_pool(), model)
    program = npucc.compile(model, debug_map=folder / "crp.json")
    return program, json.loads((folder / "crp.json").read_text()), model


def test_a_fused_node_maps_both_onnx_nodes_to_one_layer(compiled):
    _, data, _ = compiled
    # conv and relu fuse into layer conv; the relu is then applied by the max pool
    assert data["nodes"]["conv"]["layers"] == data["nodes"]["relu"]["layers"] == ["conv", "pool"]
    assert data["layers"]["conv"]["sources"] == ["conv", "relu"]
    assert data["layers"]["conv"]["op"] == "conv2d"
    assert data["nodes"]["same"] == {"op": "Identity", "layers": [], "status": "folded"}
    assert data["nodes"]["pool"]["status"] == "lowered"


def test_a_stream_line_traces_back_to_its_onnx_node(compiled):
    program, data, _ = compiled
    lines = program.stream.splitlines()
    mmad = next(n for n, line in enumerate(lines, 1) if line.startswith("  CUBE mmad"))
    assert trace_line(data, mmad) == ("conv", ["conv", "relu"])
    # the fused relu is sunk onto the max pool (sink-pools): its line is the pool's, and the
    # pool's provenance takes the conv's nodes with it
    relu = next(n for n, line in enumerate(lines, 1) if "op=relu" in line)
    assert trace_line(data, relu) == ("pool", ["pool", "conv", "relu"])
    pool = next(n for n, line in enumerate(lines, 1) if "vreduce op=max" in line)
    assert trace_line(data, pool) == ("pool", ["pool", "conv", "relu"])
    assert trace_line(data, 1) is None  # the header
    # every line of a core block belongs to one layer; the runs cover exactly those lines
    body = {n for n, line in enumerate(lines, 1) if line.startswith("  ")}
    covered = {n for first, last, _ in data["lines"] for n in range(first, last + 1)}
    assert covered == body


def test_tile_operations_and_line_ranges_per_core(compiled):
    program, data, _ = compiled
    conv = data["layers"]["conv"]["cores"]["0,0"]
    assert conv["ops"]["MMAD"] >= 1 and conv["tile_ops"] == sum(conv["ops"].values())
    lines = program.stream.splitlines()
    for first, last in conv["lines"]:
        for n in range(first, last + 1):
            assert trace_line(data, n)[0] == "conv"
    assert sum(last - first + 1 for first, last in conv["lines"]) == conv["tile_ops"]
    assert len(lines) == program.stats["stream_lines"]


def test_the_map_leaves_the_stream_unchanged(compiled, tmp_path, capsys):
    program, _, model = compiled
    assert npucc.compile(model).stream == program.stream
    out = tmp_path / "maps" / "m.json"
    assert main([str(model), "-o", str(tmp_path / "m.cmd"), "--debug-map", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    assert json.loads(out.read_text())["version"] == 1
