"""The conformance harness: classification, isolation, the JSON report and operators.md."""

from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from npucc.errors import NpuccError
from npucc.tools import conformance as conf


def relu_case(name: str = "t_relu") -> conf.Case:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    return conf.Case(name, "Relu", model, [({"x": x}, [np.maximum(x, 0)])])


def run_one(case: conf.Case) -> conf.Result:
    conf._CASES.clear()
    conf._CASES[case.name] = case
    return conf.run_case(case.name)


def test_pass_wrong_unsupported_internal(monkeypatch):
    assert run_one(relu_case()).status == "pass"
    wrong = relu_case()
    wrong.data[0][1][0] += 1
    assert run_one(wrong).status == "wrong"
    import npucc

    def refuse(*args, **kwargs):
        raise NpuccError("unsupported operator Foo")

    monkeypatch.setattr(npucc, "compile", refuse)
    result = run_one(relu_case())
    assert (result.status, result.message) == ("unsupported", "unsupported operator Foo")

    def crash(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(npucc, "compile", crash)
    result = run_one(relu_case())
    assert result.status == "internal_error" and "KeyError" in result.message
    assert result.ort == "pass"


def test_shape_inputs_are_frozen():
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    case = conf.Case(
        "t_reshape", "Reshape", model, [({"x": x, "s": np.array([3, 2])}, [x.reshape(3, 2)])]
    )
    assert run_one(case).status == "pass"


def test_close():
    assert conf._close(np.array([1.0, np.nan]), np.array([1.0005, np.nan])) == ""
    assert "shape" in conf._close(np.zeros(2), np.zeros(3))
    assert "max |error|" in conf._close(np.array([1.0]), np.array([2.0]))
    bf16 = np.array([0.5, np.nan], ml_dtypes.bfloat16)  # a float type numpy calls kind "V"
    assert conf._close(bf16, bf16) == ""


def test_sample_run_json_and_markdown(tmp_path, capsys):
    out, doc = tmp_path / "r.json", tmp_path / "operators.md"
    args = argparse.Namespace(k="test_[st]*_example*", json=str(out), markdown=str(doc), jobs=2)
    assert conf.main(args) == 0
    report = json.loads(out.read_text())
    assert set(report) == {"cases", "summary"}
    assert set(report["summary"]) == set(conf.STATUSES)
    assert 10 <= len(report["cases"]) <= 80
    assert sum(report["summary"].values()) == len(report["cases"])
    assert all(set(c) == {"name", "op", "status", "message"} for c in report["cases"])
    assert report["summary"]["internal_error"] == 0
    assert report["summary"]["pass"] > 0
    assert "TOTAL" in capsys.readouterr().out
    text = doc.read_text()
    assert "| operator | opsets |" in text and "| Relu |" in text
