"""`plan_onchip`'s placements made once per distinct fields (onchip_plan._onchip): the same
placements whatever the cache holds, and emptied when full."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from npucc.backend.hypercut import onchip_plan
from npucc.backend.hypercut.onchip_plan import plan_onchip
from npucc.ir.onchip import OnChip
from npucc.target import load_target
from npucc.transforms.graph_pipeline import import_model

MODELS = Path(__file__).parents[2] / "models"
MESH = load_target("mesh8x8")


def test_placements_are_the_same_whatever_the_cache_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = import_model(MODELS / "transformer_encoder.onnx")
    n = len(graph.layers)
    loops = [(0, 2, -1)] * n
    cores = [(0, 1, 8, 9)] * n
    onchip_plan._MADE.clear()
    first = plan_onchip(graph, cores, MESH, loops=loops)
    assert len(first) > 3
    again = plan_onchip(graph, cores, MESH, loops=loops)
    assert again == first
    assert all(again[k] is first[k] for k in first)  # one object per distinct fields
    for where in first.values():  # each equals the OnChip of its fields, made afresh
        assert where == OnChip(*(getattr(where, f.name) for f in fields(OnChip)))
    moved = plan_onchip(graph, [(9, 10, 17, 18)] * n, MESH, loops=loops)  # the cache full
    assert moved.keys() == first.keys()
    assert all(w.homes[0] == (1, 1) for w in moved.values())  # another rectangle's homes
    assert all(first[k].homes[0] == (0, 0) for k in first)
    monkeypatch.setattr(onchip_plan, "_MADE_MAX", 2)  # emptied every other placement
    onchip_plan._MADE.clear()
    small = plan_onchip(graph, cores, MESH, loops=loops)
    assert small == first and len(onchip_plan._MADE) <= 2
