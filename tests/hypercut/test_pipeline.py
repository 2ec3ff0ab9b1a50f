"""The `hypercut` pass inside the compiler: deterministic plans and command streams."""

from pathlib import Path

import npucc

MODEL = Path(__file__).parents[2] / "models" / "residual_block.onnx"


def test_fixed_seed_identical_streams():
    a = npucc.compile(MODEL, "mesh8x8", search="hypercut", beam_width=4)
    b = npucc.compile(MODEL, "mesh8x8", search="hypercut", beam_width=4)
    assert a.stream == b.stream and a.image == b.image
    assert a.stats["hypercut"] == {
        **b.stats["hypercut"],
        "search_s": a.stats["hypercut"]["search_s"],
    }
    assert a.stats["hypercut"]["latency_cycles"] > 0
