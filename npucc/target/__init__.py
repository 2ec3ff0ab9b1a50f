"""Hardware targets: TOML files describing cores, memory tiers, pipes, mesh and energy."""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from npucc.errors import NpuccError

TIERS = ("L1", "UB", "L0A", "L0B", "L0C")
DMA_PATHS = (
    "DDR_L1",
    "DDR_UB",
    "DDR_L0",
    "L1_L0",
    "L1_UB",
    "UB_L1",
    "L0C_UB",
    "UB_UB",
    "TIER_DDR",
)

# section -> key -> (type, required); a nested table is described by a dict
_SCHEMA: dict[str, dict[str, Any]] = {
    "target": {"name": str, "dtype": str, "clock_ghz": float},
    "memory": {**{t: int for t in TIERS}, "DDR": int, "alignment": int},
    "cube": {"m0": int, "n0": int, "k0": int, "latency": int},
    "vector": {"width": int, "latency": int},
    "dma": {p: {"bandwidth": int, "latency": int} for p in DMA_PATHS},
    "mesh": {
        "rows": int,
        "cols": int,
        "noc_bandwidth": int,
        "noc_hop_latency": int,
        "ddr_bandwidth": int,
        "ddr_ports": str,
        "macs_per_core": int,
        "sram_per_core": int,
    },
    "energy": {
        "mac": float,
        "vector_op": float,
        **{f"byte_{t}": float for t in TIERS},
        "noc_bit_hop": float,
        "ddr_bit": float,
    },
}
# section -> optional key -> type; absent keys stay absent (readers use their defaults)
_OPTIONAL: dict[str, dict[str, Any]] = {
    "mesh": {"onchip_buffer": int, "noc_dma_latency": int},
}
_DTYPE_BYTES = {"f32": 4}


@dataclass(frozen=True, slots=True)
class DmaPath:
    """Bandwidth (bytes per cycle) and fixed latency (cycles) of one DMA path."""

    bandwidth: int
    latency: int


@dataclass(frozen=True, slots=True)
class Target:
    """A validated hardware description; every field comes from the TOML file."""

    name: str
    dtype: str  # storage element type of every tensor
    clock_ghz: float
    capacity: dict[str, int]  # tier -> bytes (L1, UB, L0A, L0B, L0C, DDR)
    alignment: int  # byte alignment of every on-chip buffer
    cube: dict[str, int]  # m0, n0, k0, latency
    vector: dict[str, int]  # width (elements per cycle), latency
    dma: dict[str, DmaPath]  # path name -> bandwidth/latency
    mesh: dict[str, Any]
    energy: dict[str, float]  # picojoules
    source: str = field(default="", compare=False)  # file the target came from

    @property
    def elem_bytes(self) -> int:
        """Bytes per stored element."""
        return _DTYPE_BYTES[self.dtype]

    @property
    def cores(self) -> int:
        """Number of cores in the mesh."""
        return int(self.mesh["rows"]) * int(self.mesh["cols"])

    def to_dict(self) -> dict[str, Any]:
        """The target as the nested dict of its TOML form."""
        return {
            "target": {"name": self.name, "dtype": self.dtype, "clock_ghz": self.clock_ghz},
            "memory": {**self.capacity, "alignment": self.alignment},
            "cube": dict(self.cube),
            "vector": dict(self.vector),
            "dma": {
                k: {"bandwidth": v.bandwidth, "latency": v.latency} for k, v in self.dma.items()
            },
            "mesh": dict(self.mesh),
            "energy": dict(self.energy),
        }

    def to_json(self) -> str:
        """Canonical one-line JSON (sorted keys): embedded in command streams."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def sha256(self) -> str:
        """Digest of the canonical JSON form."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    def with_capacity(self, **caps: int) -> Target:
        """A copy with some tier capacities replaced."""
        data = self.to_dict()
        data["memory"].update(caps)
        return target_from_dict(data, self.source)


