"""On-chip handoff over the NoC on a mesh: numerics, predicted = interpreted, DRAM vs NoC."""

from __future__ import annotations

from pathlib import Path

import pytest

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.frontend.onnx_import import load_model
from npucc.ir.stream_parse import parse_stream
from npucc.target import load_target, target_from_dict

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "residual_block.onnx"


def _no_buffer(tmp_path: Path) -> Path:
    """mesh8x8 without its on-chip buffer (every tensor through DDR), as a TOML file."""
    data = load_target("mesh8x8").to_dict()
    del data["mesh"]["onchip_buffer"]
    target_from_dict(data)  # still a valid target
    lines = []
    for section, table in data.items():
        lines.append(f"[{section}]")
        for key, value in table.items():
            if isinstance(value, dict):
                inner = ", ".join(
                    f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v}" for k, v in value.items()
                )
                lines.append(f"{key} = {{ {inner} }}")
            elif isinstance(value, str):
                lines.append(f'{key} = "{value}"')
            else:
                lines.append(f"{key} = {value}")
    path = tmp_path / "mesh8x8-ddr.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """residual_block on mesh8x8 with and without the on-chip buffer: programs and runs."""
    model = load_model(MODEL)
    out = {}
    for name, target in (
        ("noc", "mesh8x8"),
        ("ddr", str(_no_buffer(tmp_path_factory.mktemp("t")))),
    ):
        program = npucc.compile(model, target, beam_width=8)
        inputs = random_inputs(program.inputs, 0)
        out[name] = (program, inputs, program.execute(inputs))
    return model, out


def test_onchip_tensors_match_onnxruntime_and_the_prediction(runs):
    model, out = runs
    program, inputs, result = out["noc"]
    stream = parse_stream(program.stream, "<program>")
    onchip = [t for t in stream.tensors.values() if t.kind == "onchip"]
    assert onchip, "the plan keeps no tensor on chip"
    assert " noc dst=NOC[" in program.stream and " src=NOC[" in program.stream
    for c in compare(result.outputs, run_onnxruntime(model, inputs)):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
    assert result.makespan == program.stats["predicted_makespan"]


def test_dram_bytes_drop_and_noc_byte_hops_appear(runs):
    _, out = runs
    noc, ddr = out["noc"][2], out["ddr"][2]

    def dram(result):
        return sum(n for path, n in result.counters["bytes"].items() if "DDR" in path)

    assert "NOC" not in out["ddr"][0].stream.split("\ncore ", 1)[0]
    assert ddr.counters["noc_byte_hops"] == 0
    assert noc.counters["noc_byte_hops"] > 0
    assert dram(noc) < dram(ddr)
    assert noc.energy < ddr.energy


def test_one_core_keeps_every_tensor_in_ddr():
    program = npucc.compile(load_model(MODEL), "davinci-core")
    assert "NOC" not in program.stream and "onchip" not in program.stream
