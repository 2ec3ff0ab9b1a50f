"""Every reference model compiles to byte-identical output whatever the hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_util import MODELS

SHAPES = {"mlp.onnx": ["--input-shape", "x=2x64"]}
SEEDS = ("0", "1", "4242")


@pytest.mark.parametrize("name", sorted(p.name for p in MODELS.glob("*.onnx")))
def test_three_hash_seeds_give_identical_bytes(tmp_path, name):
    _check_identical(tmp_path, [MODELS / name, *SHAPES.get(name, [])])


@pytest.mark.parametrize("name", ["residual_block.onnx", "lrn_concat.onnx"])
def test_mesh_plans_and_streams_are_identical_whatever_the_hash_seed(tmp_path, name):
    """HyperCut (KaHyPar, beam search, execution estimate) and the mesh lowering."""
    _check_identical(tmp_path, [MODELS / name, "--target", "mesh8x8", "--beam-width", "16"])


def _check_identical(tmp_path, cli_args):
    runs = []
    for seed in SEEDS:  # the three compiles run side by side
        out = tmp_path / f"seed{seed}.cmd"
        args = [sys.executable, "-m", "npucc", *cli_args, "-o", out]
        env = {**os.environ, "PYTHONHASHSEED": seed}
        runs.append((out, subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)))
    outputs = []
    for out, proc in runs:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        outputs.append((out.read_bytes(), Path(f"{out}.bin").read_bytes()))
    assert outputs[0] == outputs[1] == outputs[2]
