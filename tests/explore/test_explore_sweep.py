"""Sweep files, points, results files, Pareto fronts and single points, without Ray."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from npucc.errors import NpuccError
from npucc.explore import load_sweep, pareto_front, read_rows, summary
from npucc.explore.point import evaluate
from npucc.explore.results import METRICS, ResultsFile, columns
from npucc.explore.runner import make_row
from npucc.interp import run_stream
from npucc.ir.stream_parse import parse_stream
from npucc.target import load_target
from npucc.tools import explore_command as command

ROOT = Path(__file__).resolve().parents[2]
SWEEP48 = Path(__file__).with_name("sweep48.toml")
HEAD = f"""
[sweep]
target = "davinci-core"

[[models]]
path = "{ROOT / "models" / "small_cnn.onnx"}"
"""


def _sweep(tmp_path: Path, text: str):
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return load_sweep(path)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="npucc")
    command.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_test_sweep_spans_48_points_with_distinct_keys():
    sweep = load_sweep(SWEEP48)
    assert [m.name for m in sweep.models] == ["small_cnn", "mlp"]
    assert sweep.models[1].input_shapes == {"x": (1, 64)}
    assert [a.key for a in sweep.axes] == [
        "memory.L0A",
        "cube.m0",
        "dma.DDR_L1.bandwidth",
        "mesh.rows",
    ]
    points = sweep.points()
    assert len(points) == 48 and len({p.key for p in points}) == 48
    assert points[0].params == {
        "memory.L0A": 16384,
        "cube.m0": 16,
        "dma.DDR_L1.bandwidth": 32,
        "mesh.rows": 1,
    }
    assert points[1].target["mesh"]["rows"] == 2
    assert points[5].target["dma"]["DDR_L1"]["bandwidth"] == 128
    assert [p.key for p in load_sweep(SWEEP48).points()] == [p.key for p in points]
    checked = sweep.points(check=True)
    assert all(a.key != b.key for a, b in zip(points, checked, strict=True))


def test_nested_axis_tables_options_sampling_and_constraints(tmp_path):
    sweep = _sweep(
        tmp_path,
        HEAD
        + """
[axes]
memory.L1 = [262144, 524288, 1048576]
schedule = ["original"]
[axes.cube]
m0 = [16, 32]

