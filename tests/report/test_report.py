"""Reports: the interpreter's trace, the figures' data, and the page in a headless browser."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

import npucc
from npucc.interp import run_stream
from npucc.ir.stream_parse import parse_stream
from npucc.report import render_report
from npucc.report.data import collect
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"  # gitignored
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def traced():
    """residual_block compiled and run with a trace."""
    program = npucc.compile(ROOT / "models" / "residual_block.onnx")
    inputs = {k: np.ones(v, np.float32) for k, v in program.inputs.items()}
    stream = parse_stream(program.stream)
    plain = run_stream(stream, program.image, inputs)
    result = run_stream(stream, program.image, inputs, trace=True)
    return program, stream, plain, result


def test_trace_records_every_instruction_and_alloc(traced):
    program, stream, plain, result = traced
    assert plain.trace is None and plain.makespan == result.makespan
    lines = [line for core in stream.cores for line in core.lines]
    pipe_lines = [line for line in lines if line.queue.isupper()]
    allocs = sum(line.queue == "alloc" for line in lines)
    trace = result.trace
    assert len(trace.instrs) == len(pipe_lines)
    assert sum(m.kind == "alloc" for m in trace.mem) == allocs
    assert max(i.finish for i in trace.instrs) == result.makespan
    first = min(trace.instrs, key=lambda i: i.lineno)
    assert first.operands and all(o.nbytes > 0 for o in first.operands)
    busy = {}
    for ins in trace.instrs:
        busy[ins.queue] = busy.get(ins.queue, 0) + ins.finish - ins.start
    assert busy == {p: c for p, c in result.pipe_cycles.items() if c}


def test_report_data_matches_the_schedule(traced):
    program, stream, _, result = traced
    data = collect("t", stream.target, result)
    metrics = data.metrics()
    assert metrics["makespan"] == program.stats["predicted_makespan"]
    assert metrics["spills"] == program.stats["spills"] == 0
    core = data.cores[(0, 0)]
    for tier, series in core.residency.items():  # the machine's own per-tier peaks
        if tier != "L1+UB":
            assert max(v for _, v in series) == result.peak[tier], tier
    assert max(result.peak["L1"], result.peak["UB"]) <= metrics["peak"]
    assert metrics["peak"] <= result.peak["L1"] + result.peak["UB"]
    assert core.residency["L1+UB"][-1][1] == 0  # everything freed at the end
    assert all(i.end >= i.start for i in core.intervals)


def _browser(page: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="npucc-chromium-")
    try:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             *args, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="no chromium")
def test_report_page_loads_in_headless_chromium(tmp_path):
    assert CHROMIUM is not None, "chromium is required on CI (.ci/run installs it)"
    cmd = tmp_path / "residual.cmd"
    assert main([str(ROOT / "models" / "residual_block.onnx"), "-o", str(cmd), "--quiet"]) == 0
    out = tmp_path / "report"
    assert main(["report", str(cmd), "-o", str(out), "--quiet"]) == 0
    page = out / "index.html"
    html = page.read_text()
    images = sorted(p.name for p in out.glob("*.png"))
    assert images == ["gantt-0-0.png", "memory-0-0.png", "mesh.png", "residency-0-0.png"]
    assert all(f'src="{name}"' in html for name in images)  # relative references
    dom = _browser(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-images="ok"' in dom.stdout, dom.stdout[-500:]
    assert _console_errors(dom.stderr) == []
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    run = _browser(page, f"--screenshot={shot}", "--window-size=1280,2000")
    assert run.returncode == 0 and shot.stat().st_size > 10_000
    assert _console_errors(run.stderr) == []


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium")
def test_browser_check_catches_a_missing_image(traced, tmp_path):
    _, stream, _, result = traced
    page = render_report("t", stream.target, result, tmp_path)
    (tmp_path / "mesh.png").unlink()
    dom = _browser(page, "--dump-dom")
    assert 'data-images="missing mesh.png"' in dom.stdout
    assert _console_errors(dom.stderr)
