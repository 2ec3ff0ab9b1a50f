"""Hardware targets: TOML files describing cores, memory tiers, pipes, mesh and energy.

A `Target` holds one frozen dataclass per TOML section (`memory`, `cube`, `vector`, `dma`,
`mesh`, `energy`); `load_target` validates a file once and every reader uses typed attributes
(`target.mesh.cols`, `target.cube.m0`). `to_dict` gives back the TOML form, and `to_json`, its
canonical JSON, is embedded in every command stream: both are byte-for-byte what the file said
(optional keys absent from the file stay absent).

One core is described once, by `[cube]`, `[vector]`, `[memory]` and `[mesh] onchip_buffer`.
`[mesh] macs_per_core` and `sram_per_core` are the per-tile figures of the SET/HyperCut
papers' analytic comparison model (`target.mesh_cost.MeshParams`) and nothing else reads them.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

from npucc.errors import NpuccError

TIERS = ("L1", "UB", "L0A", "L0B", "L0C")
_TIER_NAMES = frozenset((*TIERS, "DDR"))  # what `Memory.capacity` answers
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
NOC_DMA_LATENCY = 20  # cycles to start a NoC DMA when the target's [mesh] does not say
DTYPE_BYTES = {"f32": 4, "f16": 2, "i8": 1, "i32": 4}  # storage and accumulator element types
STORAGE_DTYPES = ("f32", "f16", "i8")  # what `[target] dtype` may say
# NOTE: the one table from a `--precision` name to its storage and default accumulator types
PRECISIONS = {"fp32": ("f32", "f32"), "fp16": ("f16", "f32"), "int8": ("i8", "i32")}


@dataclass(frozen=True, slots=True)
class Memory:
    """Capacities in bytes of the on-chip tiers and of DDR; the byte alignment of every buffer."""

    L1: int
    UB: int
    L0A: int
    L0B: int
    L0C: int
    DDR: int
    alignment: int

    def capacity(self, tier: str) -> int:
        """Bytes of one tier (a TIERS name or DDR)."""
        if tier not in _TIER_NAMES:
            raise KeyError(tier)
        return int(getattr(self, tier))

    def on_chip(self) -> dict[str, int]:
        """Bytes of each on-chip tier of one core, in TIERS order."""
        return {t: self.capacity(t) for t in TIERS}


@dataclass(frozen=True, slots=True)
class Cube:
    """The cube unit: one m0 x n0 x k0 fractal multiply per cycle after `latency` cycles."""

    m0: int
    n0: int
    k0: int
    latency: int

    @property
    def macs(self) -> int:
        """Multiply-accumulates per cycle of one core's cube."""
        return self.m0 * self.n0 * self.k0


@dataclass(frozen=True, slots=True)
class Vector:
    """The vector unit: `width` elements per cycle after `latency` cycles."""

    width: int
    latency: int


@dataclass(frozen=True, slots=True)
class DmaPath:
    """Bandwidth (bytes per cycle) and fixed latency (cycles) of one DMA path."""

    bandwidth: int
    latency: int


@dataclass(frozen=True, slots=True)
class Dma:
    """Every DMA path of a core, by its DMA_PATHS name."""

    DDR_L1: DmaPath
    DDR_UB: DmaPath
    DDR_L0: DmaPath
    L1_L0: DmaPath
    L1_UB: DmaPath
    UB_L1: DmaPath
    L0C_UB: DmaPath
    UB_UB: DmaPath
    TIER_DDR: DmaPath

    def path(self, name: str) -> DmaPath:
        """The DMA path called `name` (one of DMA_PATHS)."""
        if name not in DMA_PATHS:
            raise KeyError(name)
        path: DmaPath = getattr(self, name)
        return path


@dataclass(frozen=True, slots=True)
class SetModelParams:
    """Per-tile figures of the SET/HyperCut papers' analytic mesh model (`MeshParams`) only.

    NOTE: they are not a second description of a core: lowering, the execution estimate and the
    interpreter take a core's MACs from `[cube]` and its SRAM from `[memory]`/`onchip_buffer`.
    """

    macs_per_core: int
    sram_per_core: int  # bytes


@dataclass(frozen=True, slots=True)
class Mesh:
    """The mesh of cores: its shape, NoC, shared DDR and the on-chip buffer per core."""

    rows: int
    cols: int
    noc_bandwidth: int  # bytes per cycle per link
    noc_hop_latency: int  # cycles per hop
    ddr_bandwidth: int  # bytes per cycle DDR serves all cores together
    ddr_ports: str
    set_model: SetModelParams  # TOML keys macs_per_core, sram_per_core
    onchip_buffer: int | None = None  # bytes per core; None: absent from the file
    noc_dma_latency: int | None = None  # cycles; None: absent from the file

    @property
    def onchip_budget(self) -> int:
        """Bytes per core of the distributed on-chip buffer (0 when the file gives none)."""
        return 0 if self.onchip_buffer is None else self.onchip_buffer

    @property
    def noc_dma_cycles(self) -> int:
        """Fixed latency of one NoC DMA (NOC_DMA_LATENCY when the file does not say)."""
        return NOC_DMA_LATENCY if self.noc_dma_latency is None else self.noc_dma_latency


