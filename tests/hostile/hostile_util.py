"""Helpers of the hostile-input tests: run the real CLI, build small models and targets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
PRESET = ROOT / "npucc" / "target" / "presets" / "davinci-core.toml"


def npucc(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -m npucc ARGS` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "npucc", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=300,
    )


def assert_clean_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit code 2 and exactly one stderr line `npucc: error: ...` holding every fragment."""
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("npucc: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int | str]],
    outputs: list[str] | dict[str, list[int]],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    opsets: dict[str, int] | None = None,
) -> onnx.ModelProto:
    """A float32 model; output shapes not given are inferred when ONNX can infer them."""
    shapes = outputs if isinstance(outputs, dict) else dict.fromkeys(outputs)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        list(inits),
    )
    opset_imports = [helper.make_opsetid(d, v) for d, v in (opsets or {"": 17}).items()]
    m = helper.make_model(graph, opset_imports=opset_imports)
    m.ir_version = 8
    try:
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)
    except onnx.shape_inference.InferenceError:
        return m


def target(path: Path, **memory: int) -> Path:
    """Write davinci-core with some [memory] entries replaced; returns the TOML path."""
    lines = []
    for line in PRESET.read_text().splitlines():
        key = line.split("=")[0].strip()
        lines.append(f"{key} = {memory[key]}" if key in memory else line)
    path.write_text("\n".join(lines) + "\n")
    return path
