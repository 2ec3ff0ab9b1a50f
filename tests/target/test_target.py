"""Target files: presets load, bad files fail naming the key."""

from __future__ import annotations

from importlib import resources

import pytest

from npucc.errors import NpuccError
from npucc.ir.isa import Copy, MemRef, Mmad
from npucc.ir.isa_cost import instr_cycles
from npucc.target import load_target, preset_names, target_from_json
from npucc.target.cost import mmad_cycles


def test_presets_load_and_round_trip_through_json():
    assert preset_names() == ["davinci-core", "mesh16x16", "mesh8x8"]
    for name in preset_names():
        target = load_target(name)
        assert target.name == name
        assert target_from_json(target.to_json()) == target
    assert load_target("mesh8x8").cores == 64
    assert load_target("mesh16x16").cores == 256
    assert load_target("davinci-core").capacity["L1"] == 1 << 20


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
    assert mmad_cycles(t, 16, 16, 8) == t.cube["latency"] + 1
    assert mmad_cycles(t, 17, 16, 8) == t.cube["latency"] + 2
    load = Copy(MemRef("L1", 0), MemRef("DDR", 0), (64,), (1,), (1,))
    assert instr_cycles(t, load) == t.dma["DDR_L1"].latency + 256 // t.dma["DDR_L1"].bandwidth
    mm = Mmad(MemRef("L0C", 0), MemRef("L0A", 0), MemRef("L0B", 0), 32, 32, 32, 0)
    assert instr_cycles(t, mm) == mmad_cycles(t, 32, 32, 32)