def preset_names() -> list[str]:
    """Names of the targets shipped with npucc."""
    folder = resources.files("npucc.target") / "presets"
    return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_target(name_or_path: str | Path) -> Target:
    """Load a preset by name or a TOML file by path; a bad file raises NpuccError naming the key."""
    text = str(name_or_path)
    path = Path(text)
    if text in preset_names():
        resource = resources.files("npucc.target") / "presets" / f"{text}.toml"
        raw, source = resource.read_text(), f"preset {text}"
    elif path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise NpuccError(f"target file not found ({text})")
        raw, source = path.read_text(encoding="utf-8"), text
    else:
        raise NpuccError(
            f"unknown target '{text}' (presets: {', '.join(preset_names())}, or a .toml path)"
        )
    try:
        data = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise NpuccError(f"invalid TOML: {exc} ({source})") from None
    return target_from_dict(data, source)


def target_from_json(text: str) -> Target:
    """Rebuild a target from its canonical JSON (as embedded in a stream)."""
    return target_from_dict(json.loads(text), "stream")


def _check_table(
    data: dict[str, Any],
    schema: dict[str, Any],
    where: str,
    source: str,
    optional: dict[str, Any] | None = None,
) -> None:
    optional = optional or {}
    for key in data:
        if key not in schema and key not in optional:
            raise NpuccError(f"unknown key '{where}{key}' in target ({source})")
    for key, kind in {**schema, **{k: v for k, v in optional.items() if k in data}}.items():
        if key not in data:
            raise NpuccError(f"missing key '{where}{key}' in target ({source})")
        value = data[key]
        if isinstance(kind, dict):
            if not isinstance(value, dict):
                raise NpuccError(f"key '{where}{key}' must be a table in target ({source})")
            _check_table(value, kind, f"{where}{key}.", source)
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = data[key] = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise NpuccError(
                f"key '{where}{key}' must be {kind.__name__}, got {value!r} ({source})"
            )
        if kind in (int, float) and value < 0:
            raise NpuccError(f"key '{where}{key}' must not be negative, got {value} ({source})")


def target_from_dict(data: dict[str, Any], source: str = "") -> Target:
    """Validate a nested dict against the target schema and build the Target."""
    for section in data:
        if section not in _SCHEMA:
            raise NpuccError(f"unknown section '[{section}]' in target ({source})")
    for section, schema in _SCHEMA.items():
        if section not in data:
            raise NpuccError(f"missing section '[{section}]' in target ({source})")
        _check_table(data[section], schema, f"{section}.", source, _OPTIONAL.get(section))
    if data["target"]["dtype"] not in _DTYPE_BYTES:
        raise NpuccError(
            f"key 'target.dtype' must be one of {sorted(_DTYPE_BYTES)}, "
            f"got {data['target']['dtype']!r} ({source})"
        )
    mem = data["memory"]
    for tier in (*TIERS, "DDR"):
        if mem[tier] == 0:
            raise NpuccError(f"key 'memory.{tier}' must be positive, got 0 ({source})")
    if mem["alignment"] <= 0 or mem["alignment"] % 4:
        raise NpuccError(f"key 'memory.alignment' must be a positive multiple of 4 ({source})")
    for section, keys in (("cube", ("m0", "n0", "k0")), ("vector", ("width",))):
        for key in keys:
            if data[section][key] == 0:
                raise NpuccError(f"key '{section}.{key}' must be positive ({source})")
    for path, spec in data["dma"].items():
        if spec["bandwidth"] == 0:
            raise NpuccError(f"key 'dma.{path}.bandwidth' must be positive ({source})")
    return Target(
        name=data["target"]["name"],
        dtype=data["target"]["dtype"],
        clock_ghz=data["target"]["clock_ghz"],
        capacity={t: mem[t] for t in (*TIERS, "DDR")},
        alignment=mem["alignment"],
        cube=dict(data["cube"]),
        vector=dict(data["vector"]),
        dma={k: DmaPath(v["bandwidth"], v["latency"]) for k, v in data["dma"].items()},
        mesh=dict(data["mesh"]),
        energy=dict(data["energy"]),
        source=source,
    )
