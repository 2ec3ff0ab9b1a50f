"""Sweep files: models, a base target, axes, sampling and constraints; the points they span."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npucc import __version__
from npucc.backend.schedule.registry import SCHEDULERS
from npucc.errors import NpuccError
from npucc.target import load_target, preset_names, target_from_dict

OPTION_AXES = ("schedule",)  # compiler options an axis may vary (the rest are target fields)
_SECTIONS = ("sweep", "models", "axes", "constraints")
_SWEEP_KEYS = ("target", "sample", "seed")
_MODEL_KEYS = ("path", "name", "input_shapes")
_CONSTRAINTS = ("max_sram", "max_macs")


@dataclass(frozen=True, slots=True)
class Model:
    """One model of a sweep: its name, file, fixed input shapes and content digest."""

    name: str
    path: Path
    input_shapes: dict[str, tuple[int, ...]]
    sha256: str  # of the file's bytes


@dataclass(frozen=True, slots=True)
class Axis:
    """One swept parameter: a dotted target key (`memory.L1`) or a compiler option."""

    key: str
    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Sweep:
    """A validated sweep file."""

    source: Path
    base: dict[str, Any]  # the base target as the nested dict of its TOML form
    models: tuple[Model, ...]
    axes: tuple[Axis, ...]
    sample: int | None  # a seeded random sample of this many configurations, else the grid
    seed: int
    max_sram: int | None  # bytes of L1+UB+L0A+L0B+L0C over all cores
    max_macs: int | None  # cube MACs per cycle over all cores

    def configurations(self) -> list[dict[str, Any]]:
        """The axis values of every configuration run, in grid order (axis order, last fastest)."""
        total = math.prod(len(a.values) for a in self.axes)
        if self.sample is None:
            return [c for c in map(self.configuration, range(total)) if self.admits(c)]
        rng = random.Random(self.seed)
        tried: set[int] = set()
        picked: list[int] = []
        while len(picked) < self.sample and len(tried) < total:  # no walk over a huge grid
            index = rng.randrange(total)
            if index not in tried:
                tried.add(index)
                if self.admits(self.configuration(index)):
                    picked.append(index)
        if len(picked) < self.sample:
            raise NpuccError(
                f"key 'sweep.sample' asks for {self.sample} configurations but only "
                f"{len(picked)} of the grid's {total} satisfy the constraints ({self.source})"
            )
        return [self.configuration(i) for i in sorted(picked)]

    def configuration(self, index: int) -> dict[str, Any]:
        """The configuration at position `index` of the grid."""
        values = []
        for axis in reversed(self.axes):
            index, digit = divmod(index, len(axis.values))
            values.append(axis.values[digit])
        return dict(zip((a.key for a in self.axes), reversed(values), strict=True))

    def admits(self, params: dict[str, Any]) -> bool:
        """Whether a configuration satisfies the constraints."""
        data = self.target_dict(params)
        if self.max_sram is not None and sram_bytes(data) > self.max_sram:
            return False
        return self.max_macs is None or macs(data) <= self.max_macs

    def target_dict(self, params: dict[str, Any]) -> dict[str, Any]:
        """The base target with a configuration's target fields set."""
        data = copy.deepcopy(self.base)
        for key, value in params.items():
            if key not in OPTION_AXES:
                *path, leaf = key.split(".")
                table = data
                for part in path:
                    table = table[part]
                table[leaf] = value
        return data

    def points(self, check: bool = False) -> list[Point]:
        """Every (model, configuration) point, model-major, each with its content key."""
        points = []
        configurations = self.configurations()
        for model in self.models:
            for params in configurations:
                options = {
                    "schedule": params.get("schedule", "dan"),
                    "input_shapes": {k: list(v) for k, v in model.input_shapes.items()},
                    "check": check,
                }
                target = self.target_dict(params)
                points.append(
                    Point(model, params, target, options, point_key(model, target, options))
                )
        return points


