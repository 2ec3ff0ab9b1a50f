"""The conformance harness: classification, isolation, the JSON report and operators.md."""

from __future__ import annotations

import argparse
import json

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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


def run_one(case: conf.Case, precision: str = "fp32") -> conf.Result:
    conf._CASES.clear()
    conf._CASES[case.name] = case
    return conf.run_case(case.name, precision)


def one_node_case(op: str, x: np.ndarray, want: np.ndarray, **attrs) -> conf.Case:
    """A float32 case of one node reading x, with its expected output."""
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want.shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return conf.Case(f"t_{op.lower()}", op, model, [({"x": x}, [want])])


def qlinearconv_case() -> conf.Case:
    """QuantizeLinear -> QLinearConv (int8 weights, zero point 0) -> DequantizeLinear, float I/O
    (the QOperator form npucc's int8 path compiles); expected by onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    w = rng.integers(-60, 60, (4, 2, 3, 3)).astype(np.int8)
    consts = [
        numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
        numpy_helper.from_array(np.array(3, np.int8), "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
        numpy_helper.from_array(np.array(-5, np.int8), "yz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node(
            "QLinearConv",
            ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
            ["yq"],
            pads=[1, 1, 1, 1],
        ),  # fmt: skip
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        consts,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    later = onnx.ModelProto()
    later.CopyFrom(model)
    later.opset_import[0].version = 19  # the evaluator's Q/DQ start at 19 (the same semantics)
    (want,) = ReferenceEvaluator(later).run(None, {"x": x})
    return conf.Case("t_qlinearconv", "QLinearConv", model, [({"x": x}, [want])])


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
    assert set(report) == {"cases", "summary", "precisions"}
    assert set(report["summary"]) == set(conf.STATUSES)
    assert 10 <= len(report["cases"]) <= 80
    assert sum(report["summary"].values()) == len(report["cases"])
    assert all(set(c) == {"name", "op", "precision", "status", "message"} for c in report["cases"])
    assert report["summary"]["internal_error"] == 0
    assert report["summary"]["pass"] > 0
    assert "TOTAL" in capsys.readouterr().out
    text = doc.read_text()
    assert "| operator | opsets |" in text and "| Relu |" in text


def test_fp16_compares_with_the_fp16_tolerance():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(4, 6) + np.float32(2.0**-13)
    result = run_one(one_node_case("Relu", x, np.maximum(x, 0)), "fp16")
    assert (result.status, result.precision) == ("pass", "fp16")  # rounded to fp16: within
    far = np.maximum(x, 0) * np.float32(1.003)
    assert run_one(one_node_case("Relu", x, far), "fp32").status == "wrong"
    result = run_one(one_node_case("Relu", x, far), "fp16")
    assert result.status == "wrong" and "(fp16)" in result.message


def test_fp16_names_the_cases_its_data_cannot_represent():
    x = np.array([[10000, 10001, 10002, 10003]], np.float32)  # fp16 steps of 8 at 10000
    e = np.exp(x - x.max())
    assert run_one(one_node_case("Softmax", x, e / e.sum(), axis=1), "fp32").status == "pass"
    result = run_one(one_node_case("Softmax", x, e / e.sum(), axis=1), "fp16")
    assert result.status == "unsupported" and "ill-conditioned at fp16" in result.message
    big = np.full((2, 3), 300.0, np.float32)
    square = one_node_case("Mul", big, big * big)
    square.model.graph.node[0].input.append("x")
    result = run_one(square, "fp16")
    assert result.status == "unsupported" and "beyond fp16" in result.message


def test_int8_runs_a_quantized_case_exactly():
    case = qlinearconv_case()
    result = run_one(case, "int8")
    assert (result.status, result.message) == ("pass", "")
    assert run_one(qlinearconv_case(), "auto").status == "pass"  # auto: int8 for this model
    off = qlinearconv_case()
    ins, (want,) = off.data[0]
    step = np.float32(0.2)
    want.flat[7] += step  # one quantization step on one element
    result = run_one(off, "int8")
    assert result.status == "wrong" and "1 of 144 differ" in result.message
    assert conf._exact(np.array([1.0, np.nan]), np.array([1.0, np.nan])) == ""


def test_int8_runs_only_the_quantized_cases(monkeypatch):
    relu, qconv = relu_case(), qlinearconv_case()
    monkeypatch.setattr(conf, "all_cases", lambda: [relu_case(), qlinearconv_case()])
    assert [conf._int8_case(c) for c in (relu, qconv)] == [False, True]
    (result,) = conf.run_all("", jobs=1, precision="int8")
    assert (result.name, result.precision, result.status) == ("t_qlinearconv", "int8", "pass")
    monkeypatch.undo()
    (quantize,) = [c for c in conf._node_cases() if c.name == "test_quantizelinear"]
    result = run_one(quantize, "int8")  # uint8 output: no int8 form yet, a clean refusal
    assert result.status == "unsupported" and result.message.startswith("graph output")


def test_markdown_has_a_pass_column_per_further_precision():
    rows = [
        conf.Result("a", "Relu", "pass", "", "pass", 0.1, "fp32"),
        conf.Result("b", "QLinearConv", "unsupported", "no", "pass", 0.1, "fp32"),
        conf.Result("a", "Relu", "pass", "", "pass", 0.1, "fp16"),
        conf.Result("b", "QLinearConv", "wrong", "off", "pass", 0.1, "fp16"),
        conf.Result("b", "QLinearConv", "pass", "", "pass", 0.1, "int8"),
    ]
    text = conf.operators_markdown(rows)
    assert "--precision fp32,fp16,int8 --markdown" in text
    assert "| ort | fp16 pass | int8 pass | limitations |" in text
    assert "| Relu | " in text and "| 1 | 0 | 0 | 0 | 1 | 1 | n/a |" in text
    assert "| 0 | 1 | 0 | 0 | 1 | 0 (1 wrong) | 1 |" in text
    assert "Overall at fp16: 2 cases, pass 1, unsupported 0, wrong 1, internal_error 0." in text
    report = conf.report_json(rows)
    assert report["precisions"]["int8"] == {
        "pass": 1, "unsupported": 0, "wrong": 0, "internal_error": 0
    }  # fmt: skip


def test_the_precision_option_parses_a_list():
    assert conf._precisions("fp32,fp16") == ["fp32", "fp16"]
    for bad in ("fp8", "fp16,fp16", ""):
        try:
            conf._precisions(bad)
        except argparse.ArgumentTypeError:
            continue
        raise AssertionError(bad)
