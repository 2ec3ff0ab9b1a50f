"""The command line: compile, run, check, errors, determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from npucc.checking import run_onnxruntime
from npucc.tools import cli
from npucc.tools.cli import main, safe_file_name

ROOT = Path(__file__).resolve().parents[2]
SMALL_CNN = ROOT / "models" / "small_cnn.onnx"


def _npucc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "npucc", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_compile_run_and_outputs_match_onnxruntime(tmp_path):
    out = tmp_path / "out.cmd"
    assert main([str(SMALL_CNN), "-o", str(out)]) == 0
    assert out.exists() and Path(f"{out}.bin").exists()
    model = onnx.load(str(SMALL_CNN))
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert (
        main(
            [
                "run",
                str(out),
                "-i",
                f"{name}=" + str(tmp_path / "x.npy"),
                "--out",
                str(tmp_path / "res"),
            ]
        )
        == 0
    )
    ref = run_onnxruntime(model, {name: x})
    for out_name, expected in ref.items():
        got = np.load(tmp_path / "res" / f"{safe_file_name(out_name)}.npy")
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_check_passes_and_prints_figures(capsys):
    assert main(["check", str(SMALL_CNN), "--seed", "3"]) == 0
    text = capsys.readouterr().out
    assert "PASS" in text and "max abs error" in text and "predicted" in text


def test_unsupported_operator_is_one_line_exit_2(tmp_path):
    node = helper.make_node("Det", ["x"], ["y"], name="det")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    result = _npucc(str(path), "-o", str(tmp_path / "o.cmd"))
    assert result.returncode == 2
    assert result.stderr == "npucc: error: unsupported operator Det (node 'det', opset 13)\n"
    assert not (tmp_path / "o.cmd").exists()


def test_bad_target_and_wrong_image(tmp_path):
    bad = tmp_path / "t.toml"
    bad.write_text("[target]\nname='x'\n")
    result = _npucc(str(SMALL_CNN), "-o", str(tmp_path / "o.cmd"), "--target", str(bad))
    assert result.returncode == 2 and result.stderr.startswith("npucc: error: ")
    assert "target.dtype" in result.stderr and "Traceback" not in result.stderr
    out = tmp_path / "o.cmd"
    assert main([str(SMALL_CNN), "-o", str(out)]) == 0
    image = Path(f"{out}.bin")
    image.write_bytes(image.read_bytes()[:-4] + b"\0\0\0\1")
    result = _npucc("run", str(out), "--out", str(tmp_path / "r"))
    assert result.returncode == 2 and "o.cmd.bin" in result.stderr
    assert result.stderr.count("\n") == 1


def test_same_bytes_across_hash_seeds(tmp_path):
    outputs = []
    for seed in ("0", "1", "12345"):
        out = tmp_path / f"o{seed}.cmd"
        result = _npucc(
            str(ROOT / "models" / "residual_block.onnx"),
            "-o",
            str(out),
            env={"PYTHONHASHSEED": seed},
        )
        assert result.returncode == 0, result.stderr
        outputs.append((out.read_bytes(), Path(f"{out}.bin").read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]


@pytest.mark.parametrize(
    ("name", "safe"), [("prob", "prob"), ("a/b:c", "a_b_c"), ("..", "_.."), ("x\ny", "x_y")]
)
def test_safe_file_names(name, safe):
    assert safe_file_name(name) == safe


def test_batch_fixes_a_symbolic_batch_and_refuses_a_static_one(tmp_path):
    mlp = ROOT / "models" / "mlp.onnx"
    assert main(["check", str(mlp), "--batch", "3"]) == 0
    result = _npucc(str(SMALL_CNN), "-o", str(tmp_path / "o.cmd"), "--batch", "3")
    assert result.returncode == 2
    assert "static batch of 1" in result.stderr and result.stderr.count("\n") == 1


def test_run_timing_only_needs_no_inputs_and_reports_figures(tmp_path):
    out = tmp_path / "o.cmd"
    assert main([str(SMALL_CNN), "-o", str(out)]) == 0
    result = _npucc("run", str(out), "--timing-only")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("makespan ") and lines[1].startswith("energy ")
    assert lines[2].startswith("DRAM traffic ")
    full = _npucc("run", str(out), "--out", str(tmp_path / "r"), "-i", "input=" + str(_x(tmp_path)))
    assert full.returncode == 0, full.stderr
    assert full.stdout.splitlines()[0] == lines[0]  # same timing with and without data


def _x(tmp_path: Path) -> Path:
    model = onnx.load(str(SMALL_CNN))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    return path


def test_emit_trace_feeds_the_dan_command(tmp_path):
    """npucc's own workloads go through the same trace interface as traces from elsewhere."""
    assert main([str(SMALL_CNN), "--emit-trace", str(tmp_path / "traces")]) == 0
    trace = tmp_path / "traces" / "small_cnn_core0_0.json"
    caps = "L1=1048576,UB=262144,L0A=65536,L0B=65536,L0C=262144"
    assert main(["dan", str(trace), "--out", str(tmp_path / "out"), "--capacity", caps]) == 0
    metrics = json.loads((tmp_path / "out" / "small_cnn_core0_0_metrics.json").read_text())
    assert metrics["spills"] == 0 and metrics["makespan"] >= metrics["bounds"]["makespan"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--search", "foo"], "invalid choice: 'foo'"),
        (["bench", "hypercut", "--json", "{tmp}/x.json", "--models", "nope"], "model 'nope'"),
        (["bench", "hypercut", "--json", "{tmp}/no/x.json"], "does not exist"),
        (["bench", "hypercut", "--json", "{tmp}/x.json", "--batches", "1,x"], "integers"),
        (
            ["bench", "hypercut", "--json", "{tmp}/x.json", "--models", "zfnet512"]
            + ["--platforms", "mesh8x8", "--methods", "hypercut", "--batches", "0"],
            "batch must be positive, got 0",
        ),
        (
            ["bench", "hypercut", "--json", "{tmp}/x.json", "--models", "zfnet512"]
            + ["--platforms", "mesh8x8", "--methods", "sa", "--sa-iterations", "-5"],
            "SA iterations must be positive, got -5",
        ),
        (["bench", "dan", "--workload", "nope"], "workload 'nope'"),
        (["bench", "nope"], "invalid choice: 'nope'"),
        (["run"], "required: stream"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(tmp_path, capsys, args, message):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0].startswith("--"):
        argv = [str(SMALL_CNN), "-o", str(tmp_path / "o.cmd"), *argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("npucc: error: ") and message in err and err.count("\n") == 1
    assert not list(tmp_path.glob("*.json"))


def test_check_warns_when_the_reference_is_zero(tmp_path, capsys):
    """A zero weight makes every output 0: PASS proves nothing, and check says so."""
    w = np.zeros((8, 4), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [onnx.numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "zero.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    assert main(["check", str(path), "--quiet"]) == 0
    assert "output 'y' is within 1e-05 of zero" in capsys.readouterr().err
    assert main(["check", str(path), "--quiet", "--random-weights"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_check_ends_its_compile_with_the_summary_unless_quiet(capsys):
    assert main(["check", str(SMALL_CNN)]) == 0
    assert "npucc summary: small_cnn.onnx" in capsys.readouterr().err
    assert main(["check", str(SMALL_CNN), "--quiet"]) == 0
    assert "npucc summary" not in capsys.readouterr().err


def test_the_program_exits_with_mains_code_after_flushing_its_output(capsys):
    assert main(["ops"]) == 0
    expected = capsys.readouterr().out
    done = _npucc("ops", env={"PYTHONUNBUFFERED": ""})  # piped and buffered: `run` flushes
    assert done.returncode == 0 and done.stdout == expected and len(expected) > 8192
    failed = _npucc(str(ROOT / "no-such-model.onnx"))
    assert failed.returncode == 2 and "cannot read model" in failed.stderr


def test_a_compile_lets_idle_blas_workers_sleep(monkeypatch):
    """`run` sets OPENBLAS_THREAD_TIMEOUT for a compile only, and keeps a value the user set."""
    assert cli._compiles(["m.onnx", "-o", "x.cmd"]) and cli._compiles([])
    assert not cli._compiles(["check", "m.onnx"]) and not cli._compiles(["run", "x.cmd"])
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    cli._idle_blas_threads()
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "4"
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "20")
    cli._idle_blas_threads()
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "20"