[constraints]
max_sram = 1500000
""",
    )
    assert [a.key for a in sweep.axes] == ["memory.L1", "schedule", "cube.m0"]
    configs = sweep.configurations()
    assert [c["memory.L1"] for c in configs] == [262144, 262144, 524288, 524288]
    axes = '[axes]\n"memory.L1" = [1024, 2048, 4096, 8192, 16384]\n"cube.k0" = [4, 8]\n'
    assert len(_sweep(tmp_path, HEAD + axes).configurations()) == 10
    text = HEAD.replace('target = "davinci-core"', 'target = "davinci-core"\nsample = 4\nseed = 7')
    a = _sweep(tmp_path, text + axes).configurations()
    b = _sweep(tmp_path, text + axes).configurations()
    assert a == b and len(a) == 4
    assert a != _sweep(tmp_path, text.replace("seed = 7", "seed = 8") + axes).configurations()
    macs = _sweep(tmp_path, HEAD + '[axes]\n"cube.n0" = [16, 32]\n[constraints]\nmax_macs = 2048\n')
    assert macs.configurations() == [{"cube.n0": 16}]


@pytest.mark.parametrize(
    "text, message",
    [
        ("[axes]\n", "key 'axes' must name at least one axis"),
        ('[axes]\n"memory.L9" = [1]\n', "unknown key 'axes.memory.L9'"),
        ('[axes]\n"memory" = [1]\n', "unknown key 'axes.memory'"),
        ('[axes]\n"memory.L1" = []\n', "key 'axes.memory.L1' must be a non-empty array"),
        ('[axes]\n"memory.L1" = [1, 1]\n', "key 'axes.memory.L1' repeats a value"),
        ('[axes]\n"memory.L1" = [0]\n', "key 'memory.L1' must be positive"),
        ('[axes]\n"cube.m0" = ["x"]\n', "key 'cube.m0' must be int, got 'x'"),
        ('[axes]\n"mesh.rows" = [0]\n', "key 'axes.mesh.rows' must list positive integers"),
        ('[axes]\nschedule = ["fast"]\n', "key 'axes.schedule': unknown scheduler 'fast'"),
        ('[axes]\n"cube.m0" = [16]\n[extra]\n', "unknown section '[extra]'"),
        ('[axes]\n"cube.m0" = [16]\n[constraints]\nmax_area = 1\n', "'constraints.max_area'"),
        (
            '[axes]\n"cube.m0" = [16]\n[constraints]\nmax_sram = -1\n',
            "key 'constraints.max_sram' must be an integer >= 0",
        ),
    ],
)
def test_bad_sweep_files_name_the_key(tmp_path, text, message):
    with pytest.raises(NpuccError, match=re.escape(message)) as info:
        _sweep(tmp_path, HEAD + text)
    assert "sweep.toml" in str(info.value)


def test_bad_models_and_sampling_name_the_key(tmp_path):
    head = '[sweep]\ntarget = "davinci-core"\n'
    axes = '[axes]\n"cube.m0" = [16, 32]\n'
    cases = [
        (head + axes, "key 'models' must be a non-empty array"),
        (head + '[[models]]\npath = "nope.onnx"\n' + axes, "key 'models[0].path': cannot read"),
        (
            HEAD + '[models.input_shapes]\ninput = "1x3xA"\n' + axes,
            "key 'models[0].input_shapes.input' must be like",
        ),
        (HEAD + HEAD.split("\n", 3)[3] + axes, "model name 'small_cnn' is used twice"),
        (HEAD.replace("davinci-core", "nope.toml") + axes, "target file not found"),
        (HEAD.replace('target = "davinci-core"', "sample = 3") + axes, "asks for 3 config"),
        (HEAD.replace('target = "davinci-core"', "seed = -1") + axes, "'sweep.seed'"),
        (HEAD + axes + "[sweep]\n", "invalid TOML"),
    ]
    for text, message in cases:
        path = tmp_path / "sweep.toml"
        path.write_text(text)
        with pytest.raises(NpuccError, match=re.escape(message)):
            load_sweep(path).configurations()


def test_a_failed_point_records_its_error():
    data = (ROOT / "models" / "mlp.onnx").read_bytes()
    target = load_target("davinci-core").to_dict()
    options = {"schedule": "original", "input_shapes": {}, "check": False}
    metrics = evaluate(data, target, options)
    assert metrics["status"] == "error" and "symbolic dimension 'batch'" in metrics["error"]
    ok = evaluate(data, target, {**options, "input_shapes": {"x": [1, 64]}})
    assert ok["status"] == "ok" and ok["latency_cycles"] > 0 and ok["energy_pj"] > 0
    checked = evaluate(data, target, {**options, "input_shapes": {"x": [1, 64]}, "check": True})
    assert checked["status"] == "ok"
    assert (checked["latency_cycles"], checked["energy_pj"]) == (
        ok["latency_cycles"],
        ok["energy_pj"],
    )
    point = load_sweep(SWEEP48).points()[0]
    row = make_row(point, metrics)
    assert row["status"] == "error" and row["latency_us"] == "" and row["sram_bytes"] != ""
    assert set(row) == set(columns(list(point.params)))


def test_timing_only_times_like_a_full_run():
    import npucc
    from npucc.checking import random_inputs

    program = npucc.compile(ROOT / "models" / "small_cnn.onnx", target="davinci-core")
    stream = parse_stream(program.stream, "<test>")
    inputs = random_inputs(program.inputs)
    full = run_stream(stream, program.image, inputs)
    timed = run_stream(stream, program.image, inputs, timing_only=True)
    assert (timed.makespan, timed.energy, timed.pipe_cycles, timed.counters) == (
        full.makespan,
        full.energy,
        full.pipe_cycles,
        full.counters,
    )


def _row(model: str, lat: float, energy: float, sram: int = 1, status: str = "ok") -> dict:
    row = dict.fromkeys(columns(["cube.m0"]), "")
    row.update(key=f"{model}{lat}{energy}{sram}", model=model, status=status, macs="8")
    row.update(latency_us=repr(lat), energy_uj=repr(energy), edp_uj_us=repr(lat * energy))
    row.update({"cube.m0": "16", "sram_bytes": str(sram)})
    return row


def test_pareto_front_per_model_and_summary_table():
    rows = [
        _row("a", 3.0, 1.0),
        _row("a", 1.0, 3.0),
        _row("a", 2.0, 2.0),
        _row("a", 2.0, 2.5),  # dominated
        _row("a", 1.0, 3.0 + 1e-14, sram=0),  # equal up to summation order, less SRAM
        _row("a", 0.5, 0.5, status="error"),
        _row("b", 5.0, 5.0),
    ]
    fronts = pareto_front(rows)
    assert [(r["latency_us"], r["sram_bytes"]) for r in fronts["a"]] == [
        ("1.0", "0"),
        ("2.0", "1"),
        ("3.0", "1"),
    ]
    assert [r["latency_us"] for r in fronts["b"]] == ["5.0"]
    text = summary(columns(["cube.m0"]), rows)
    lines = text.splitlines()
    assert lines[0] == "7 points (1 error, 6 ok)"
    assert lines[2].split() == ["model", "cube.m0", "latency_us", "energy_uj", "edp_uj_us",
                                "sram_bytes", "macs"]  # fmt: skip
    assert len(lines) == 3 + 4 and lines[-1].split()[:3] == ["b", "16", "5"]


def test_results_file_resumes_drops_a_torn_line_and_refuses_other_columns(tmp_path):
    header = columns(["cube.m0"])
    results = ResultsFile.open(tmp_path, header)
    results.append(_row("a", 1.0, 2.0))
    results.append(_row("a", 2.0, 1.0))
    results.close()
    path = tmp_path / "results.csv"
    with path.open("a") as f:
        f.write("torn,a,16")
    again = ResultsFile.open(tmp_path, header)
    assert len(again.rows) == 2 and again.keys() == {"a1.02.01", "a2.01.01"}
    again.close(order=["a2.01.01", "a1.02.01"])
    assert [r["key"] for r in read_rows(path)[1]] == ["a2.01.01", "a1.02.01"]
    with pytest.raises(NpuccError, match="other columns"):
        ResultsFile.open(tmp_path, columns(["cube.n0"]))
    (tmp_path / "bad.csv").write_text("a,b\n")
    with pytest.raises(NpuccError, match="not a results file"):
        read_rows(tmp_path / "bad.csv")
    assert set(METRICS) < set(header)


def test_summary_command_and_argument_errors(tmp_path, capsys):
    results = ResultsFile.open(tmp_path, columns(["cube.m0"]))
    results.append(_row("a", 1.0, 2.0))
    results.close()
    assert command.main(_parse(["explore", "--summary", str(tmp_path)])) == 0
    assert capsys.readouterr().out.startswith("1 points (1 ok)\nPareto front")
    for argv, message in [
        (["explore", "--summary", str(tmp_path), "-o", "x"], "takes no sweep file"),
        (["explore", str(SWEEP48)], "needs a sweep file and -o"),
        (["explore", str(SWEEP48), "-o", "x", "--max-parallel", "0"], "at least 1"),
        (["explore", "--summary", str(tmp_path / "none")], "no results file"),
    ]:
        with pytest.raises(NpuccError, match=message):
            command.main(_parse(argv))


def test_without_ray_explore_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(NpuccError) as info:
        command.main(_parse(["explore", str(SWEEP48), "-o", str(tmp_path)]))
    assert info.value.exit_code == 2
    assert 'pip install "npucc[explore]"' in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "results.csv").exists()
