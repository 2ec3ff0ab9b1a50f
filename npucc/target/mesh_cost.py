"""Mesh cost model: energy and latency of a time plan of layer groups on sub-grids of cores.

Owned by `npucc.target.cost` (the one home of cycle and energy formulas); docs/cost-model.md
states every formula. Units: bytes, cycles, picojoules. A plan is a sequence of time steps;
a step holds groups of layers, each on a rectangle of cores, and splits the batch into `nsub`
sub-batches that flow through the step's groups as a pipeline. Costs add over steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from npucc.target import Target

KEEP_FRACTION = 0.5  # share of a rectangle's SRAM a tensor may occupy to stay on chip
OPERAND_REUSE = 16  # MACs per operand element fetched from the core buffer (cube m0/n0)


@dataclass(frozen=True, slots=True)
class Rect:
    """A sub-grid of cores: columns x..x+w-1 and rows y..y+h-1."""

    x: int
    y: int
    w: int
    h: int

    @property
    def cores(self) -> int:
        """Number of cores in the rectangle."""
        return self.w * self.h

    @property
    def center(self) -> tuple[float, float]:
        """Geometric centre (x, y) in core coordinates."""
        return (self.x + (self.w - 1) / 2, self.y + (self.h - 1) / 2)

    def to_text(self) -> str:
        """Compact form x,y+wxh."""
        return f"{self.x},{self.y}+{self.w}x{self.h}"


@dataclass(frozen=True, slots=True)
class MeshParams:
    """Every hardware figure the mesh cost model uses (bytes per cycle, pJ)."""

    rows: int
    cols: int
    macs_per_core: int
    vector_per_core: int  # element operations per cycle per core (pooling, add, softmax)
    sram_per_core: int  # bytes
    noc_bandwidth: float  # bytes per cycle per link and direction
    noc_hop_latency: int  # cycles per hop
    dram_bandwidth: float  # bytes per cycle, shared by all ports
    elem_bytes: int  # bytes per tensor element
    mac_pj: float  # per MAC
    vector_pj: float  # per element operation
    sram_read_pj: float  # per byte read from a core's SRAM
    sram_write_pj: float  # per byte written to a core's SRAM
    core_buffer_pj_per_mac: float  # operand traffic inside a core (L1/L0) per MAC
    noc_pj_bit_hop: float
    dram_pj_bit: float

    @classmethod
    def from_target(cls, target: Target, **overrides: float) -> MeshParams:
        """Read the [mesh] and [energy] sections (and dtype) of a target; overrides win."""
        m, e = target.mesh, target.energy
        eb = target.elem_bytes
        operand = 2 * eb * e["byte_L1"] / OPERAND_REUSE
        params = cls(
            rows=int(m["rows"]),
            cols=int(m["cols"]),
            macs_per_core=int(m["macs_per_core"]),
            vector_per_core=int(target.vector["width"]),
            sram_per_core=int(m["sram_per_core"]),
            noc_bandwidth=float(m["noc_bandwidth"]),
            noc_hop_latency=int(m["noc_hop_latency"]),
            dram_bandwidth=float(m["ddr_bandwidth"]),
            elem_bytes=eb,
            mac_pj=e["mac"],
            vector_pj=e["vector_op"],
            sram_read_pj=e["byte_L1"],
            sram_write_pj=e["byte_L1"],
            core_buffer_pj_per_mac=operand,
            noc_pj_bit_hop=e["noc_bit_hop"],
            dram_pj_bit=e["ddr_bit"],
        )
        return replace(params, **overrides)

    @property
    def whole(self) -> Rect:
        """The whole mesh."""
        return Rect(0, 0, self.cols, self.rows)


@dataclass(frozen=True, slots=True)
class LayerLoad:
    """What the cost model needs of one layer; per-sample figures in elements."""

    name: str
    macs: int  # multiply-accumulates per sample
    vops: int  # element operations per sample (non-MAC work)
    weights: int  # weight elements (shared by the batch)
    out: int  # output elements per sample
    inputs: tuple[tuple[int, int], ...]  # (producer layer index, elements per sample)
    ext_in: int  # elements per sample read from graph inputs
    is_output: bool  # output is a graph output (written to DRAM)


@dataclass(frozen=True, slots=True)
class Workload:
    """Layers in topological order and the batch size."""

    name: str
    layers: tuple[LayerLoad, ...]
    batch: int
    consumers: tuple[tuple[int, ...], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        users: list[list[int]] = [[] for _ in self.layers]
        for i, layer in enumerate(self.layers):
            for p, _ in layer.inputs:
                if i not in users[p]:
                    users[p].append(i)
        object.__setattr__(self, "consumers", tuple(tuple(u) for u in users))


@dataclass(frozen=True, slots=True)
class Group:
    """Layers that share one rectangle in one time step."""

    layers: tuple[int, ...]
    rect: Rect
    key: int = field(init=False, repr=False, compare=False)  # cached hash (plans are dict keys)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", hash((self.layers, self.rect)))

    def __hash__(self) -> int:
        return self.key


@dataclass(frozen=True, slots=True)
class Step:
    """One time step: concurrent groups and the number of sub-batches they pipeline."""

    groups: tuple[Group, ...]
    nsub: int = 1
    key: int = field(init=False, repr=False, compare=False)  # cached hash (plans are dict keys)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", hash((self.groups, self.nsub)))

    def __hash__(self) -> int:
        return self.key


@dataclass(slots=True)
class Cost:
    """Totals of a plan (or one step)."""

    energy_pj: float = 0.0
    latency_cycles: float = 0.0
    dram_bytes: float = 0.0
    noc_byte_hops: float = 0.0
    breakdown: dict[str, float] = field(default_factory=dict)  # energy by component

    @property
    def edp(self) -> float:
        """Energy-delay product (pJ x cycles)."""
        return self.energy_pj * self.latency_cycles

    def add(self, other: Cost) -> None:
        """Accumulate another cost (steps are additive)."""
        self.energy_pj += other.energy_pj
        self.latency_cycles += other.latency_cycles
        self.dram_bytes += other.dram_bytes
        self.noc_byte_hops += other.noc_byte_hops
        for k, v in other.breakdown.items():
            self.breakdown[k] = self.breakdown.get(k, 0.0) + v


def compute_cycles(p: MeshParams, macs: float, vops: float, cores: int) -> float:
    """Cycles of `macs` MACs and `vops` element operations spread over `cores` cores."""
    return math.ceil(macs / (cores * p.macs_per_core)) + math.ceil(
        vops / (cores * p.vector_per_core)
    )


@lru_cache(maxsize=4096)
def dram_hops(rows: int, cols: int, rect: Rect) -> float:
    """Mean hops from the DRAM ports (every row of columns 0 and cols-1) to the rect's cores."""
    xs = np.arange(rect.x, rect.x + rect.w, dtype=float)
    ys = np.arange(rect.y, rect.y + rect.h, dtype=float)
    ports = np.arange(rows, dtype=float)
    dy = np.abs(ys[:, None] - ports[None, :]).mean()
    dx = (xs.mean() + (cols - 1 - xs).mean()) / 2
    return float(dx + dy)


