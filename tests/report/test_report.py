"""Reports: the interpreter's trace, the figures' data, and the page in a headless browser."""

from __future__ import annotations

import json
import os
import re
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
    data = collect("t", stream, result)
    metrics = data.metrics()
    assert metrics["makespan"] == program.stats["predicted_makespan"]
    assert metrics["spills"] == program.stats["spills"] == 0
    core = data.cores[(0, 0)]
    peaks = program.stats["peak"]  # one definition: the schedule's, the stream's, the report's
    assert metrics["peak"] == program.stats["peak_l1_ub"] == peaks["L1+UB"] == core.peak
    assert result.peak == peaks
    for tier, series in core.residency.items():
        assert max(v for _, v in series) == peaks[tier], tier
        assert series[-1][1] == 0  # everything freed at the end
    assert max(peaks["L1"], peaks["UB"]) <= peaks["L1+UB"] <= peaks["L1"] + peaks["UB"]
    lines = [line for line, _ in core.residency["L1+UB"]]
    assert lines == sorted(lines) and core.peak_line in lines  # along the stream's lines
    assert all(i.end >= i.start for i in core.intervals)
    fillers = {i.filler for i in core.intervals}
    assert {"copy", "mmad"} <= fillers  # each buffer's first writer, for the legend


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


def _legends(html: str) -> dict[str, list[str]]:
    """Each figure's legend entries as the page lists them: image -> entries."""
    found = re.findall(r'<ul class="legend" data-figure="([^"]+)">(.*?)</ul>', html, re.S)
    return {src: re.findall(r"<li>(.*?)</li>", body) for src, body in found}


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
    assert images == ["gantt-0-0.png", "memory-0-0.png", "residency-0-0.png"]  # no 1x1 mesh
    assert all(f'src="{name}"' in html for name in images)  # relative references
    assert not list(out.glob("core-*.html"))  # one core: its figures are on the summary page
    dom = _browser(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-images="ok"' in dom.stdout, dom.stdout[-500:]
    assert _console_errors(dom.stderr) == []
    legends = _legends(dom.stdout)
    assert set(legends) == set(images)  # every figure's legend, as drawn, is on the page
    assert {"filled by copy", "filled by mmad"} <= set(legends["memory-0-0.png"])
    assert {"live bytes", "capacity", "peak"} <= set(legends["residency-0-0.png"])
    assert "predicted cycles" in dom.stdout and "on-chip peak L1+UB" in dom.stdout
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    run = _browser(page, f"--screenshot={shot}", "--window-size=1280,2000")
    assert run.returncode == 0 and shot.stat().st_size > 10_000
    assert _console_errors(run.stderr) == []


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium")
def test_browser_check_catches_a_missing_image(traced, tmp_path):
    _, stream, _, result = traced
    page = render_report("t", stream, result, tmp_path)
    (tmp_path / "gantt-0-0.png").unlink()
    dom = _browser(page, "--dump-dom")
    assert 'data-images="missing gantt-0-0.png"' in dom.stdout
    assert _console_errors(dom.stderr)


# A page next to the report that opens its summary in a frame, clicks each core's link, checks
# the core page (images loaded, legends listed), clicks its link back, and so on; the result is
# left in body[data-result] for --dump-dom. (file:// frames need --allow-file-access-from-files.)
HARNESS = """<!DOCTYPE html><html><body><iframe id="f" src="index.html" width="1200"
height="900"></iframe><script>
var f = document.getElementById("f"), seen = [], todo = null, out = {pages: []};
function legends(doc) {
  return Array.prototype.map.call(doc.querySelectorAll("ul.legend"), function (u) {
    return [u.getAttribute("data-figure"), u.querySelectorAll("li").length]; });
}
f.addEventListener("load", function () {
  var doc = f.contentDocument, name = doc.location.pathname.split("/").pop();
  if (name === "index.html") {
    if (todo === null) {
      todo = Array.prototype.slice.call(doc.querySelectorAll("a.core-link"))
        .map(function (a) { return a.getAttribute("href"); });
      out.links = todo.slice(); out.index = {images: doc.body.getAttribute("data-images"),
                                             legends: legends(doc)};
    }
    if (todo.length === 0) { document.body.setAttribute("data-result", JSON.stringify(out));
                             return; }
    var href = todo.shift();
    doc.querySelector('a.core-link[href="' + href + '"]').click();
  } else {
    out.pages.push({page: name, images: doc.body.getAttribute("data-images"),
                    legends: legends(doc)});
    doc.getElementById("summary-link").click();
  }
});
</script></body></html>"""


def _mesh_target():
    """A 1x2 mesh of davinci-core cores with mesh8x8's on-chip buffer (so the NoC carries)."""
    from npucc.target import load_target, target_from_dict

    data = load_target("davinci-core").to_dict()
    data["target"]["name"] = "mesh1x2"
    data["mesh"].update(rows=1, cols=2)
    data["mesh"]["onchip_buffer"] = load_target("mesh8x8").to_dict()["mesh"]["onchip_buffer"]
    return target_from_dict(data, "tests")


@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"), reason="no chromium")
def test_mesh_report_is_a_summary_with_each_core_one_click_away(tmp_path):
    assert CHROMIUM is not None, "chromium is required on CI (.ci/run installs it)"
    program = npucc.compile(ROOT / "models" / "residual_block.onnx", _mesh_target(), beam_width=8)
    program.save(tmp_path / "mesh.cmd")
    from npucc.report import write_report

    page = write_report(tmp_path / "mesh.cmd", tmp_path / "report")
    out = page.parent
    cores = sorted(p.name for p in out.glob("core-*.html"))
    assert cores == ["core-0-0.html", "core-0-1.html"]
    html = page.read_text()
    assert "gantt-0-0.png" not in html and 'src="mesh.png"' in html  # details one click away
    harness = out / "harness.html"
    harness.write_text(HARNESS)
    dom = _browser(harness, "--dump-dom", "--allow-file-access-from-files",
                   "--virtual-time-budget=30000")  # fmt: skip
    found = re.search(r"data-result=\"(.*?)\"", dom.stdout)
    assert found, dom.stdout[-1000:] + dom.stderr[-1000:]
    result = json.loads(found.group(1).replace("&quot;", '"'))
    assert result["links"] == cores and result["index"]["images"] == "ok"
    assert dict(result["index"]["legends"])["mesh.png"] >= 1  # the NoC arrows' entry
    assert [p["page"] for p in result["pages"]] == cores
    for core_page in result["pages"]:
        assert core_page["images"] == "ok", core_page
        legends = dict(core_page["legends"])
        assert len(legends) == 3 and all(n >= 1 for n in legends.values()), core_page
    assert _console_errors(dom.stderr) == []


def test_noc_bytes_per_link_go_row_first_then_column():
    from npucc.report.data import link_loads

    loads = link_loads({((0, 0), (1, 2)): 10, ((0, 1), (0, 0)): 4})
    assert loads == {
        ((0, 0), (0, 1)): 10, ((0, 1), (0, 2)): 10, ((0, 2), (1, 2)): 10, ((0, 1), (0, 0)): 4,
    }  # fmt: skip
