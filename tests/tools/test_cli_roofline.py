"""The roofline and the per-layer table where the command line and the report show them."""

from __future__ import annotations

import csv
from pathlib import Path

from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
RESIDUAL = ROOT / "models" / "residual_block.onnx"


def test_compile_run_check_and_report_show_the_roofline(tmp_path, capsys):
    out, table = tmp_path / "rb.cmd", tmp_path / "rb.csv"
    assert main([str(RESIDUAL), "-o", str(out), "--perf-csv", str(table), "--quiet"]) == 0
    compiled = capsys.readouterr().out
    assert "roofline efficiency 0." in compiled.splitlines()[0]
    rows = list(csv.DictReader(table.open()))
    assert [r["name"] for r in rows][:3] == ["bn0.mul", "bn0", "conv1"]
    assert rows[2]["op"] == "conv2d" and int(rows[2]["macs"]) == 64 * 64 * 9 * 16
    assert main(["run", str(out), "--timing-only", "--quiet"]) == 0
    ran = capsys.readouterr().out
    assert "roofline efficiency 0." in ran and "the minimum" in ran
    assert main(["check", str(RESIDUAL), "--quiet"]) == 0
    checked = capsys.readouterr().out
    assert "roofline efficiency 0." in checked
    # on this model the stream's own work equals the model's: the same line
    assert [s for s in ran.splitlines() if s.startswith("roofline")][0].startswith(
        [s for s in checked.splitlines() if s.startswith("roofline")][0]
    )
    page_dir = tmp_path / "report"
    assert main(["report", str(out), "-o", str(page_dir), "--perf-csv", str(table)]) == 0
    page = (page_dir / "index.html").read_text()
    assert "<h2>Roofline</h2>" in page and "<h2>Layers</h2>" in page
    assert "<td>conv1</td>" in page


def test_report_with_an_unreadable_table_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "rb.cmd"
    assert main([str(RESIDUAL), "-o", str(out), "--quiet"]) == 0
    missing = tmp_path / "none.csv"
    assert main(["report", str(out), "-o", str(tmp_path / "r"), "--perf-csv", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("npucc: error: cannot read the per-layer table") and err.count("\n") == 1


def test_perf_csv_needs_a_full_compile(tmp_path, capsys):
    table = tmp_path / "t.csv"
    assert main([str(RESIDUAL), "--emit", "tiled", "--perf-csv", str(table), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("npucc: error: --perf-csv needs a full compile")
    assert not table.exists()
