"""int8 end to end: small_cnn quantized by onnxruntime (`npucc.checking.quantize`, QDQ form) and
a small CNN in QOperator form compile to integer programs that equal onnxruntime's run of the
quantized model."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.checking import quantize
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_cnn_int8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("int8") / "small_cnn_qdq.onnx"
    onnx.save(quantize(onnx.load(str(ROOT / "models" / "small_cnn.onnx")), seed=0), str(path))
    return path


@pytest.mark.parametrize("target", ["davinci-core", "mesh8x8"])
def test_quantized_small_cnn_checks_equal_to_onnxruntime(small_cnn_int8, target, capsys):
    argv = ["check", str(small_cnn_int8), "--precision", "int8", "--target", target]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    verdict = next(ln for ln in lines if "vs onnxruntime (the same quantized model)" in ln)
    assert verdict.startswith("probs: ") and " 10/10 equal (1.000000), max 0 steps of " in verdict
    assert verdict.endswith(" PASS") and lines[-1] == "PASS"


def test_the_stream_declares_int8_tensors_and_int8_cube_work(small_cnn_int8, tmp_path):
    out = tmp_path / "q.cmd"
    assert main([str(small_cnn_int8), "-o", str(out), "--precision", "int8"]) == 0
    text = out.read_text()
    assert '"dtype":"i8"' in text and '"accumulator":"i32"' in text
    tensors = [ln for ln in text.splitlines() if ln.startswith("tensor ")]
    assert re.search(r'^tensor input "input" DDR\[\S+\+3072\] f32\[1,3,32,32\] quant=\S+,\S+$',
                     "\n".join(tensors), re.M)  # fmt: skip
    inner = [ln for ln in tensors if " input " not in ln and " output " not in ln]
    assert inner and all(" i8[" in ln for ln in inner)
    assert "CUBE mmad" in text and "VECTOR requant" in text and "VECTOR vsoftmax" in text
    mmad = r"CUBE mmad dst=L0C\[\S+\+(\d+)\] a=L0A\[\S+\+(\d+)\] \S+ m=(\d+) n=(\d+) k=(\d+)"
    l0c = re.search(mmad, text)
    assert l0c is not None
    c_bytes, a_bytes, m, n, k = map(int, l0c.groups())
    assert (c_bytes, a_bytes) == (4 * m * n, m * k)  # int32 accumulators of int8 products


def _model(
    name: str,
    seed: int,
    consts: list[tuple[str, tuple[int, ...], float]],
    nodes: list[onnx.NodeProto],
    x: list[int],
    y: list[int],
) -> onnx.ModelProto:
    """An opset-13 model of `nodes` from input "x" to output "y", its `consts` (name, shape,
    std) drawn in order from a normal distribution seeded by `seed`."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal(shape) * std).astype(np.float32), c)
        for c, shape, std in consts
    ]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        initializer=inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _cnn() -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Conv (stride 2) -> Relu, random weights: a model whose
    QOperator form is standard ONNX (QLinearConv, MaxPool on int8)."""
    consts = [("w1", (8, 3, 3, 3), 0.3), ("b1", (8,), 0.1),
              ("w2", (16, 8, 3, 3), 0.15), ("b2", (16,), 0.1)]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    return _model("cnn", 0, consts, nodes, [1, 3, 32, 32], [1, 16, 8, 8])


def test_a_qoperator_model_checks_equal_to_onnxruntime(tmp_path, capsys):
    model = quantize(_cnn(), seed=0, qoperator=True)
    ops = {n.op_type for n in model.graph.node}
    assert ops == {"QuantizeLinear", "QLinearConv", "MaxPool", "DequantizeLinear"}
    path = tmp_path / "cnn_qop.onnx"
    onnx.save(model, str(path))
    assert main(["check", str(path), "--precision", "int8"]) == 0
    verdict = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("y: "))
    assert " 1024/1024 equal (1.000000), max 0 steps of " in verdict and verdict.endswith("PASS")


def _residual_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Add(input) -> Relu, random weights: the int8 residual add fuses
    into the second conv's epilogue (fuse-residual's res_q)."""
    shapes = (("w1", (8, 8, 3, 3)), ("b1", (8,)), ("w2", (8, 8, 1, 1)), ("b2", (8,)))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
        helper.make_node("Add", ["x", "c2"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    consts = [(n, s, 0.3) for n, s in shapes]
    return _model("res", 1, consts, nodes, [1, 8, 16, 16], [1, 8, 16, 16])


@pytest.mark.parametrize("target", ["davinci-core", "mesh8x8"])
def test_a_fused_int8_residual_add_checks_equal_to_onnxruntime(tmp_path, capsys, target):
    path = tmp_path / "res_qdq.onnx"
    onnx.save(quantize(_residual_cnn(), seed=0), str(path))
    assert main([str(path), "--precision", "int8", "--emit", "graph"]) == 0
    graph = capsys.readouterr().out
    assert "res_q = " in graph and " add(" not in graph
    assert main(["check", str(path), "--precision", "int8", "--target", target]) == 0
    verdict = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("y: "))
    assert " 2048/2048 equal (1.000000), max 0 steps of " in verdict and verdict.endswith("PASS")


def _depthwise_cnn() -> onnx.ModelProto:
    """Conv 1x1 (8 -> 64) -> Relu -> depthwise 3x3 (64 groups) -> Relu, random weights: the
    int8 depthwise conv runs on the cube as 4 dense groups of 16 channels."""
    shapes = (("w1", (64, 8, 1, 1)), ("b1", (64,)), ("w2", (64, 1, 3, 3)), ("b2", (64,)))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=64),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    consts = [(n, s, 0.3) for n, s in shapes]
    return _model("dw", 2, consts, nodes, [1, 8, 8, 8], [1, 64, 8, 8])


def test_an_int8_depthwise_conv_stages_its_groups_with_few_dmas(tmp_path, capsys):
    """The dense groups load their weights and requant records in one DMA each per run of
    groups (conv._lower_grouped: 2 runs of 2 groups; the input is resident in L1), not per
    group (8 loads), and the program still equals onnxruntime element for element."""
    import npucc

    path = tmp_path / "dw_qdq.onnx"
    onnx.save(quantize(_depthwise_cnn(), seed=0), str(path))
    tiled = npucc.compile_until(path, "lower-tiles", precision="int8")
    (index,) = [i for i, w in enumerate(tiled.layers) if w.macs == 64 * 64 * 9]  # the model's
    loads = [n for n in tiled.cores[0].graph.nodes if n.layer == index and n.op == "COPY_IN"]
    assert len(loads) == 4
    assert main(["check", str(path), "--precision", "int8"]) == 0
    verdict = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("y: "))
    assert " 4096/4096 equal (1.000000), max 0 steps of " in verdict and verdict.endswith("PASS")