@dataclass(frozen=True, slots=True)
class Point:
    """One compile-and-time job: a model under one configuration."""

    model: Model
    params: dict[str, Any]  # axis key -> value
    target: dict[str, Any]  # the full target, TOML form
    options: dict[str, Any]  # schedule, input_shapes, check
    key: str  # content hash: model bytes + target + options + npucc version


def point_key(model: Model, target: dict[str, Any], options: dict[str, Any]) -> str:
    """The content hash that makes a point resumable."""
    content = {
        "model": model.sha256,
        "target": target_from_dict(copy.deepcopy(target)).to_json(),
        "options": options,
        "npucc": __version__,
    }
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sram_bytes(target: dict[str, Any]) -> int:
    """On-chip SRAM of a target (TOML form): its tiers' bytes times the cores."""
    typed = target_from_dict(copy.deepcopy(target))
    return sum(typed.memory.on_chip().values()) * typed.cores


def macs(target: dict[str, Any]) -> int:
    """Cube MACs per cycle of a target (TOML form): m0 * n0 * k0 times the cores."""
    typed = target_from_dict(copy.deepcopy(target))
    return typed.cube.macs * typed.cores


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; a bad file raises NpuccError naming the key."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise NpuccError(f"cannot read sweep file: {exc.strerror} ({path})") from None
    except UnicodeDecodeError:
        raise NpuccError(f"sweep file is not UTF-8 text ({path})") from None
    except tomllib.TOMLDecodeError as exc:
        raise NpuccError(f"invalid TOML: {exc} ({path})") from None
    return _Reader(path).sweep(data)


