"""`--precision`: fp32, fp16, int8 (a quantized model; a float one is refused), auto; `check`
at fp16."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from npucc.checking import quantize
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL_CNN = ROOT / "models" / "small_cnn.onnx"


def _qdq_model(path: Path) -> Path:
    """x -> QuantizeLinear -> DequantizeLinear -> Relu: a model in QDQ form."""
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        initializer=inits,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("npucc: error: ") and err.count("\n") == 1
    return err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--precision", "int8"],
         "node 'conv1' (Conv): int8 Conv needs a quantized input and constant quantized weights"),
        (["--precision", "fp16", "--target", "mesh8x8"],
         "target 'mesh8x8' does not support precision fp16 (supports: fp32, int8)"),
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
    ],
)  # fmt: skip
def test_an_unsupported_precision_is_one_line_exit_2(tmp_path, capsys, extra, message):
    assert message in _error([str(SMALL_CNN), "-o", str(tmp_path / "o.cmd"), *extra], capsys)
    assert not (tmp_path / "o.cmd").exists()


def test_auto_is_int8_for_a_qdq_model_and_the_targets_own_otherwise(tmp_path, capsys):
    qdq = _qdq_model(tmp_path / "qdq.onnx")
    out = tmp_path / "q.cmd"
    # auto is int8 here; a float Relu whose result no QuantizeLinear quantizes has no int8 form
    assert "(Relu): Relu has no int8 form" in _error(
        [str(qdq), "-o", str(out), "--precision", "auto"], capsys
    )
    assert main([str(qdq), "-o", str(out)]) == 0  # default: the target's fp32
    quantized = tmp_path / "small_cnn_q.onnx"
    onnx.save(quantize(onnx.load(str(SMALL_CNN))), str(quantized))
    assert main([str(quantized), "-o", str(out), "--precision", "auto"]) == 0
    assert '"dtype":"i8"' in out.read_text() and '"accumulator":"i32"' in out.read_text()
    texts = []
    for extra in ([], ["--precision", "auto"], ["--precision", "fp32"]):
        out = tmp_path / f"s{len(texts)}.cmd"
        assert main([str(SMALL_CNN), "-o", str(out), *extra]) == 0
        texts.append((out.read_text(), Path(f"{out}.bin").read_bytes()))
    assert texts[0] == texts[1] == texts[2]
    assert main([str(SMALL_CNN), "-o", str(tmp_path / "h.cmd"), "--precision", "fp16"]) == 0
    half = (tmp_path / "h.cmd").read_text()
    assert '"dtype":"f16"' in half and '"accumulator":"f32"' in half
    image = len(Path(f"{tmp_path / 'h.cmd'}.bin").read_bytes())  # fp16 weights (64-byte padded)
    assert len(texts[0][1]) / 2 <= image < 0.55 * len(texts[0][1])


def test_check_at_fp16_prints_both_errors_and_the_tolerance(capsys):
    assert main(["check", str(SMALL_CNN), "--precision", "fp16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(ln for ln in lines if "vs float32 onnxruntime" in ln)
    assert "tolerance" in first and first.endswith("PASS")
    second = next(ln for ln in lines if "vs fp16 onnxruntime (onnxconverter-common)" in ln)
    assert float(second.split("relative ")[1]) < 1e-2
    assert lines[-1] == "PASS"


def test_a_target_whose_own_dtype_is_int8_compiles_int8_by_default(tmp_path, capsys):
    text = (ROOT / "npucc" / "target" / "presets" / "davinci-core.toml").read_text()
    target = tmp_path / "t.toml"
    target.write_text(text.replace('dtype = "f32"', 'dtype = "i8"'))
    argv = [str(SMALL_CNN), "-o", str(tmp_path / "o.cmd"), "--target", str(target)]
    assert "i8 data into a i8 accumulator is not compiled" in _error(argv, capsys)
    target.write_text(text.replace('dtype = "f32"', 'dtype = "i8"\naccumulator = "i32"'))
    assert "int8 Conv needs a quantized input" in _error(argv, capsys)
    quantized = tmp_path / "small_cnn_q.onnx"
    onnx.save(quantize(onnx.load(str(SMALL_CNN))), str(quantized))
    assert main(["check", str(quantized), "--target", str(target)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS"
