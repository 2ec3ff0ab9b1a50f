"""Target files: presets load, typed sections, the canonical JSON, bad files fail naming the key."""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import pytest

from npucc.errors import NpuccError
from npucc.ir.isa import Copy, MemRef, Mmad
from npucc.ir.isa_cost import instr_cycles
from npucc.target import (
    DMA_PATHS,
    NOC_DMA_LATENCY,
    TIERS,
    DmaPath,
    SetModelParams,
    load_target,
    preset_names,
    target_from_dict,
    target_from_json,
)
from npucc.target.cost import mmad_cycles, noc_cycles

CANONICAL = Path(__file__).with_name("canonical")  # each preset's to_json, recorded before typing


def test_presets_load_and_round_trip_through_json():
    assert preset_names() == ["davinci-core", "mesh16x16", "mesh8x8"]
    for name in preset_names():
        target = load_target(name)
        assert target.name == name
        assert target_from_json(target.to_json()) == target
    assert load_target("mesh8x8").cores == 64
    assert load_target("mesh16x16").cores == 256
    assert load_target("davinci-core").memory.L1 == 1 << 20


@pytest.mark.parametrize("name", ["davinci-core", "mesh16x16", "mesh8x8"])
def test_canonical_json_is_byte_identical(name):
    """The JSON embedded in every stream (the preset at its own precision, without its
    [precision] tables) is exactly the recorded one (keys, order, value types)."""
    target = load_target(name).at_precision("fp32")
    assert target.to_json() + "\n" == (CANONICAL / f"{name}.json").read_text()
    assert target_from_json(target.to_json()).to_json() == target.to_json()


def test_typed_sections():
    t = load_target("mesh8x8")
    assert (t.mesh.rows, t.mesh.cols, t.cores) == (8, 8, 64)
    assert (t.cube.m0, t.cube.n0, t.cube.k0, t.cube.macs) == (16, 16, 8, 2048)
    assert (t.vector.width, t.vector.latency) == (64, 8)
    assert t.memory.on_chip() == {tier: t.memory.capacity(tier) for tier in TIERS}
    assert t.memory.capacity("DDR") == t.memory.DDR == 1 << 34
    assert t.dma.path("DDR_L1") == DmaPath(64, 200)
    assert [t.dma.path(p) for p in DMA_PATHS] == [getattr(t.dma, p) for p in DMA_PATHS]
    assert t.energy.per_byte("L1") == t.energy.byte_L1 == 0.05
    assert isinstance(t.clock_ghz, float) and isinstance(t.energy.mac, float)
    assert t.mesh.set_model == SetModelParams(macs_per_core=1024, sram_per_core=1 << 20)
    assert (t.mesh.onchip_budget, t.mesh.noc_dma_cycles) == (512 << 10, 20)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.mesh.rows = 2  # type: ignore[misc]
    with pytest.raises(KeyError):
        t.memory.capacity("L2")


def test_optional_mesh_keys_stay_absent():
    core = load_target("davinci-core")
    assert core.mesh.onchip_buffer is None and core.mesh.noc_dma_latency is None
    assert (core.mesh.onchip_budget, core.mesh.noc_dma_cycles) == (0, NOC_DMA_LATENCY)
    assert "onchip_buffer" not in core.to_dict()["mesh"]
    data = load_target("mesh8x8").to_dict()
    del data["mesh"]["noc_dma_latency"]
    mesh = target_from_dict(data)
    assert mesh.mesh.noc_dma_cycles == NOC_DMA_LATENCY
    assert "noc_dma_latency" not in mesh.to_json()
    assert noc_cycles(mesh, 24, 2) == NOC_DMA_LATENCY + 2 + 1


def test_integer_floats_load_as_floats(tmp_path):
    path = _write(tmp_path, lambda s: s.replace("clock_ghz = 1.0", "clock_ghz = 1"))
    target = load_target(path)
    assert target.clock_ghz == 1.0 and isinstance(target.clock_ghz, float)
    assert target.to_json() == load_target("davinci-core").to_json()


def test_with_capacity_replaces_a_tier():
    t = load_target("davinci-core").with_capacity(UB=4096)
    assert t.memory.UB == 4096 and t.memory.L1 == 1 << 20


def _write(tmp_path, text: str):
    base = resources.files("npucc.target").joinpath("presets/davinci-core.toml").read_text()
    path = tmp_path / "t.toml"
    path.write_text(text(base))
    return path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda s: s.replace("L1 = 1048576", "L1 = 1048576\nL9 = 4"), "memory.L9"),
        (lambda s: s.replace("UB = 262144", "UB = -1"), "memory.UB"),
        (lambda s: s.replace("[cube]", "[cubes]"), "cubes"),
        (lambda s: s.replace("L0A = 65536", "L0A = 0"), "memory.L0A"),
        (lambda s: s.replace("width = 64", 'width = "wide"'), "vector.width"),
        (lambda s: s.replace("DDR_UB = { bandwidth = 64, latency = 200 }\n", ""), "dma.DDR_UB"),
        (lambda s: s.replace("macs_per_core = 1024\n", ""), "mesh.macs_per_core"),
        (lambda s: s.replace("cols = 1\n", "cols = 1\nonchip_buffer = 1.5\n"), "onchip_buffer"),
        (lambda s: s.replace("mac = 0.018", 'mac = "x"'), "energy.mac"),
        (lambda s: s.replace("alignment = 32", "alignment = 6"), "memory.alignment"),
        (lambda s: s.replace('dtype = "f32"', 'dtype = "f64"'), "target.dtype"),
        (lambda s: s.replace("L1_L0 = { bandwidth = 256", "L1_L0 = { bandwidth = 0"), "dma.L1_L0"),
        (lambda s: s.replace("m0 = 16", "m0 = 0"), "cube.m0"),
    ],
)
def test_bad_target_names_the_key(tmp_path, edit, needle):
    path = _write(tmp_path, edit)
    with pytest.raises(NpuccError, match=needle.replace(".", r"\.")):
        load_target(path)


def test_unknown_target_and_broken_toml(tmp_path):
    with pytest.raises(NpuccError, match="unknown target"):
        load_target("no-such-target")
    bad = tmp_path / "bad.toml"
    bad.write_text("[target\nname=1")
    with pytest.raises(NpuccError, match="invalid TOML"):
        load_target(bad)


def test_cycle_formulas():
    t = load_target("davinci-core")
    assert mmad_cycles(t, 16, 16, 8) == t.cube.latency + 1
    assert mmad_cycles(t, 17, 16, 8) == t.cube.latency + 2
    load = Copy(MemRef("L1", 0), MemRef("DDR", 0), (64,), (1,), (1,))
    assert instr_cycles(t, load) == t.dma.DDR_L1.latency + 256 // t.dma.DDR_L1.bandwidth
    mm = Mmad(MemRef("L0C", 0), MemRef("L0A", 0), MemRef("L0B", 0), 32, 32, 32, 0)
    assert instr_cycles(t, mm) == mmad_cycles(t, 32, 32, 32)
