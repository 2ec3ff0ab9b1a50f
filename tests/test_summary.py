"""The compile summary: the table on stderr, --summary-json/-csv, --quiet, Program.summary()."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto as T
from onnx import helper as h

import npucc
from npucc.ir.stream_parse import parse_stream
from npucc.summary import flat, format_summary
from npucc.target import TIERS
from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[1]
SMALL_CNN = ROOT / "models" / "small_cnn.onnx"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """small_cnn compiled through the CLI with both summary files, and its streams' run."""
    tmp = tmp_path_factory.mktemp("summary")
    proc = subprocess.run(
        [sys.executable, "-m", "npucc", str(SMALL_CNN), "-o", str(tmp / "s.cmd"),
         "--summary-json", str(tmp / "s.json"), "--summary-csv", str(tmp / "csv" / "s.csv")],
        capture_output=True, text=True, check=False, cwd=tmp,
        env={**os.environ, "NPUCC_PROGRESS_DELAY": "0"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    program = npucc.compile(SMALL_CNN)
    result = program.execute({}, check=False, timing_only=True)
    return tmp, proc, program, result


def test_every_compile_ends_with_the_summary_table(compiled):
    tmp, proc, program, _ = compiled
    assert proc.stdout.splitlines() == [
        line for line in proc.stdout.splitlines() if line.startswith("wrote ")
    ]
    table = proc.stderr[proc.stderr.index("npucc summary: small_cnn.onnx") :]
    assert table == format_summary(program.summary(), "npucc summary: small_cnn.onnx")
    for figure in ("target", "predicted cycles", "latency", "roofline efficiency",
                   "on-chip peak L1+UB", "DRAM read / written", "energy"):  # fmt: skip
        assert f"  {figure} " in table, figure
    assert "inferences/s" in table and "of 1,048,576 B" in table  # L1 against its capacity
    stages = [line for line in proc.stderr.splitlines() if line.startswith("npucc: ")]
    assert [line.split()[1] for line in stages][-2:] == ["schedule", "codegen"]  # stage lines


def test_summary_files_hold_program_summary(compiled):
    tmp, _, program, _ = compiled
    summary = program.summary()
    assert json.loads((tmp / "s.json").read_text()) == summary
    with open(tmp / "csv" / "s.csv", newline="") as f:  # its directory created
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and list(rows[0]) == list(flat(summary))
    assert rows[0]["cycles"] == str(summary["cycles"])
    assert rows[0]["onchip_L1+UB_peak"] == str(program.stats["peak_l1_ub"])


def test_summary_figures_come_from_their_homes(compiled):
    _, _, program, result = compiled
    s = program.summary()
    stats, target = program.stats, program.target
    assert s["cycles"] == stats["predicted_makespan"] == result.makespan
    assert s["latency_us"] == pytest.approx(s["cycles"] / (target.clock_ghz * 1e3))
    assert s["inferences_per_s"] == pytest.approx(1e6 / s["latency_us"], rel=1e-6)
    assert s["roofline_efficiency"] == pytest.approx(stats["roofline"]["efficiency"], abs=1e-6)
    assert s["dram_read"] + s["dram_write"] == stats["roofline"]["ddr_bytes"]
    moved = sum(n for path, n in result.counters["bytes"].items() if "DDR" in path)
    assert s["dram_read"] + s["dram_write"] == moved  # as the interpreter counts it
    assert stats["energy_pj"] == pytest.approx(result.energy, rel=1e-9)  # codegen's = the run's
    assert s["energy_uj"] == round(stats["energy_pj"] * 1e-6, 6)
    assert set(s["onchip"]) == {*TIERS, "L1+UB"}
    for tier, row in s["onchip"].items():
        assert row["peak"] == stats["peak"].get(tier, 0) == result.peak.get(tier, 0)
        cap = target.memory.capacity(tier) if tier != "L1+UB" else sum(
            target.memory.capacity(t) for t in ("L1", "UB"))  # fmt: skip
        assert row["capacity"] == cap and 0 < row["peak"] <= cap
    assert s["onchip"]["L1+UB"]["peak"] == stats["peak_l1_ub"]
    assert s["host_segments"] == []


def test_a_reloaded_program_has_the_same_summary(compiled):
    tmp, _, program, _ = compiled
    loaded = npucc.load(tmp / "s.cmd")
    again = loaded.summary()
    summary = program.summary()
    assert again.pop("roofline_work") == "stream" and summary.pop("roofline_work") == "model"
    again.pop("roofline_efficiency"), summary.pop("roofline_efficiency")  # model vs stream work
    assert again == summary


def test_quiet_keeps_only_the_wrote_lines(tmp_path, capsys):
    out = tmp_path / "q.cmd"
    args = [str(SMALL_CNN), "-o", str(out), "--summary-json", str(tmp_path / "q.json")]
    assert main([*args, "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert [line.split()[:2] for line in captured.out.splitlines()] == [
        ["wrote", str(out)], ["wrote", str(tmp_path / "q.json")]
    ]  # fmt: skip


def test_summary_files_need_a_stream(tmp_path, capsys):
    args = [str(SMALL_CNN), "--emit", "graph", "--summary-csv", str(tmp_path / "x.csv")]
    assert main(args) == 2
    assert "--summary-csv needs a full compile" in capsys.readouterr().err


def test_host_segments_are_in_the_summary(tmp_path):
    nodes = [h.make_node("Sigmoid", ["x"], ["s"], name="sig"), h.make_node("Det", ["s"], ["d"],
             name="det"), h.make_node("Abs", ["d"], ["y"], name="abs")]  # fmt: skip
    graph = h.make_graph(
        nodes, "det", [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])],
    )  # fmt: skip
    program = npucc.compile(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]),
                            fallback="host")  # fmt: skip
    (seg,) = program.summary()["host_segments"]
    assert seg["op"] == "Det" and seg["node"] == "det"
    text = format_summary(program.summary())
    assert f"  host segment          Det at stream line {seg['line']} (node det)\n" in text
    program.save(tmp_path / "det.cmd")
    (again,) = npucc.load(tmp_path / "det.cmd").summary()["host_segments"]
    assert again == {"op": "Det", "line": seg["line"]}  # a bare stream names no node


def test_the_summary_of_a_stream_matches_its_lines(compiled):
    """The peak rows are what the stream's own alloc/free lines add up to, per core."""
    _, _, program, _ = compiled
    stream = parse_stream(program.stream)
    live: dict[str, int] = {}
    peak: dict[str, int] = {}
    for line in stream.cores[0].lines:
        if line.queue in ("alloc", "free"):
            tier, size = line.instr.tier, line.instr.size
            live[tier] = live.get(tier, 0) + (size if line.queue == "alloc" else -size)
            peak[tier] = max(peak.get(tier, 0), live[tier])
    assert {t: program.summary()["onchip"][t]["peak"] for t in peak} == peak