@dataclass(frozen=True, slots=True)
class Energy:
    """Energy in picojoules: per MAC, per vector element, per byte of each tier, per bit."""

    mac: float
    vector_op: float
    byte_L1: float
    byte_UB: float
    byte_L0A: float
    byte_L0B: float
    byte_L0C: float
    noc_bit_hop: float
    ddr_bit: float

    def per_byte(self, tier: str) -> float:
        """Picojoules per byte read or written in one on-chip tier."""
        if tier not in TIERS:
            raise KeyError(tier)
        return float(getattr(self, f"byte_{tier}"))


@dataclass(frozen=True, slots=True)
class Precision:
    """One `[precision.NAME]` table: the cube fractal, vector lanes and accumulator at NAME."""

    m0: int
    n0: int
    k0: int
    vector_width: int
    accumulator: str  # element type of L0C (the cube's accumulator)


# NOTE: the TOML form of each section is its dataclass's fields in order, except [mesh], whose
# `set_model` fields sit flat in the table; to_dict lists keys in this order.
_MESH_OPTIONAL = ("onchip_buffer", "noc_dma_latency")
_KINDS = {"int": int, "float": float, "str": str}


def _keys(cls: type) -> dict[str, Any]:
    """TOML key -> type of one section class (a nested dict for a table-valued key)."""
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.type == "DmaPath":
            out[f.name] = _keys(DmaPath)
        elif f.type == "SetModelParams":
            out.update(_keys(SetModelParams))
        elif f.name not in _MESH_OPTIONAL:
            out[f.name] = _KINDS[str(f.type)]
    return out


# section -> key -> type, every key required; a nested table is described by a dict
_SCHEMA: dict[str, dict[str, Any]] = {
    "target": {"name": str, "dtype": str, "clock_ghz": float},
    "precision": {},  # NAME -> a Precision table (checked by _precisions); optional
    "memory": _keys(Memory),
    "cube": _keys(Cube),
    "vector": _keys(Vector),
    "dma": _keys(Dma),
    "mesh": _keys(Mesh),
    "energy": _keys(Energy),
}
# section -> optional key -> type; absent keys stay absent (readers use Mesh's defaults)
_OPTIONAL: dict[str, dict[str, Any]] = {
    "mesh": dict.fromkeys(_MESH_OPTIONAL, int),
    "target": {"accumulator": str},
}
_OPTIONAL_SECTIONS = ("precision",)
_PRECISION_KEYS = {f.name: _KINDS[str(f.type)] for f in fields(Precision)}


@dataclass(frozen=True, slots=True)
class Target:
    """A validated hardware description; every field comes from the TOML file."""

    name: str
    dtype: str  # storage element type of every tensor (L0C: `acc_dtype`)
    clock_ghz: float
    memory: Memory
    cube: Cube
    vector: Vector
    dma: Dma
    mesh: Mesh
    energy: Energy
    source: str = field(default="", compare=False)  # file the target came from
    accumulator: str | None = None  # L0C's element type; None: absent from the file (= dtype)
    precisions: tuple[tuple[str, Precision], ...] = ()  # the [precision.NAME] tables, in order

    @property
    def elem_bytes(self) -> int:
        """Bytes per stored element (DDR, L1, UB, L0A, L0B)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def acc_dtype(self) -> str:
        """Element type of L0C, where the cube accumulates."""
        return self.dtype if self.accumulator is None else self.accumulator

    def tier_dtype(self, tier: str) -> str:
        """Element type of the data one tier (or DDR, NOC) holds: L0C the accumulator's."""
        return self.acc_dtype if tier == "L0C" else self.dtype

    def tier_bytes(self, tier: str) -> int:
        """Bytes of one element in `tier` (NOTE: the one home of the per-tier element size)."""
        return DTYPE_BYTES[self.tier_dtype(tier)]

    @property
    def precision(self) -> str:
        """The `--precision` name of the storage dtype (fp32, fp16, int8)."""
        return next(p for p, (dtype, _) in PRECISIONS.items() if dtype == self.dtype)

    def supported_precisions(self) -> list[str]:
        """The precisions this target compiles: its own and each [precision.NAME] table's."""
        return [self.precision, *(n for n, _ in self.precisions if n != self.precision)]

    def at_precision(self, precision: str) -> Target:
        """The target at one precision: its [precision.NAME] figures, no precision tables.

        NOTE: this is what a compiled stream embeds; at the file's own precision it is the file
        without its [precision] tables (so an fp32 stream's target is unchanged by them).
        """
        tables = dict(self.precisions)
        if precision not in PRECISIONS:
            raise NpuccError(f"unknown precision '{precision}' (one of "
                             f"{', '.join(PRECISIONS)}, auto)")  # fmt: skip
        if precision != self.precision and precision not in tables:
            raise NpuccError(f"target '{self.name}' does not support precision {precision} "
                             f"(supports: {', '.join(self.supported_precisions())})")  # fmt: skip
        data = self.to_dict()
        data.pop("precision", None)
        if precision in tables and precision != self.precision:
            p = tables[precision]
            data["target"]["dtype"] = PRECISIONS[precision][0]
            data["target"]["accumulator"] = p.accumulator
            data["cube"].update(m0=p.m0, n0=p.n0, k0=p.k0)
            data["vector"]["width"] = p.vector_width
        return target_from_dict(data, self.source)

    @property
    def cores(self) -> int:
        """Number of cores in the mesh."""
        return self.mesh.rows * self.mesh.cols

    def to_dict(self) -> dict[str, Any]:
        """The target as the nested dict of its TOML form."""
        head: dict[str, Any] = {"name": self.name, "dtype": self.dtype,
                                "clock_ghz": self.clock_ghz}  # fmt: skip
        if self.accumulator is not None:
            head["accumulator"] = self.accumulator
        data = {
            "target": head,
            "memory": _table(self.memory),
            "cube": _table(self.cube),
            "vector": _table(self.vector),
            "dma": {p: _table(self.dma.path(p)) for p in DMA_PATHS},
            "mesh": _mesh_table(self.mesh),
            "energy": _table(self.energy),
        }
        if self.precisions:
            data["precision"] = {n: _table(p) for n, p in self.precisions}
        return data

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


