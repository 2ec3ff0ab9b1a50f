"""Progress: stage lines outside a terminal, bars with sub-progress inside one, none if quiet."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

import npucc
from npucc import progress
from npucc.compiler import pipeline
from npucc.options import CompileOptions
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL_CNN = ROOT / "models" / "small_cnn.onnx"


def test_mode_follows_quiet_and_the_terminal():
    tty = io.StringIO()
    tty.isatty = lambda: True  # type: ignore[method-assign]
    assert progress.mode(stream=tty) == "bars" and progress.mode(True, tty) == "off"
    assert progress.mode(stream=io.StringIO()) == "lines"


def test_outside_a_terminal_each_stage_prints_its_seconds(tmp_path, capsys):
    proc = subprocess.run(
        [sys.executable, "-m", "npucc", "check", str(SMALL_CNN), "-o", str(tmp_path / "o.cmd")],
        capture_output=True, text=True, check=False,
        env={**os.environ, "NPUCC_PROGRESS_DELAY": "0"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    stages = [line.split() for line in proc.stderr.splitlines() if line.startswith("npucc: ")]
    names = [p.name for p in pipeline(CompileOptions())]
    assert [s[1] for s in stages] == [*names, "interpret", "onnxruntime"]
    assert all(len(s) == 4 and s[3] == "s" and float(s[2]) >= 0 for s in stages)
    assert main(["check", str(SMALL_CNN), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_stage_lines_go_only_where_reporting_sends_them(monkeypatch):
    monkeypatch.setenv("NPUCC_PROGRESS_DELAY", "0")
    out = io.StringIO()
    with progress.reporting("lines", out=out):
        with progress.stage("one"):
            pass
        with progress.reporting("lines", out=io.StringIO()):  # nested: the outer one holds
            with progress.stage("two"):
                pass
    with progress.stage("outside"):
        pass
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["one", "two"]


def test_a_short_command_prints_no_stage_lines(monkeypatch):
    """Held until the command has run the delay (git's way): an early error stays one line."""
    monkeypatch.setenv("NPUCC_PROGRESS_DELAY", "0.3")
    out = io.StringIO()
    with progress.reporting("lines", out=out):
        with progress.stage("quick"):
            pass
        assert out.getvalue() == ""
        with progress.stage("slow"):
            end = time.thread_time() + 0.35
            while time.thread_time() < end:  # this thread's CPU time counts, not sleep
                pass
        assert [line.split()[1] for line in out.getvalue().splitlines()] == ["quick", "slow"]
        with progress.stage("later"):
            pass
        assert out.getvalue().splitlines()[-1].split()[1] == "later"
    held = io.StringIO()
    with progress.reporting("lines", out=held):
        with progress.stage("quick"):
            pass
    assert held.getvalue() == ""  # never written: the command ended within the delay
    monkeypatch.setenv("NPUCC_PROGRESS_DELAY", "x")
    assert progress.progress_delay() == progress.DELAY


def test_work_before_the_first_stage_does_not_start_the_delay(monkeypatch):
    """Importing the compiler before the first stage (slow while Python writes its bytecode
    caches on a fresh install) must not make an early error print stage lines."""
    monkeypatch.setenv("NPUCC_PROGRESS_DELAY", "0.2")
    out = io.StringIO()
    with progress.reporting("lines", out=out):
        end = time.thread_time() + 0.3
        while time.thread_time() < end:  # before any stage: not counted
            pass
        with progress.stage("quick"):
            pass
    assert out.getvalue() == ""


def test_inside_a_terminal_schedule_and_codegen_show_sub_progress():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with progress.reporting("bars", console):
        npucc.compile(SMALL_CNN)
    text = buffer.getvalue()
    assert "compile: schedule" in text and "schedule: core 0,0 (" in text
    assert "dan: lowering order (MPAS), layout (DLR)" in text
    assert "dan: timing refinement (CPE)" in text and "codegen" in text
