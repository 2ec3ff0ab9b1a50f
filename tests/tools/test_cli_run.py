"""check -o, run's inputs and files, output paths, and one-line errors naming what is expected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL_CNN = str(ROOT / "models" / "small_cnn.onnx")
SHAPE = (1, 3, 32, 32)


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> Path:
    """small_cnn compiled by `check -o` into a directory check creates."""
    out = tmp_path_factory.mktemp("run") / "new" / "dir" / "cnn.cmd"
    assert main(["check", SMALL_CNN, "-o", str(out), "--quiet"]) == 0
    return out


def test_check_keeps_the_stream_it_checked(stream, tmp_path, capsys):
    assert Path(f"{stream}.bin").exists()
    assert main([SMALL_CNN, "-o", str(tmp_path / "again.cmd")]) == 0
    assert (tmp_path / "again.cmd").read_bytes() == stream.read_bytes()
    assert f"wrote {tmp_path / 'again.cmd'} (" in capsys.readouterr().out


def test_output_defaults_to_model_cmd_here(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([SMALL_CNN]) == 0
    assert (tmp_path / "small_cnn.cmd").exists() and (tmp_path / "small_cnn.cmd.bin").exists()
    assert capsys.readouterr().out.startswith("wrote small_cnn.cmd (")
    assert main([SMALL_CNN, "--emit", "graph", "-o", "a/b/graph.txt"]) == 0
    assert (tmp_path / "a" / "b" / "graph.txt").read_text().startswith("graph ")


def test_format_without_emit_is_an_error(tmp_path, capsys):
    assert main([SMALL_CNN, "--format", "json", "-o", str(tmp_path / "a.cmd")]) == 2
    err = capsys.readouterr().err
    assert err == "npucc: error: --format json needs --emit LEVEL (the stream is only text)\n"
    assert not (tmp_path / "a.cmd").exists()


def _run(stream: Path, tmp_path: Path, value: np.ndarray | None, capsys, *more: str):
    """`npucc run` in this process: its exit code, stdout and stderr."""
    argv = ["run", str(stream), "--out", str(tmp_path / "res")]
    if value is not None:
        np.save(tmp_path / "x.npy", value)
        argv += ["-i", f"input={tmp_path / 'x.npy'}"]
    code = main([*argv, *more])
    out, err = capsys.readouterr()
    return code, out, err


def test_run_names_the_files_it_wrote(stream, tmp_path, capsys):
    code, out, err = _run(stream, tmp_path, np.ones(SHAPE, np.float32), capsys)
    assert code == 0, err
    wrote = [line for line in out.splitlines() if line.startswith("wrote ")]
    assert wrote == [f'wrote {tmp_path / "res" / "probs.npy"} (output "probs", float32[1, 10])']
    assert np.load(tmp_path / "res" / "probs.npy").shape == (1, 10)
    assert err == ""


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, 'missing input "input": expected float32[1,3,32,32] (give -i input=FILE.npy)'),
        (np.ones((1, 3, 64, 64), np.float32), "has shape [1, 3, 64, 64], expected float32[1,3,32"),
        (np.ones(SHAPE, np.int32), 'input "input" has dtype int32, expected float32[1,3,32,32]'),
    ],
)
def test_run_input_errors_say_what_is_expected(stream, tmp_path, capsys, value, message):
    code, _, err = _run(stream, tmp_path, value, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("npucc: error: ") and message in err
    assert not (tmp_path / "res").exists()


def test_run_unknown_input_suggests_the_name(stream, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones(SHAPE, np.float32))
    argv = ["run", str(stream), "--out", str(tmp_path / "r"), "-i", f"inptu={tmp_path / 'x.npy'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown input \"inptu\" (did you mean 'input'?)" in err
    assert 'inputs: "input" float32[1,3,32,32]' in err


def test_run_converts_float64_with_a_note(stream, tmp_path, capsys):
    x = np.random.default_rng(0).standard_normal(SHAPE)
    code, _, err = _run(stream, tmp_path, x, capsys)
    assert code == 0
    assert err == 'npucc: note: input "input" is float64, converted to float32\n'
    first = np.load(tmp_path / "res" / "probs.npy")
    assert _run(stream, tmp_path, x.astype(np.float32), capsys)[0] == 0
    assert np.array_equal(first, np.load(tmp_path / "res" / "probs.npy"))


def test_mesh_run_prints_totals_and_per_core_only_when_asked(tmp_path, capsys):
    out = tmp_path / "res.cmd"
    model = str(ROOT / "models" / "residual_block.onnx")
    assert main([model, "-o", str(out), "--target", "mesh8x8", "--beam-width", "16"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--timing-only"]) == 0
    plain = capsys.readouterr().out
    assert main(["run", str(out), "--timing-only", "--per-core"]) == 0
    cores = capsys.readouterr().out
    assert "  core " not in plain and plain.count("\n") < 16
    assert "summed over the 64 cores" in plain and "%)" in plain
    per_core = [line for line in cores.splitlines() if line.startswith("  core ")]
    assert cores.startswith(plain) and 1 < len(per_core) <= 64


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", SMALL_CNN, "--out", "{tmp}/r"], "not text; expected an npucc command stream"),
        (["{tmp}/notes.onnx", "-o", "{tmp}/o.cmd"], "expected an ONNX protobuf file (.onnx)"),
        (["check", "{tmp}/notes.onnx"], "(.onnx) ({tmp}/notes.onnx)"),
        ([SMALL_CNN, "--input-shape", "input=1x3x64x64"], "it is 32 (the model declares input=1x3"),
        (["check", "{tmp}/missing.onnx"], "cannot read model: No such file or directory ({tmp}/"),
    ],
)
def test_errors_name_the_file_and_what_was_expected(tmp_path, capsys, argv, message):
    (tmp_path / "notes.onnx").write_text("these are my notes, not a model\n")
    args = [a.format(tmp=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("npucc: error: ") and err.count("\n") == 1
    assert message.format(tmp=tmp_path) in err and "Traceback" not in err
    assert main([*args, "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err