@dataclass(slots=True)
class _Reader:
    """Validation of one sweep file's parsed TOML; `fail` names the key and the file."""

    source: Path

    def fail(self, message: str) -> NpuccError:
        return NpuccError(f"{message} in sweep ({self.source})")

    def sweep(self, data: dict[str, Any]) -> Sweep:
        for section in data:
            if section not in _SECTIONS:
                raise self.fail(f"unknown section '[{section}]' (one of {', '.join(_SECTIONS)})")
        head = self.table(data, "sweep", _SWEEP_KEYS)
        base = self.base_target(head.get("target", "davinci-core"))
        models = self.models(data.get("models"))
        axes = self.axes(self.table(data, "axes", None), base)
        constraints = self.table(data, "constraints", _CONSTRAINTS)
        sample = self.integer(head, "sweep.sample", 1) if "sample" in head else None
        seed = self.integer(head, "sweep.seed", 0) if "seed" in head else 0
        limits = {
            k: self.integer(constraints, f"constraints.{k}", 0) if k in constraints else None
            for k in _CONSTRAINTS
        }
        return Sweep(self.source, base, models, axes, sample, seed, **limits)

    def table(self, data: dict[str, Any], key: str, keys: tuple[str, ...] | None) -> dict:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.fail(f"key '{key}' must be a table")
        unknown = [k for k in value if keys is not None and k not in keys]
        if unknown and keys is not None:
            raise self.fail(f"unknown key '{key}.{unknown[0]}' (one of {', '.join(keys)})")
        return value

    def integer(self, table: dict[str, Any], key: str, least: int) -> int:
        value = table[key.rpartition(".")[2]]
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise self.fail(f"key '{key}' must be an integer >= {least}, got {value!r}")
        return value

    def base_target(self, name: Any) -> dict[str, Any]:
        if not isinstance(name, str):
            raise self.fail(f"key 'sweep.target' must be a preset name or a path, got {name!r}")
        if name in preset_names():
            return load_target(name).to_dict()
        return load_target(self.source.parent / name).to_dict()

    def models(self, value: Any) -> tuple[Model, ...]:
        if not isinstance(value, list) or not value:
            raise self.fail("key 'models' must be a non-empty array ([[models]] tables)")
        models: list[Model] = []
        for i, entry in enumerate(value):
            where = f"models[{i}]"
            if isinstance(entry, str):
                entry = {"path": entry}
            if not isinstance(entry, dict):
                raise self.fail(f"key '{where}' must be a path or a table")
            for k in entry:
                if k not in _MODEL_KEYS:
                    raise self.fail(f"unknown key '{where}.{k}' (one of {', '.join(_MODEL_KEYS)})")
            if not isinstance(entry.get("path"), str):
                raise self.fail(f"key '{where}.path' must be the path of an ONNX file")
            path = self.source.parent / entry["path"]
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError as exc:
                raise self.fail(f"key '{where}.path': cannot read {path}: {exc.strerror}") from None
            name = entry.get("name", path.stem)
            if not isinstance(name, str) or not name:
                raise self.fail(f"key '{where}.name' must be a non-empty string")
            if any(m.name == name for m in models):
                raise self.fail(f"key '{where}.name': model name '{name}' is used twice")
            shapes = self.shapes(entry.get("input_shapes", {}), f"{where}.input_shapes")
            models.append(Model(name, path, shapes, digest))
        return tuple(models)

    def shapes(self, value: Any, where: str) -> dict[str, tuple[int, ...]]:
        if not isinstance(value, dict):
            raise self.fail(f"key '{where}' must be a table of NAME = \"1x3x224x224\"")
        shapes = {}
        for name, dims in value.items():
            if isinstance(dims, str) and re.fullmatch(r"[1-9]\d*(x[1-9]\d*)*", dims):
                shapes[name] = tuple(int(d) for d in dims.split("x"))
            elif (
                isinstance(dims, list)
                and dims
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
            ):
                shapes[name] = tuple(dims)
            else:
                raise self.fail(
                    f"key '{where}.{name}' must be like \"1x3x224x224\" or [1, 3, 224, 224], "
                    f"got {dims!r}"
                )
        return shapes

    def axes(self, table: dict[str, Any], base: dict[str, Any]) -> tuple[Axis, ...]:
        axes = []
        for key, values in _flatten(table):
            where = f"axes.{key}"
            if not isinstance(values, list) or not values:
                raise self.fail(f"key '{where}' must be a non-empty array of values")
            if len({json.dumps(v) for v in values}) != len(values):
                raise self.fail(f"key '{where}' repeats a value")
            if key == "schedule":
                for v in values:
                    if v not in SCHEDULERS:
                        raise self.fail(
                            f"key '{where}': unknown scheduler {v!r} "
                            f"(known: {', '.join(sorted(SCHEDULERS))})"
                        )
            else:
                self.target_axis(key, values, base)
            axes.append(Axis(key, tuple(values)))
        if not axes:
            raise self.fail("key 'axes' must name at least one axis")
        return tuple(axes)

    def target_axis(self, key: str, values: list[Any], base: dict[str, Any]) -> None:
        *path, leaf = key.split(".")
        table: Any = base
        for part in path:
            table = table.get(part) if isinstance(table, dict) else None
        if not isinstance(table, dict) or leaf not in table or isinstance(table[leaf], dict):
            raise self.fail(
                f"unknown key 'axes.{key}' (a target field such as memory.L1, cube.m0, "
                f"dma.DDR_L1.bandwidth, mesh.rows, or an option: {', '.join(OPTION_AXES)})"
            )
        for value in values:
            data = copy.deepcopy(base)
            node = data
            for part in path:
                node = node[part]
            node[leaf] = value
            target_from_dict(data, f"{self.source}: axes.{key} = {value!r}")
        if key in ("mesh.rows", "mesh.cols") and min(values) < 1:
            raise self.fail(f"key 'axes.{key}' must list positive integers")


def _flatten(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested axis tables (`[axes.memory] L1 = [...]`) as dotted keys, in file order."""
    items: list[tuple[str, Any]] = []
    for key, value in table.items():
        if isinstance(value, dict):
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items
