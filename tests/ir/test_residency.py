"""Peak residency, the one definition (npucc.ir.residency): along the schedule order."""

from __future__ import annotations

from pathlib import Path

import npucc
from npucc.ir.residency import Residency, core_series, merge_peaks, stream_residency
from npucc.ir.stream_parse import parse_stream

ROOT = Path(__file__).resolve().parents[2]


def test_residency_counts_allocs_and_frees_per_tier_and_l1_ub():
    res = Residency()
    res.alloc("L1", 100)
    res.alloc("UB", 50)  # L1+UB 150
    res.free("L1", 100)
    res.alloc("L0A", 30)  # not an L1+UB tier
    res.alloc("UB", 70)  # UB 120, L1+UB 120
    assert res.peaks == {"L1": 100, "UB": 120, "L1+UB": 150, "L0A": 30}
    assert res.peak == 150 and res.combined == 120 and res.live["L1"] == 0
    assert merge_peaks([{"L1": 5, "UB": 9}, {"L1": 7}]) == {"L1": 7, "UB": 9}


def test_the_stream_schedule_and_stats_agree():
    program = npucc.compile(ROOT / "models" / "residual_block.onnx")
    stream = parse_stream(program.stream)
    peaks = stream_residency(stream)
    assert peaks == program.stats["peak"]
    assert peaks["L1+UB"] == program.stats["peak_l1_ub"]
    series = core_series(stream, 0)
    assert {tier: max(v for _, v in s) for tier, s in series.items()} == peaks
    layer_peaks = [row["onchip_peak"] for row in program.stats["layers"]]
    assert 0 < max(layer_peaks) <= peaks["L1+UB"]  # the per-layer table's, same rule
