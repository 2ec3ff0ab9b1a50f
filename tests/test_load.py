"""The deployment API: compile once, save, and `npucc.load` the stream later without compiling."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import npucc
from npucc.errors import NpuccError

ROOT = Path(__file__).resolve().parents[1]

RELOAD = """
import sys
import numpy as np
import npucc
import npucc.passes

npucc.passes.PassManager.run = lambda *args: sys.exit("no pass may run: load compiles nothing")
program = npucc.load(sys.argv[1])
x = np.load(sys.argv[2])
for name, value in program.run({"input": x}).items():
    np.save(f"{sys.argv[3]}/{name}.npy", value)
print(program.inputs, program.outputs)
"""


def test_a_saved_program_reloads_in_a_fresh_process_with_identical_outputs(tmp_path):
    program = npucc.compile(ROOT / "models" / "small_cnn.onnx")
    out = tmp_path / "deploy" / "cnn.cmd"
    out.parent.mkdir()
    program.save(out)
    x = np.random.default_rng(0).standard_normal(program.inputs["input"]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    expected = program.run({"input": x})
    proc = subprocess.run(
        [sys.executable, "-c", RELOAD, str(out), str(tmp_path / "x.npy"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "{'input': TensorSpec((1, 3, 32, 32), 'float32')} {'probs': TensorSpec((1, 10), 'float32')}"
    )
    for name, value in expected.items():
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), value)


def test_load_gives_names_shapes_and_dtypes(tmp_path):
    program = npucc.compile(ROOT / "models" / "small_cnn.onnx")
    program.save(tmp_path / "o.cmd")
    loaded = npucc.load(tmp_path / "o.cmd")
    assert loaded.stream == program.stream and loaded.image == program.image
    assert loaded.inputs == program.inputs == {"input": (1, 3, 32, 32)}
    spec = loaded.inputs["input"]
    assert spec.shape == (1, 3, 32, 32) and spec.dtype == np.float32
    assert loaded.outputs["probs"].dtype == np.float32 and loaded.target == program.target
    assert loaded.stats["image_bytes"] == len(program.image)


def test_load_checks_the_image_sha256(tmp_path):
    program = npucc.compile(ROOT / "models" / "small_cnn.onnx")
    program.save(tmp_path / "o.cmd")
    image = tmp_path / "o.cmd.bin"
    image.write_bytes(image.read_bytes()[:-1] + b"\x7f")
    with pytest.raises(NpuccError, match=r"o\.cmd\.bin: sha256 differs from the stream header"):
        npucc.load(tmp_path / "o.cmd")
    image.unlink()
    with pytest.raises(NpuccError, match="cannot read image"):
        npucc.load(tmp_path / "o.cmd")


def test_a_program_hashes_only_an_image_it_did_not_check(tmp_path):
    program = npucc.compile(ROOT / "models" / "small_cnn.onnx")
    program.save(tmp_path / "o.cmd")
    x = {"input": np.zeros(program.inputs["input"], np.float32)}
    program.run(x)  # the compile's own image: checked when codegen hashed it
    changed = program.image[:-1] + bytes([program.image[-1] ^ 1])
    loaded = npucc.load(tmp_path / "o.cmd")
    for other in (replace(program, image=changed), program, loaded):
        other.image = changed
        with pytest.raises(NpuccError, match=r"image: sha256 differs from the stream header"):
            other.run(x)


def test_a_program_hashes_its_image_again_when_its_stream_is_replaced():
    program = npucc.compile(ROOT / "models" / "small_cnn.onnx")
    x = {"input": np.zeros(program.inputs["input"], np.float32)}
    sha = hashlib.sha256(program.image).hexdigest()
    # the image stays the one checked, against a header that names another sha256
    program.stream = program.stream.replace(sha, "0" * 64, 1)
    with pytest.raises(NpuccError, match=r"image: sha256 differs from the stream header"):
        program.run(x)
