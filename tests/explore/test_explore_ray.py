"""A 48-point sweep on a local Ray instance: rerun computes nothing, 1 and 2 workers agree."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from npucc.explore import load_sweep, read_rows, run_sweep, summary
from npucc.explore.results import TIMING
from npucc.tools import explore_command as command

SWEEP48 = Path(__file__).with_name("sweep48.toml")


def _explore(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="npucc")
    command.add_parser(parser.add_subparsers(dest="command"))
    return command.main(parser.parse_args(["explore", *argv]))


def _without_timing(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def test_48_point_sweep_resumes_and_is_identical_with_1_and_2_workers(tmp_path, capsys):
    one, two = tmp_path / "one", tmp_path / "two"
    assert _explore(str(SWEEP48), "-o", str(one), "--max-parallel", "1") == 0
    assert capsys.readouterr().out.startswith("48 points: 48 computed (0 not ok), 0 already")
    header, rows = read_rows(one / "results.csv")
    assert len(rows) == 48 and all(r["status"] == "ok" for r in rows)
    assert (one / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (one / "report.html").read_text()
    assert '<img src="pareto.png"' in page and page.count("<h2>Pareto front:") == 2

    assert _explore(str(SWEEP48), "-o", str(one), "--max-parallel", "1") == 0
    assert capsys.readouterr().out.startswith("48 points: 0 computed (0 not ok), 48 already")
    assert read_rows(one / "results.csv") == (header, rows)

    sweep = load_sweep(SWEEP48)
    written: list[dict[str, str]] = []

    def interrupt_after_10(row: dict[str, str]) -> None:
        written.append(row)
        if len(written) == 10:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, two, max_parallel=2, on_row=interrupt_after_10)
    assert read_rows(two / "results.csv")[1] == written
    run = run_sweep(sweep, two, max_parallel=2)
    assert (run.points, run.skipped, run.computed, run.failed) == (48, 10, 38, 0)
    header2, rows2 = read_rows(two / "results.csv")
    assert header2 == header and _without_timing(rows2) == _without_timing(rows)
    assert summary(header2, rows2) == summary(header, rows)
