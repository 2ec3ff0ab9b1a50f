"""Random hardware targets for differential fuzzing, derived from npucc's presets.

`targets()` starts from a preset's TOML form (davinci-core or mesh8x8) and redraws what the
compiler must honour: tier capacities (the preset's divided by up to 2**MAX_SHRINK, so tiles
get small, buffers spill and tensors stop fitting on chip), the buffer alignment, DMA
bandwidths and latencies, the cube's fractal and the vector width, the mesh shape (1x1 to
4x4), the NoC and DDR figures and the on-chip buffer. Every field shrinks towards the
preset's value, so a minimised failure differs from a preset only where it must.
`to_toml` writes a target back as a TOML file that `npucc.target.load_target` reads;
`schedules()` draws the per-core scheduler an example compiles with.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from npucc.backend.schedule.registry import SCHEDULERS
from npucc.target import DMA_PATHS, TIERS, Target, load_target, target_from_dict

PRESETS = ("davinci-core", "mesh8x8")
MAX_SHRINK = 10  # capacities go down to preset / 2**MAX_SHRINK (64 bytes of a 64 KiB L0A)
MAX_MESH = 4


def _or_preset(value: Any, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The preset's `value` (what a failure shrinks to) or a draw from `other`."""
    return st.one_of(st.just(value), other)


def _pow2(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.sampled_from([1 << e for e in range(lo, hi + 1)])


@st.composite
def targets(draw: Any, presets: tuple[str, ...] = PRESETS) -> Target:
    """A valid target: a preset with random capacities, speeds, shapes and mesh."""
    preset = draw(st.sampled_from(presets))
    data = load_target(preset).to_dict()
    data["target"]["name"] = f"fuzz-{preset}"
    mem = data["memory"]
    mem["alignment"] = draw(_or_preset(mem["alignment"], st.sampled_from([4, 8, 16, 64])))
    for tier in TIERS:
        shrink = draw(st.integers(0, MAX_SHRINK))
        cap = max(mem["alignment"], mem[tier] >> shrink)
        mem[tier] = cap - cap % mem["alignment"]
    cube = data["cube"]
    for key in ("m0", "n0", "k0"):
        cube[key] = draw(_or_preset(cube[key], _pow2(0, 5)))
    cube["latency"] = draw(_or_preset(cube["latency"], st.integers(0, 64)))
    vec = data["vector"]
    vec["width"] = draw(_or_preset(vec["width"], _pow2(0, 8)))
    vec["latency"] = draw(_or_preset(vec["latency"], st.integers(0, 32)))
    for path in DMA_PATHS:
        spec = data["dma"][path]
        spec["bandwidth"] = draw(_or_preset(spec["bandwidth"], _pow2(0, 9)))
        spec["latency"] = draw(_or_preset(spec["latency"], st.integers(0, 400)))
    mesh = data["mesh"]
    mesh["rows"] = draw(st.integers(1, MAX_MESH))
    mesh["cols"] = draw(st.integers(1, MAX_MESH))
    mesh["noc_bandwidth"] = draw(_or_preset(mesh["noc_bandwidth"], _pow2(0, 7)))
    mesh["noc_hop_latency"] = draw(_or_preset(mesh["noc_hop_latency"], st.integers(0, 8)))
    mesh["ddr_bandwidth"] = draw(_or_preset(mesh["ddr_bandwidth"], _pow2(2, 9)))
    if "onchip_buffer" in mesh:
        shrink = draw(st.integers(0, MAX_SHRINK + 4))
        mesh["onchip_buffer"] = mesh["onchip_buffer"] >> shrink
        mesh["noc_dma_latency"] = draw(_or_preset(mesh["noc_dma_latency"], st.integers(0, 64)))
    return target_from_dict(data, "fuzz")


def schedules() -> st.SearchStrategy[str]:
    """A per-core scheduler: DAN (the default, what a failure shrinks to) or any other one.

    NOTE: DAN keeps the lowering's tiles within their tiers, so it rarely spills; the baseline
    schedulers (hmcos, mpas-critical, ...) overlap more tiles and spill, which puts the spill
    paths of codegen and the interpreter under test.
    """
    return st.one_of(st.just("dan"), st.sampled_from(sorted(SCHEDULERS)))


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def to_toml(target: Target) -> str:
    """The target as a TOML file (sections and inline tables, in to_dict's order)."""
    lines: list[str] = []
    for section, table in target.to_dict().items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {_value(value)}" for key, value in table.items())
        lines.append("")
    return "\n".join(lines)