def _table(section: Any) -> dict[str, Any]:
    """One section dataclass as its TOML table (field name -> value)."""
    return {f.name: getattr(section, f.name) for f in fields(section)}


def _mesh_table(mesh: Mesh) -> dict[str, Any]:
    """[mesh] as its TOML table: `set_model` flat, absent optional keys left out."""
    table: dict[str, Any] = {}
    for f in fields(mesh):
        value = getattr(mesh, f.name)
        if f.name == "set_model":
            table.update(_table(value))
        elif value is not None:
            table[f.name] = value
    return table


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
    """Validate a nested dict against the target schema and build the Target.

    NOTE: float keys given as integers are converted in `data` itself (as TOML allows `1`).
    """
    for section in data:
        if section not in _SCHEMA:
            raise NpuccError(f"unknown section '[{section}]' in target ({source})")
    for section, schema in _SCHEMA.items():
        if section in _OPTIONAL_SECTIONS:
            continue
        if section not in data:
            raise NpuccError(f"missing section '[{section}]' in target ({source})")
        _check_table(data[section], schema, f"{section}.", source, _OPTIONAL.get(section))
    head = data["target"]
    if head["dtype"] not in STORAGE_DTYPES:
        raise NpuccError(
            f"key 'target.dtype' must be one of {sorted(STORAGE_DTYPES)}, "
            f"got {head['dtype']!r} ({source})"
        )
    if "accumulator" in head and head["accumulator"] not in DTYPE_BYTES:
        raise NpuccError(f"key 'target.accumulator' must be one of {sorted(DTYPE_BYTES)}, "
                         f"got {head['accumulator']!r} ({source})")  # fmt: skip
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
    precisions = _precisions(data.get("precision", {}), source)
    mesh = dict(data["mesh"])
    set_model = SetModelParams(**{k: mesh.pop(k) for k in _keys(SetModelParams)})
    return Target(
        name=data["target"]["name"],
        dtype=data["target"]["dtype"],
        clock_ghz=data["target"]["clock_ghz"],
        memory=Memory(**mem),
        cube=Cube(**data["cube"]),
        vector=Vector(**data["vector"]),
        dma=Dma(**{p: DmaPath(**spec) for p, spec in data["dma"].items()}),
        mesh=Mesh(**mesh, set_model=set_model),
        energy=Energy(**data["energy"]),
        source=source,
        accumulator=head.get("accumulator"),
        precisions=precisions,
    )


def _precisions(tables: Any, source: str) -> tuple[tuple[str, Precision], ...]:
    """The [precision.NAME] tables, validated (NAME one of PRECISIONS)."""
    if not isinstance(tables, dict):
        raise NpuccError(f"key 'precision' must be a table in target ({source})")
    out = []
    for name, table in tables.items():
        if name not in PRECISIONS:
            raise NpuccError(f"unknown precision '[precision.{name}]' in target ({source})")
        if not isinstance(table, dict):
            raise NpuccError(f"key 'precision.{name}' must be a table in target ({source})")
        _check_table(table, _PRECISION_KEYS, f"precision.{name}.", source)
        for key in ("m0", "n0", "k0", "vector_width"):
            if table[key] == 0:
                raise NpuccError(f"key 'precision.{name}.{key}' must be positive ({source})")
        if table["accumulator"] not in DTYPE_BYTES:
            raise NpuccError(f"key 'precision.{name}.accumulator' must be one of "
                             f"{sorted(DTYPE_BYTES)} ({source})")  # fmt: skip
        out.append((name, Precision(**table)))
    return tuple(out)
