"""Seeing inside the compiler from the command line: print/dump/emit IR, `npucc ir`, progress,
and one-line errors with consistent exit codes across subcommands."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from npucc import progress
from npucc.compiler import pipeline
from npucc.options import CompileOptions
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL_CNN = str(ROOT / "models" / "small_cnn.onnx")
PASSES = tuple(p.name for p in pipeline(CompileOptions()))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """small_cnn compiled once, with its per-pass dumps next to it."""
    out = tmp_path_factory.mktemp("compiled")
    assert main([SMALL_CNN, "-o", str(out / "out.cmd"), "--dump-dir", str(out / "dumps")]) == 0
    return out


def test_dump_dir_has_one_numbered_file_per_pass(compiled):
    names = sorted(f.name for f in (compiled / "dumps").iterdir())
    assert names == [f"{i:02d}-{p}.txt" for i, p in enumerate(PASSES, 1)]
    last = compiled / "dumps" / f"{len(PASSES):02d}-codegen.txt"
    assert last.read_text() == (compiled / "out.cmd").read_text()


def test_print_ir_before_after_and_all(tmp_path, capsys):
    out = str(tmp_path / "o.cmd")
    assert main([SMALL_CNN, "-o", out, "--print-ir-after=lower-tiles,schedule",
                 "--print-ir-before", "codegen"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    titles = [line for line in err.splitlines() if line.startswith("// -----//")]
    assert titles == [
        "// -----// IR Dump After lower-tiles //----- //",
        "// -----// IR Dump After schedule //----- //",
        "// -----// IR Dump Before codegen //----- //",
    ]
    assert "\ntiled-program " in err and "\nscheduled-program " in err
    assert main([SMALL_CNN, "-o", out, "--print-ir-after-all"]) == 0
    err = capsys.readouterr().err
    assert err.count("IR Dump After") == len(PASSES)


@pytest.mark.parametrize(
    ("level", "fmt", "head"),
    [
        ("graph", "text", "graph "),
        ("graph", "json", "{"),
        ("graph", "dot", "digraph "),
        ("tiled", "text", "tiled-program "),
        ("tiled", "dot", "digraph "),
        ("schedule", "text", "scheduled-program "),
        ("schedule", "json", "{"),
        ("cmd", "json", "{"),
    ],
)
def test_emit_levels_and_formats(tmp_path, capsys, level, fmt, head):
    assert main([SMALL_CNN, "--emit", level, "--format", fmt]) == 0
    text = capsys.readouterr().out
    assert text.startswith(head)
    if fmt == "json":
        assert json.loads(text)["level"] == level
    out = tmp_path / f"ir.{fmt}"
    assert main([SMALL_CNN, "--emit", level, "--format", fmt, "-o", str(out)]) == 0
    assert out.read_text() == text


def test_npucc_ir_prints_every_dump_back(compiled, capsys):
    for dump in sorted((compiled / "dumps").iterdir()):
        assert main(["ir", str(dump)]) == 0
        assert capsys.readouterr().out == dump.read_text(), dump.name
    assert main(["ir", str(compiled / "out.cmd"), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["level"] == "cmd"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ir", "{tmp}/missing.txt"], "cannot read IR dump: No such file or directory"),
        (["ir", "{tmp}/foreign.txt"], "not an npucc IR dump"),
        (["ir", "{tmp}/bad.txt"], "/bad.txt:"),
        (["report", "{tmp}/missing.cmd", "-o", "{tmp}/r"], "cannot read stream"),
        (["run", "{tmp}/missing.cmd", "--out", "{tmp}/r"], "cannot read stream"),
        ([SMALL_CNN, "--emit", "cmd", "--format", "dot"], "dot draws the graph and tiled"),
        ([SMALL_CNN, "--format", "json"], "--format json needs --emit"),
        ([SMALL_CNN, "-o", "{tmp}/o.cmd", "--print-ir-after=lower"], "unknown pass 'lower'"),
        ([SMALL_CNN, "-o", "{tmp}/foreign.txt/o.cmd"], "cannot create directory"),
        ([SMALL_CNN, "--emit", "graph", "-o", "{tmp}/foreign.txt/g.txt"], "a file of that name"),
    ],
)
def test_errors_are_one_line_with_exit_2(compiled, tmp_path, capsys, args, message):
    (tmp_path / "foreign.txt").write_text("hello\n")
    dump = next((compiled / "dumps").glob("*-lower-tiles.txt")).read_text()
    (tmp_path / "bad.txt").write_text(dump.replace("src=@", "src=?", 1))
    argv = [a.format(tmp=tmp_path) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("npucc: error: ")
    assert message in err
    assert main([*argv, "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_failed_check_exits_1_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys, npucc.tools.cli as c, npucc.checking as k;"
         "k.compare = lambda got, ref, *rtol: [k.Comparison('y', max_abs=1.0, max_ref=1.0)];"
         f"sys.exit(c.main(['check', {SMALL_CNN!r}]))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    # the compile's summary comes first; the failure is the last line, without a traceback
    assert proc.stderr.splitlines()[-1].startswith("npucc: check failed: ")
    assert "Traceback" not in proc.stderr


def test_progress_shows_only_on_a_terminal(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "npucc", SMALL_CNN, "-o", str(tmp_path / "o.cmd")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and "\x1b[" not in proc.stderr  # stderr is a pipe: no bar
    assert not progress.should_show(quiet=True, stream=sys.stderr)
    tty = io.StringIO()
    tty.isatty = lambda: True  # type: ignore[method-assign]
    assert progress.should_show(stream=tty) and not progress.should_show(True, tty)


def test_progress_bars_render_over_passes_and_the_interpreter():
    import npucc

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    seen: list[str] = []
    with progress.bars(True, console):
        program = npucc.compile(SMALL_CNN, on_pass=seen.append)
        with progress.task("loop", 10) as bar:
            assert bar is not None
            bar.update(5)
        with progress.task("interpret", 1) as bar:
            assert bar is not None
    assert seen == list(PASSES)
    assert "compile" in buffer.getvalue()
    with progress.task("outside", 3) as bar:
        assert bar is None  # no bars shown: loops pay one comparison
    assert program.stats["predicted_makespan"] > 0
