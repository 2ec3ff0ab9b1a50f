"""--fallback host end to end: models npucc refuses today pass `npucc check` with host segments."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from host_models import det_model, fastgelu_model

import npucc
from npucc.codegen.debug_map import trace_line
from npucc.errors import NpuccError
from npucc.tools.cli import main


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """The two models, saved."""
    folder = tmp_path_factory.mktemp("host")
    paths = {}
    for name, model in (("det", det_model()), ("fastgelu", fastgelu_model())):
        paths[name] = str(folder / f"{name}.onnx")
        onnx.save(model, paths[name])
    return paths


@pytest.mark.parametrize("name", ["det", "fastgelu"])
def test_refused_by_default_with_todays_message(models, name):
    with pytest.raises(NpuccError, match="unsupported operator (Det|com.microsoft.FastGelu)"):
        npucc.compile(models[name])


@pytest.mark.parametrize(
    ("name", "target"),
    [("det", "davinci-core"), ("fastgelu", "davinci-core"), ("det", "mesh8x8")],
)
def test_check_passes_with_host_segments(models, name, target, capsys):
    assert main(["check", models[name], "--fallback", "host", "--target", target, "--quiet"]) == 0
    out = capsys.readouterr().out
    op = "Det" if name == "det" else "com.microsoft.FastGelu"
    assert f"({op}) at stream line" in out and "PASS" in out
    interpreted, predicted = (int(w) for w in out.split("interpreted ")[1].split()[::3][:2])
    assert interpreted == predicted


def test_outputs_after_the_host_segment_match_onnxruntime_on_a_mesh(models):
    program = npucc.compile(models["det"], target="mesh8x8", fallback="host")
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    result = program.execute({"x": x})
    ref = ort.InferenceSession(models["det"], providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(result.outputs["y"], ref[0], rtol=1e-4, atol=1e-4)
    assert np.abs(ref[0]).max() > 1  # not a vacuous comparison
    lines = program.stream.splitlines()
    (host,) = [n for n, line in enumerate(lines) if line.startswith("  HOST host ")]
    cores = [line for line in lines[:host] if line.startswith("core ")]
    assert cores == ["core 0 0"]  # the host queue is core 0,0's
    # core 0,0 imports the host's input after another core's writes (a flag from that core)
    # and closes the host's output for a reader on another core (a flag to it)
    # (the schedule may put other events of core 0,0 between that barrier and the segment)
    before = next(line for line in reversed(lines[:host]) if "barrier" in line and "host#" in line)
    after = lines[host + 1]
    assert "set ctrl>host#" in before and re.search(r"wait ctrl@\d+,\d+>ctrl#", before)
    assert "wait host>ctrl#" in after and re.search(r"set ctrl>ctrl@\d+,\d+#", after)
    assert result.pipe_cycles["HOST"] > 20_000  # HOST_LATENCY_US at 1 GHz, plus the bytes


def test_a_host_segment_on_a_mesh_maps_to_its_line(models, tmp_path):
    program = npucc.compile(
        models["det"], target="mesh8x8", fallback="host", debug_map=tmp_path / "d.json"
    )
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["nodes"]["det"]["status"] == "host"
    (line,) = [s["line"] for s in program.stats["host_segments"]]
    assert trace_line(data, line) == ("det", ["det"])
    assert data["layers"]["det"]["cores"]["0,0"]["ops"] == {"BARRIER": 2, "HOST": 1}
    conv_cores = data["layers"]["conv"]["cores"]
    assert len(conv_cores) > 1  # the conv ran on several cores of the mesh


def test_host_record_names_operator_attributes_and_ddr_operands(models):
    program = npucc.compile(models["fastgelu"], fallback="host")
    (line,) = [x for x in program.stream.splitlines() if x.startswith("  HOST ")]
    node = json.loads(line.split("node=")[1].split(" ")[0])
    assert (node["op"], node["domain"], node["version"], node["opset"]) == (
        "FastGelu", "com.microsoft", 1, 17,
    )  # fmt: skip
    assert " in0=DDR[" in line and " in1=DDR[" in line and " out0=DDR[" in line
    assert "in0_type=f32[1,8,32]" in line and "in1_type=f32[32]" in line  # the bias: a const
    segments = program.stats["host_segments"]
    assert [(s["node"], s["op"]) for s in segments] == [("gelu", "com.microsoft.FastGelu")]
    assert program.stream.splitlines()[segments[0]["line"] - 1] == line


def test_inspect_lists_the_host_segments(models, capsys):
    assert main(["inspect", models["det"], "--fallback", "host"]) == 0
    out = capsys.readouterr().out
    assert "host segments (1, run by onnxruntime):\n  node 'det' (Det)" in out
    assert main(["inspect", models["fastgelu"], "--fallback", "host", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["host_segments"][0]["name"] == "gelu" and info["compile_error"] is None
    assert [n["status"] for n in info["nodes"]] == ["lowers", "host", "lowers"]
    assert main(["inspect", models["det"]]) == 0  # without it: refused, as today
    assert re.search(r"\n  Det +1  refuses", capsys.readouterr().out)


def test_saved_stream_with_a_host_record_reloads_and_runs(models, tmp_path):
    program = npucc.compile(models["fastgelu"], fallback="host")
    program.save(tmp_path / "g.cmd")
    again = npucc.load(tmp_path / "g.cmd")
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    np.testing.assert_array_equal(again.run({"x": x})["y"], program.run({"x": x})["y"])
