"""int8 end to end: small_cnn quantized by onnxruntime (`npucc.checking.quantize`) compiles to
an integer program that equals onnxruntime's run of the quantized model."""

from __future__ import annotations

import re
from pathlib import Path

import onnx
import pytest

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
