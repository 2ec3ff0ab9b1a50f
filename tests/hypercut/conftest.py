"""Small synthetic workloads for the HyperCut tests."""

from __future__ import annotations

import pytest

from npucc.backend.hypercut.set_model import MeshParams
from npucc.ir.plan import LayerLoad, Workload
from npucc.target import load_target


def chain(n: int, batch: int = 4, branch: bool = True) -> Workload:
    """n conv-like layers in a chain; with `branch`, layer 1 also feeds layer 3 (a skip)."""
    layers = []
    for i in range(n):
        inputs: tuple[tuple[int, int], ...] = () if i == 0 else ((i - 1, 4096),)
        if branch and i == 3:
            inputs = ((1, 4096), (2, 4096))
        layers.append(
            LayerLoad(
                name=f"l{i}",
                macs=(1 + i % 3) * 2_000_000,
                vops=0,
                weights=20_000,
                out=4096,
                inputs=inputs,
                ext_in=4096 if i == 0 else 0,
                is_output=i == n - 1,
            )
        )
    return Workload("chain", tuple(layers), batch)


@pytest.fixture
def mesh() -> MeshParams:
    """The mesh8x8 preset's parameters."""
    return MeshParams.from_target(load_target("mesh8x8"))
