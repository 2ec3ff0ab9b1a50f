import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import npucc

MODELS = {
    "small_cnn": None,
    "residual_block": None,
    "lrn_concat": None,
    "mlp": {"x": (2, 64)},
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dan_compiled_model_matches_onnxruntime(name):
    path = f"models/{name}.onnx"
    shapes = MODELS[name]
    program = npucc.compile(path, schedule="dan", input_shapes=shapes)
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(s).astype(np.float32) for n, s in program.inputs.items()}
    result = program.execute(inputs)
    assert result.makespan == program.stats["predicted_makespan"]
    model = onnx.load(path)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, inputs)
    for out, expect in zip(program.outputs, ref, strict=True):
        np.testing.assert_allclose(result.outputs[out], expect, rtol=1e-4, atol=1e-4)


def test_dan_never_slower_than_original_on_models():
    for name, shapes in sorted(MODELS.items()):
        path = f"models/{name}.onnx"
        dan = npucc.compile(path, schedule="dan", input_shapes=shapes)
        orig = npucc.compile(path, schedule="original", input_shapes=shapes)
        assert dan.stats["predicted_makespan"] <= orig.stats["predicted_makespan"], name


def test_dan_schedules_an_empty_core():
    """A model that only reshapes leaves the core's DAG empty; DAN returns an empty schedule."""
    from npucc.backend.schedule.registry import schedule_graph
    from npucc.ir.tiled import TileGraph
    from npucc.target.cost import TraceSpillModel

    schedule, replay = schedule_graph(TileGraph("empty"), "dan", {"L1": 4096}, TraceSpillModel())
    assert schedule.order == [] and replay.makespan == 0


def test_overlap_peak_bounds_dan_live_bytes_by_the_plans_peak():
    """`overlap_peak=1` (the default): DAN overlaps layers only within its plan's L1+UB peak,
    below the original schedule's here; inf may hold more live bytes, and runs no slower."""
    path = "models/decoder_block.onnx"
    free = npucc.compile(path, overlap_peak=math.inf)
    kept = npucc.compile(path)
    orig = npucc.compile(path, schedule="original")
    assert kept.stats["peak_l1_ub"] <= orig.stats["peak_l1_ub"] < free.stats["peak_l1_ub"]
    assert free.stats["predicted_makespan"] <= kept.stats["predicted_makespan"]
    assert kept.stats["predicted_makespan"] < orig.stats["predicted_makespan"]
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(s).astype(np.float32) for n, s in kept.inputs.items()}
    assert kept.execute(inputs).makespan == kept.stats["predicted_makespan"]
    with pytest.raises(npucc.NpuccError, match="overlap_peak must be at least 1"):
        npucc.compile(path, overlap_peak=0.5)
