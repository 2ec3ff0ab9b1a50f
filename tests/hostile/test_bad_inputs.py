"""A corpus of broken and hostile inputs, generated here, run through the real CLI."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from hostile_util import MODELS, assert_clean_error, model, npucc, target
from onnx import helper, numpy_helper

SMALL_CNN = MODELS / "small_cnn.onnx"
Case = Callable[[Path], tuple[list[str | Path], tuple[str, ...]]]


def _save(m: onnx.ModelProto, path: Path) -> Path:
    onnx.save(m, str(path))
    return path


def _relu(name: str = "x", shape: list[int | str] | None = None) -> onnx.ModelProto:
    return model([helper.make_node("Relu", [name], ["y"])], {name: shape or [1, 4]}, ["y"])


def _truncated(fraction: float) -> Case:
    def case(tmp: Path):
        data = SMALL_CNN.read_bytes()
        path = tmp / "truncated.onnx"
        path.write_bytes(data[: int(len(data) * fraction)])
        return [path, "-o", tmp / "o.cmd"], ("cannot read model",)

    return case


def _random_bytes(seed: int) -> Case:
    def case(tmp: Path):
        path = tmp / "random.onnx"
        path.write_bytes(np.random.default_rng(seed).bytes(4096))
        return [path, "-o", tmp / "o.cmd"], ()

    return case


def _empty(tmp: Path):
    (tmp / "empty.onnx").write_bytes(b"")
    return [tmp / "empty.onnx", "-o", tmp / "o.cmd"], ("not an ONNX model (no graph)",)


def _directory(tmp: Path):
    (tmp / "dir.onnx").mkdir()
    return [tmp / "dir.onnx", "-o", tmp / "o.cmd"], ("cannot read model",)


def _missing_file(tmp: Path):
    return [tmp / "absent.onnx", "-o", tmp / "o.cmd"], ("cannot read model",)


def _cycle(tmp: Path):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    path = _save(model(nodes, {"x": [1, 4]}, {"y": [1, 4]}), tmp / "cycle.onnx")
    return [path, "-o", tmp / "o.cmd"], ("in a cycle: add -> relu -> add", "(node 'add')")


def _missing_initializer(tmp: Path):
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], {"x": [1, 4]}, {"y": [1, 4]})
    path = _save(m, tmp / "missing_init.onnx")
    return [path, "-o", tmp / "o.cmd"], ("invalid ONNX model", "'w'")


def _symbolic(tmp: Path):
    path = _save(_relu(shape=["N", 4]), tmp / "symbolic.onnx")
    return [path, "-o", tmp / "o.cmd"], ("symbolic dimension 'N'", "--input-shape x=1x4")


def _zero_size_shape_option_for_static_dim(tmp: Path):
    path = _save(_relu(shape=[2, 4]), tmp / "static.onnx")
    return [path, "-o", tmp / "o.cmd", "--input-shape", "x=0x4"], ("dimension 0 cannot be 0",)


def _zero_size_gemm_with_run_time_bias(tmp: Path):
    """An empty product plus a run-time bias: the layer neither folds nor lowers."""
    consts = {"s": [0], "e": [0], "a": [1]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()]
    inits.append(numpy_helper.from_array(np.zeros((0, 3), np.float32), "w"))
    nodes = [
        helper.make_node("Slice", ["x", "s", "e", "a"], ["empty"]),
        helper.make_node("Gemm", ["empty", "w", "c"], ["y"], name="fc"),
    ]
    m = model(nodes, {"x": [1, 4], "c": [1, 3]}, ["y"], inits)
    path = _save(m, tmp / "zero_gemm.onnx")
    return [path, "-o", tmp / "o.cmd"], ("node 'fc' (Gemm)", "tensor 'empty' is empty")


def _larger_than_ddr(tmp: Path):
    toml = target(tmp / "tiny_ddr.toml", DDR=4096)
    args = [SMALL_CNN, "-o", tmp / "o.cmd", "--target", toml]
    return args, ("tensor 'input' needs 12288 bytes, more than DDR's 4096",)


def _unknown_domain(tmp: Path):
    node = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")
    m = model([node], {"x": [1, 4]}, ["y"], opsets={"": 17, "com.example": 1})
    path = _save(m, tmp / "domain.onnx")
    return [path, "-o", tmp / "o.cmd"], ("unsupported operator com.example.Relu",)


def _zero_capacity(tmp: Path):
    toml = target(tmp / "zero.toml", UB=0)
    return [SMALL_CNN, "-o", tmp / "o.cmd", "--target", toml], ("memory.UB' must be positive",)


def _core_too_small(tmp: Path):
    toml = target(tmp / "small_l0a.toml", L0A=64)
    args = [SMALL_CNN, "-o", tmp / "o.cmd", "--target", toml]
    return args, ("L0A too small for the smallest tile", "bytes needed")


def _bad_target_toml(tmp: Path):
    (tmp / "bad.toml").write_text("[memory\nL1 = ")
    return [SMALL_CNN, "-o", tmp / "o.cmd", "--target", tmp / "bad.toml"], ("invalid TOML",)


def _unsupported_op_with_newline_name(tmp: Path):
    node = helper.make_node("FooBar", ["x"], ["y"], name='evil\nname"#\u2028')
    path = _save(model([node], {"x": [1, 4]}, ["y"]), tmp / "badop.onnx")
    return [path, "-o", tmp / "o.cmd"], ("unsupported operator FooBar", "evil\\nname")


def _bad_input_shape_option(tmp: Path):
    return [SMALL_CNN, "-o", tmp / "o.cmd", "--input-shape", "input=1x3xfoo"], ("--input-shape",)


def _output_is_the_model(tmp: Path):
    path = tmp / "model.onnx"
    path.write_bytes(SMALL_CNN.read_bytes())
    return [path, "-o", tmp / "." / "model.onnx"], ("would overwrite the input model",)


def _run_stream_without_image(tmp: Path):
    assert npucc(SMALL_CNN, "-o", tmp / "s.cmd").returncode == 0
    Path(f"{tmp / 's.cmd'}.bin").unlink()
    return ["run", tmp / "s.cmd", "--out", tmp / "res"], ("cannot read image",)


def _run_stream_with_corrupt_line(tmp: Path):
    assert npucc(SMALL_CNN, "-o", tmp / "s.cmd").returncode == 0
    lines = (tmp / "s.cmd").read_text().splitlines()
    lines[3] = "ddr size=99999999999999999999"
    (tmp / "s.cmd").write_text("\n".join(lines) + "\n")
    return ["run", tmp / "s.cmd", "--out", tmp / "res"], ("s.cmd:4: ddr size",)


CASES: dict[str, Case] = {
    "truncated-1%": _truncated(0.01),
    "truncated-50%": _truncated(0.5),
    "truncated-99%": _truncated(0.99),
    **{f"random-bytes-{seed}": _random_bytes(seed) for seed in range(3)},
    "empty-file": _empty,
    "directory": _directory,
    "missing-file": _missing_file,
    "cycle": _cycle,
    "missing-initializer": _missing_initializer,
    "symbolic-dims": _symbolic,
    "zero-size-input-shape-option-for-static-dim": _zero_size_shape_option_for_static_dim,
    "zero-size-gemm-with-run-time-bias": _zero_size_gemm_with_run_time_bias,
    "tensor-larger-than-ddr": _larger_than_ddr,
    "unknown-opset-domain": _unknown_domain,
    "target-zero-capacity": _zero_capacity,
    "core-too-small": _core_too_small,
    "target-bad-toml": _bad_target_toml,
    "unsupported-op-newline-name": _unsupported_op_with_newline_name,
    "bad-input-shape-option": _bad_input_shape_option,
    "output-is-the-model": _output_is_the_model,
    "run-without-image": _run_stream_without_image,
    "run-corrupt-header": _run_stream_with_corrupt_line,
}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, tuple[str, ...]]]:
    """Every case run through the CLI, four processes at a time."""
    prepared = {}
    for name, case in CASES.items():
        prepared[name] = case(tmp_path_factory.mktemp(name))
    with ThreadPoolExecutor(4) as pool:
        procs = {name: pool.submit(npucc, *args) for name, (args, _) in prepared.items()}
    return {name: (procs[name].result(), prepared[name][1]) for name in CASES}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_clean_error_line(name, results):
    proc, fragments = results[name]
    assert_clean_error(proc, *fragments)


def _zero_size_models(tmp: Path) -> dict[str, list[str | Path]]:
    """Models with zero-size tensors npucc compiles: the CLI arguments of `npucc check`."""
    w = numpy_helper.from_array(np.zeros((4, 0), np.float32), "w")
    gemm = model([helper.make_node("Gemm", ["x", "w"], ["y"])], {"x": [1, 4]}, ["y"], [w])
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    reduce = model(
        [helper.make_node("ReduceMax", ["x", "axes"], ["y"])], {"x": [2, 0, 3]}, ["y"], [axes],
        opsets={"": 18},
    )  # fmt: skip
    return {
        "input": [_save(_relu(shape=[1, 0, 4]), tmp / "zero_input.onnx")],
        "shape-option": [_save(_relu(shape=["N", 4]), tmp / "sym.onnx"), "--input-shape", "x=0x4"],
        "activation": [_save(gemm, tmp / "zero_gemm.onnx")],
        "reduce-over-empty": [_save(reduce, tmp / "zero_reduce.onnx")],
    }


def test_zero_size_models_compile_and_match_onnxruntime(tmp_path):
    for name, args in _zero_size_models(tmp_path).items():
        proc = npucc("check", *args)
        assert proc.returncode == 0 and "PASS" in proc.stdout, (name, proc.stdout, proc.stderr)


HOSTILE = {
    "input": 'x\n"q"# ü\u2028',
    "weight": 'w"\n#é\r',
    "hidden": 'h\nend\ncore 0 0\n  MTE2 copy | set mte2>mte1#1 "',
    "output": 'y\\" | wait ctrl>mte2#9 \t#\u00e9\U0001f600',
    "conv": "conv\n# comment",
    "relu": 'relu"',
}


def _named_model(names: dict[str, str]) -> onnx.ModelProto:
    """A conv + relu model whose node and tensor names are `names`."""
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node(
            "Conv",
            [names["input"], names["weight"]],
            [names["hidden"]],
            name=names["conv"],
            pads=[1, 1, 1, 1],
        ),  # fmt: skip
        helper.make_node("Relu", [names["hidden"]], [names["output"]], name=names["relu"]),
    ]
    inits = [numpy_helper.from_array(w, names["weight"])]
    return model(nodes, {names["input"]: [1, 3, 8, 8]}, [names["output"]], inits)


def _split(stream: str) -> tuple[list[str], list[str]]:
    """(tensor lines with the quoted name removed, every other line)."""
    tensors, others = [], []
    for line in stream.splitlines():
        if line.startswith("tensor "):
            kind, rest = line.split(None, 2)[1:]
            _, end = json.JSONDecoder().raw_decode(rest)
            tensors.append(f"tensor {kind} {rest[end:]}")
        else:
            others.append(line)
    return tensors, others


def test_hostile_names_cannot_change_or_inject_instructions(tmp_path):
    plain = {k: k for k in HOSTILE}
    _save(_named_model(plain), tmp_path / "plain.onnx")
    _save(_named_model(HOSTILE), tmp_path / "hostile.onnx")
    for stem in ("plain", "hostile"):
        proc = npucc(tmp_path / f"{stem}.onnx", "-o", tmp_path / f"{stem}.cmd")
        assert proc.returncode == 0, proc.stderr
    plain_text = (tmp_path / "plain.cmd").read_text()
    hostile_text = (tmp_path / "hostile.cmd").read_text()
    assert hostile_text.isascii()
    assert _split(hostile_text) == _split(plain_text)  # only the quoted names differ
    assert (tmp_path / "plain.cmd.bin").read_bytes() == (tmp_path / "hostile.cmd.bin").read_bytes()
    names = {
        json.loads(m) for m in re.findall(r'^tensor \w+ ("(?:[^"\\]|\\.)*")', hostile_text, re.M)
    }
    assert {HOSTILE["input"], HOSTILE["weight"], HOSTILE["output"]} <= names
    check = npucc("check", tmp_path / "hostile.onnx")
    assert check.returncode == 0 and "PASS" in check.stdout, check.stderr
