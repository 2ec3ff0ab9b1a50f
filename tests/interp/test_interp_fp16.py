"""The fp16 datapath, bit-accurately: fp16 storage, fp32 accumulation in L0C, explicit rounding."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.interp import run_stream
from npucc.ir.instr_text import match_ref
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream

F16, F32 = np.float16, np.float32


def _model(op: str, x_shape: list[int], y_shape: list[int], inits=(), **attrs) -> onnx.ModelProto:
    inputs = ["x", *(i.name for i in inits)]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        initializer=list(inits),
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, x: np.ndarray, precision: str = "fp16") -> np.ndarray:
    program = npucc.compile(model, precision=precision)
    result = program.execute({"x": x})
    assert result.makespan == program.stats["predicted_makespan"]
    return result.outputs["y"]


def test_matmul_multiplies_fp16_accumulates_fp32_and_rounds_once_into_ub():
    """Integer operands: every product and fp32 sum is exact, so the one rounding is L0C -> UB
    (fp32 -> fp16, ties to even); K = 48 spans three k0 = 16 steps accumulated in L0C."""
    rng = np.random.default_rng(0)
    x = rng.integers(-16, 17, (8, 48)).astype(F32)
    w = rng.integers(-64, 65, (48, 40)).astype(F32)
    model = _model("MatMul", [8, 48], [8, 40], [numpy_helper.from_array(w, "w")])
    exact = x.astype(np.float64) @ w.astype(np.float64)
    assert np.abs(exact).max() > 2048  # beyond 2**11 fp16 rounds integers: the test can fail
    got = _run(model, x)
    assert got.dtype == F32
    np.testing.assert_array_equal(got, exact.astype(F16).astype(F32))
    assert not np.array_equal(got, exact.astype(F32))
    np.testing.assert_array_equal(_run(model, x, "fp32"), exact.astype(F32))


def test_inputs_round_to_fp16_at_the_io_boundary_and_outputs_widen_exactly():
    x = np.random.default_rng(1).standard_normal((4, 96)).astype(F32) * 3
    x[0, :3] = (1 / 3, 70000.0, -1e-8)  # inexact, beyond fp16's range, subnormal-rounded
    got = _run(_model("Relu", [4, 96], [4, 96]), x)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, np.maximum(x.astype(F16), 0).astype(F32))
    assert got[0, 1] == np.inf


def test_a_reduction_accumulates_in_fp32_and_rounds_its_result_once():
    """3000 terms of 1 + 2**-10: an fp16 running sum would stall far below 3002.93; the fp32
    accumulation rounds once, to 3002 (fp16's spacing is 2 there)."""
    x = np.full((2, 3000), 1 + 2**-10, F32)
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    got = _run(_model("ReduceSum", [2, 3000], [2, 1], [axes], keepdims=1), x)
    exact = 3000 * (1 + 2**-10)
    np.testing.assert_array_equal(got, np.full((2, 1), F16(exact), F32))
    assert got[0, 0] == 3002.0


def test_the_stream_declares_element_types_and_per_tier_bytes():
    w = np.ones((48, 40), F32)
    model = _model("MatMul", [8, 48], [8, 40], [numpy_helper.from_array(w, "w")])
    program = npucc.compile(model, precision="fp16")
    stream = parse_stream(program.stream, "t.cmd")
    assert stream.target.dtype == "f16" and stream.target.cube.k0 == 16
    types = {t.name: (t.dtype, t.nbytes) for t in stream.tensors.values()}
    assert types["w"] == ("f16", 48 * 40 * 2)
    assert types["x"] == ("f32", 8 * 48 * 2)  # the model's type, held as fp16 in DDR
    assert types["y"] == ("f32", 8 * 40 * 2)
    assert len(program.image) >= 48 * 40 * 2 and len(program.image) < 48 * 40 * 4
    mmads = [ln for ln in program.stream.splitlines() if ln.strip().startswith("CUBE mmad")]
    assert mmads
    for line in mmads:
        fields = dict(tok.split("=", 1) for tok in line.split("|")[0].split()[2:])
        m, n, k = int(fields["m"]), int(fields["n"]), int(fields["k"])
        assert [match_ref(fields[o])[2] for o in ("dst", "a", "b")] == [m * n * 4, m * k * 2,
                                                                         k * n * 2]  # fmt: skip


def test_liveness_checks_the_byte_addresses_of_four_byte_accumulators():
    """An L0C alloc halved: the mmad writing its fp32 accumulators runs past it, and the check
    names the first byte address outside (a 2-byte checking unit: the fp16 stream's)."""
    w = np.ones((48, 40), F32)
    model = _model("MatMul", [8, 48], [8, 40], [numpy_helper.from_array(w, "w")])
    program = npucc.compile(model, precision="fp16")
    text = program.stream
    found = re.search(r"alloc L0C\[0x([0-9a-f]+)\+(\d+)\] b=(\d+)", text)
    assert found is not None
    addr, size, buf = int(found.group(1), 16), int(found.group(2)), found.group(3)
    old = f"L0C[0x{addr:06x}+{size}] b={buf}"
    assert text.count(old) == 2  # its alloc and its free
    bad = text.replace(old, f"L0C[0x{addr:06x}+{size // 2}] b={buf}")
    stream = parse_stream(bad, "t.cmd")
    outside = rf"L0C\[0x{addr + size // 2:06x}\] by CUBE: region not live"
    with pytest.raises(StreamError, match=outside):
        run_stream(stream, program.image, {"x": np.ones((8, 48), F32)})