def rect_hops(a: Rect, b: Rect) -> float:
    """Manhattan distance between the centres of two rectangles."""
    (ax, ay), (bx, by) = a.center, b.center
    return abs(ax - bx) + abs(ay - by)


class LinkLoad:
    """Bytes on every directed mesh link under XY routing (rectangle-level spreading)."""

    __slots__ = ("east", "west", "north", "south")

    def __init__(self, rows: int, cols: int) -> None:
        self.east = np.zeros((rows, max(cols - 1, 1)))
        self.west = np.zeros_like(self.east)
        self.south = np.zeros((cols, max(rows - 1, 1)))
        self.north = np.zeros_like(self.south)

    def _x(self, y0: int, y1: int, xa: int, xb: int, per_row: float) -> None:
        if xb > xa:
            self.east[y0:y1, xa:xb] += per_row
        elif xa > xb:
            self.west[y0:y1, xb:xa] += per_row

    def _y(self, x0: int, x1: int, ya: int, yb: int, per_col: float) -> None:
        if yb > ya:
            self.south[x0:x1, ya:yb] += per_col
        elif ya > yb:
            self.north[x0:x1, yb:ya] += per_col

    def transfer(self, a: Rect, b: Rect, nbytes: float) -> None:
        """X along a's rows from a's centre column, then Y along b's columns."""
        ax, ay = a.x + (a.w - 1) // 2, a.y + (a.h - 1) // 2
        bx, by = b.x + (b.w - 1) // 2, b.y + (b.h - 1) // 2
        self._x(a.y, a.y + a.h, ax, bx, nbytes / a.h)
        self._y(b.x, b.x + b.w, ay, by, nbytes / b.w)

    def dram(self, rect: Rect, nbytes: float, cols: int, rows: int) -> None:
        """Half the bytes through the west ports, half through the east ports (every row)."""
        bx, by = rect.x + (rect.w - 1) // 2, rect.y + (rect.h - 1) // 2
        self._x(0, rows, 0, bx, nbytes / 2 / rows)
        self._x(0, rows, cols - 1, bx, nbytes / 2 / rows)
        self._y(rect.x, rect.x + rect.w, rows // 2, by, nbytes / rect.w / 2)

    def peak(self) -> float:
        """Bytes on the most loaded link."""
        return float(max(self.east.max(), self.west.max(), self.north.max(), self.south.max()))


def _placement(steps: tuple[Step, ...], n: int) -> tuple[list[int], list[Rect], list[int]]:
    step_of = [-1] * n
    rect_of: list[Rect] = [Rect(0, 0, 1, 1)] * n
    group_of = [-1] * n
    for s, step in enumerate(steps):
        for g, group in enumerate(step.groups):
            for layer in group.layers:
                step_of[layer], rect_of[layer], group_of[layer] = s, group.rect, g
    return step_of, rect_of, group_of


ON_STEP, ON_CHIP, IN_DRAM = 0, 1, 2  # where a step's input tensor comes from


def evaluate(
    p: MeshParams, wl: Workload, steps: tuple[Step, ...], cache: dict | None = None
) -> Cost:
    """Energy, latency and traffic of a plan; traffic inside a group is not charged.

    `cache` (owned by the caller, one per workload and params) memoises step costs.
    """
    n = len(wl.layers)
    step_of, rect_of, group_of = _placement(steps, n)
    eb, batch = p.elem_bytes, wl.batch
    # residency of each output: on chip for the next step's consumers when it fits
    keeps = [False] * n
    to_dram = [False] * n
    for i, layer in enumerate(wl.layers):
        later = [step_of[c] for c in wl.consumers[i] if step_of[c] > step_of[i]]
        fits = layer.out * eb * batch <= KEEP_FRACTION * p.sram_per_core * rect_of[i].cores
        keeps[i] = fits and any(s == step_of[i] + 1 for s in later)
        to_dram[i] = layer.is_output or any(s > step_of[i] + (1 if fits else 0) for s in later)
    total = Cost()
    for s, step in enumerate(steps):
        sources: dict[int, tuple[int, Rect, int]] = {}
        for group in step.groups:
            for i in group.layers:
                for src, _ in wl.layers[i].inputs:
                    if step_of[src] == s:
                        sources[src] = (ON_STEP, rect_of[src], group_of[src])
                    elif step_of[src] == s - 1 and keeps[src]:
                        sources[src] = (ON_CHIP, rect_of[src], -1)
                    else:
                        sources[src] = (IN_DRAM, rect_of[src], -1)
        flags = tuple(to_dram[i] for group in step.groups for i in group.layers)
        key = (step, tuple(sorted(sources.items())), flags)
        cost = cache.get(key) if cache is not None else None
        if cost is None:
            cost = _step_cost(p, wl, step, sources, dict(zip(_layers(step), flags, strict=True)))
            if cache is not None:
                cache[key] = cost
        total.add(cost)
    return total


def _layers(step: Step) -> list[int]:
    return [i for group in step.groups for i in group.layers]


def _step_cost(
    p: MeshParams,
    wl: Workload,
    step: Step,
    sources: dict[int, tuple[int, Rect, int]],
    to_dram: dict[int, bool],
) -> Cost:
    """Cost of one step (see docs/cost-model.md for the formulas)."""
    eb, batch, nsub = p.elem_bytes, wl.batch, step.nsub
    links = LinkLoad(p.rows, p.cols)
    energy = {"mac": 0.0, "buffer": 0.0, "noc": 0.0, "dram": 0.0}
    dram_total = noc_hops = 0.0
    stage_time = 0.0
    deps: dict[int, set[int]] = {g: set() for g in range(len(step.groups))}
    for g, group in enumerate(step.groups):
        rect, members = group.rect, set(group.layers)
        macs = sum(wl.layers[i].macs for i in group.layers) * batch
        vops = sum(wl.layers[i].vops for i in group.layers) * batch
        weights = sum(wl.layers[i].weights for i in group.layers) * eb
        dram_in = dram_out = sram_in = sram_out = 0.0
        seen: set[int] = set()
        for i in group.layers:
            layer = wl.layers[i]
            dram_in += layer.ext_in * eb * batch
            for src, elems in layer.inputs:
                if src in members or src in seen:
                    continue
                seen.add(src)
                nbytes = elems * eb * batch
                sram_in += nbytes
                kind, src_rect, src_group = sources[src]
                if kind == IN_DRAM:
                    dram_in += nbytes
                    continue
                if kind == ON_STEP:
                    deps[g].add(src_group)
                links.transfer(src_rect, rect, nbytes)
                noc_hops += nbytes * rect_hops(src_rect, rect)
            outside = any(c not in members for c in wl.consumers[i])
            if to_dram[i] or outside:
                sram_out += layer.out * eb * batch
            if to_dram[i]:
                dram_out += layer.out * eb * batch
        work_set = weights + (sram_in + sram_out) / nsub
        reloads = 1 if work_set <= p.sram_per_core * rect.cores else nsub
        dram_in += weights * reloads
        sram_in += weights * reloads
        links.dram(rect, dram_in + dram_out, p.cols, p.rows)
        noc_hops += (dram_in + dram_out) * dram_hops(p.rows, p.cols, rect)
        dram_total += dram_in + dram_out
        energy["mac"] += macs * p.mac_pj + vops * p.vector_pj
        energy["buffer"] += (
            sram_in * p.sram_write_pj + sram_out * p.sram_read_pj + macs * p.core_buffer_pj_per_mac
        )
        load = dram_in / p.dram_bandwidth
        store = dram_out / p.dram_bandwidth
        comp = compute_cycles(p, macs, vops, rect.cores)
        stage_time = max(stage_time, max(load, comp, store) / nsub)
    energy["noc"] = noc_hops * 8 * p.noc_pj_bit_hop
    energy["dram"] = dram_total * 8 * p.dram_pj_bit
    pipeline = stage_time * (nsub + _depth(deps) - 1)
    shared = max(dram_total / p.dram_bandwidth, links.peak() / p.noc_bandwidth)
    return Cost(
        energy_pj=sum(energy.values()),
        latency_cycles=max(pipeline, shared),
        dram_bytes=dram_total,
        noc_byte_hops=noc_hops,
        breakdown=energy,
    )


def _depth(deps: dict[int, set[int]]) -> int:
    """Pipeline stages: groups on the longest dependency chain of the step."""
    memo: dict[int, int] = {}

    def depth(g: int) -> int:
        if g not in memo:
            memo[g] = 1 + max((depth(d) for d in deps[g]), default=0)
        return memo[g]

    return max((depth(g) for g in deps), default=1)
