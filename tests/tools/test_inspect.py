"""`npucc inspect` and `npucc ops`: a model's I/O and operator support before compiling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.frontend.op_support import FOLDS, LOWERS, REFUSES, all_operators, op_support
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL_CNN = str(ROOT / "models" / "small_cnn.onnx")


def _inspect(capsys, *argv: str) -> dict:
    assert main(["inspect", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_small_cnn(capsys):
    info = _inspect(capsys, SMALL_CNN)
    assert info["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 32, 32]}]
    assert info["outputs"] == [{"name": "probs", "dtype": "float32", "shape": [1, 10]}]
    assert info["opsets"] == {"ai.onnx": 13}
    model = onnx.load(SMALL_CNN)
    weights = sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer)
    assert info["weights"]["bytes"] == weights > 0
    assert info["macs"] == _macs(model) > 0
    ops = {row["op"]: row for row in info["operators"]}
    assert ops["Conv"]["count"] == 2 and ops["Conv"]["status"] == {LOWERS: 2}
    assert ops["Conv"]["limits"] == op_support("Conv").limits
    assert sum(r["count"] for r in info["operators"]) == len(model.graph.node)
    assert main(["inspect", SMALL_CNN]) == 0
    text = capsys.readouterr().out
    assert "input  float32[1,3,32,32]" in text and "MACs: 297,472 per inference" in text


def _macs(model: onnx.ModelProto) -> int:
    """Conv and Gemm MACs from ONNX's own shape inference: out elements x reduction size."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*inferred.value_info, *inferred.output)}  # fmt: skip
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    total = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            w = weights[node.input[1]]
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            k = math.prod(w[1:]) if node.op_type == "Conv" else w[1] if trans_b else w[0]
            total += math.prod(shapes[node.output[0]]) * k
    return total


def _write(tmp_path: Path, nodes, inputs, outputs, inits=(), domains=()) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", 17), *(helper.make_opsetid(d, 1) for d in domains)]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return str(path)


def test_inspect_says_what_is_refused_folded_and_symbolic(tmp_path, capsys):
    shape = np.asarray([2, 2], np.int64)
    path = _write(
        tmp_path,
        [
            helper.make_node("Det", ["x2"], ["d"], name="det"),
            helper.make_node("Reshape", ["x", "shape"], ["x2"], name="reshape"),
            helper.make_node("Range", ["zero", "n", "one"], ["r"], name="range"),
            helper.make_node("Relu", ["x"], ["y"], name="relu"),
            helper.make_node("Custom", ["x"], ["c"], name="cust", domain="com.acme"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("d", "y", "c", "r")],
        [numpy_helper.from_array(shape, "shape")]
        + [numpy_helper.from_array(np.float32(v), n) for n, v in (("zero", 0), ("n", 3))]
        + [numpy_helper.from_array(np.float32(1), "one")],
        domains=["com.acme"],
    )
    info = _inspect(capsys, path)
    assert info["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["N", 4]}]
    assert info["symbolic_set_to_1"] == ["x"]
    ops = {row["op"]: row for row in info["operators"]}
    assert ops["Relu"]["status"] == {LOWERS: 1}
    assert ops["Range"]["status"] == {FOLDS: 1}  # constant inputs: folded at compile time
    assert ops["Det"]["status"] == {REFUSES: 1}
    assert "only folds Det" in ops["Det"]["reasons"][0] and "'x2'" in ops["Det"]["reasons"][0]
    assert ops["Custom"]["domain"] == "com.acme" and ops["Custom"]["status"] == {REFUSES: 1}
    assert "com.acme" in ops["Custom"]["reasons"][0]
    assert info["macs"] is None and "unsupported operator" in info["compile_error"]


def test_inspect_of_a_non_model_is_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.onnx"
    bad.write_bytes(b"\xa1\xff not a model")
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected an ONNX protobuf file" in err and str(bad) in err


def test_ops_is_the_table_operators_md_is_made_from(capsys):
    """docs/operators.md's opsets and limitations columns are `npucc ops`'s, row by row."""
    assert main(["ops", "--json"]) == 0
    rows = {r["op"]: r for r in json.loads(capsys.readouterr().out)}
    assert [r.op for r in all_operators()] == list(rows)
    seen = 0
    for line in (ROOT / "docs" / "operators.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("operator", "model"):
            continue
        seen += 1
        assert (rows[cells[0]]["opsets"], rows[cells[0]]["limits"]) == (cells[1], cells[-1])
    assert seen > 150
    assert rows["Conv"]["status"] == LOWERS and rows["Det"]["status"] == FOLDS
    assert main(["ops", "--supported"]) == 0
    text = capsys.readouterr().out
    assert "\nConv " in text and "constant weights" in text and "not supported" not in text


@pytest.mark.parametrize(
    ("op", "status"), [("Softmax", LOWERS), ("Range", FOLDS), ("Loop", LOWERS)]
)
def test_op_support(op, status):
    assert op_support(op).status == status
