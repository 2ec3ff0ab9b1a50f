"""End to end: compile, interpret and compare with onnxruntime; makespan predicted = executed."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from apart import run_apart

import npucc
from npucc.checking import (
    compare,
    model_file,
    random_inputs,
    randomize_weights,
    run_onnxruntime,
)
from npucc.frontend.onnx_import import load_model
from npucc.gcpause import release_memory

ROOT = Path(__file__).resolve().parents[2]
MODELS = sorted((ROOT / "models").glob("*.onnx"))
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# symbolic dimensions of the shipped models, fixed the way a user would on the command line
INPUT_SHAPES = {"mlp.onnx": {"x": (2, 64)}}


def check_model(
    make: Callable[[], onnx.ModelProto],
    schedule: str = "original",
    seed: int = 0,
    target: str = "davinci-core",
    beam_width: int = 256,
) -> None:
    """Compile the model `make()` returns, run it on seeded inputs, compare with onnxruntime.

    The model is written to a file (`model_file`) and not held in memory: the compile drops it
    after import and onnxruntime maps its weights (VGG-19's are 548 MB).
    """
    with tempfile.TemporaryDirectory(prefix="npucc-check-") as folder:
        path = model_file(make(), folder)
        program = npucc.compile(path, target, schedule, beam_width=beam_width)
        inputs = random_inputs(program.inputs, seed)
        release_memory()  # NOTE: what the compile freed goes back to the OS before the run
        result = program.execute(inputs)
        outputs, makespan = result.outputs, result.makespan
        predicted = program.stats["predicted_makespan"]
        del program, result  # NOTE: the program's image and the run's memories are freed
        release_memory()  # and given back to the OS before onnxruntime loads the weights
        reference = run_onnxruntime(path, inputs)
    for c in compare(outputs, reference):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
    assert makespan == predicted


def _check_light(name: str, target: str, beam_width: int) -> None:
    """`check_model` of the light zoo model `name` with seeded random weights."""
    check_model(
        lambda: randomize_weights(load_model(LIGHT / f"light_{name}.onnx"), seed=0),
        target=target,
        beam_width=beam_width,
    )


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_shipped_model(path: Path) -> None:
    check_model(lambda: load_model(path, INPUT_SHAPES.get(path.name)))


# DenseNet-121, ShuffleNet and ZFNet-512 (the slowest to interpret) run in `npucc conformance`
@pytest.mark.xdist_group("whole-model")  # one whole network at a time (tests/conftest.py)
@pytest.mark.parametrize(
    "name", ["squeezenet", "bvlc_alexnet", "resnet50", "vgg19", "inception_v1", "inception_v2"]
)
def test_light_zoo_model_with_random_weights(name: str) -> None:
    run_apart(_check_light, name, "davinci-core", 256)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_shipped_model_on_a_mesh(path: Path) -> None:
    """Layer-sequential over 64 cores: tiles spread round-robin, DDR handoffs synchronised."""
    check_model(
        lambda: load_model(path, INPUT_SHAPES.get(path.name)), target="mesh8x8", beam_width=8
    )


@pytest.mark.xdist_group("whole-model")  # one whole network at a time (tests/conftest.py)
def test_resnet50_on_a_mesh_with_random_weights() -> None:
    """Issue 4's acceptance model: HyperCut plan (narrow beam), 64 cores, numerics checked."""
    run_apart(_check_light, "resnet50", "mesh8x8", 8)
