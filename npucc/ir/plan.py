"""The mesh plan IR: time steps of layer groups on rectangles of cores, with their costs.

A plan is a sequence of time steps; a step holds groups of layers, each on a rectangle of
cores, and splits the batch into `nsub` sub-batches that flow through the step's groups as a
pipeline. `Workload` is what a plan is made for: the layers' per-sample loads in topological
order and the batch. The plan stores the costs it was priced with (the planner computes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from npucc.errors import NpuccError
from npucc.ir.graph import Graph


@lru_cache(maxsize=65536)
def _coords(x: int, y: int, w: int, h: int) -> tuple[tuple[int, int], ...]:
    """`Rect.coords` (memoised: the plan search asks it of the same rectangles often)."""
    return tuple((r, c) for r in range(y, y + h) for c in range(x, x + w))


@lru_cache(maxsize=65536)
def _indices(x: int, y: int, w: int, h: int, cols: int) -> tuple[int, ...]:
    """`Rect.indices` (memoised)."""
    return tuple(r * cols + c for r, c in _coords(x, y, w, h))


# NOTE: `Rect`, `Group` and `Step` are values, never assigned to (equal and hashed by their
# fields), not declared frozen: a frozen class's `__init__` sets each field through
# `object.__setattr__`, and a plan search makes them by the ten thousand (as ConvGeom's note)


@dataclass(slots=True, unsafe_hash=True)
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

    def coords(self) -> tuple[tuple[int, int], ...]:
        """(row, column) of its cores in row-major order (the order tiles go round-robin)."""
        return _coords(self.x, self.y, self.w, self.h)

    def indices(self, cols: int) -> tuple[int, ...]:
        """Row-major core indices of its cores on a mesh `cols` columns wide."""
        return _indices(self.x, self.y, self.w, self.h, cols)

    def to_text(self) -> str:
        """Compact form x,y+wxh."""
        return f"{self.x},{self.y}+{self.w}x{self.h}"


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


@dataclass(slots=True)
class Group:
    """Layers that share one rectangle in one time step."""

    layers: tuple[int, ...]
    rect: Rect
    key: int = field(init=False, repr=False, compare=False)  # cached hash (plans are dict keys)

    def __post_init__(self) -> None:
        self.key = hash((self.layers, self.rect))

    def __hash__(self) -> int:
        return self.key


@dataclass(slots=True)
class Step:
    """One time step: concurrent groups and the number of sub-batches they pipeline.

    Consecutive steps flagged `loop` form one sub-batch loop with their first step: the loop
    runs all its steps on one sub-batch, then the next; a lone step pipelines its sub-batches.
    """

    groups: tuple[Group, ...]
    nsub: int = 1
    loop: bool = False  # runs inside the previous step's sub-batch loop (same nsub)
    key: int = field(init=False, repr=False, compare=False)  # cached hash (plans are dict keys)

    def __post_init__(self) -> None:
        self.key = hash((self.groups, self.nsub, self.loop))

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

    def add(self, other: Cost, times: float = 1.0) -> None:
        """Accumulate another cost `times` over (steps are additive)."""
        self.energy_pj += other.energy_pj * times
        self.latency_cycles += other.latency_cycles * times
        self.dram_bytes += other.dram_bytes * times
        self.noc_byte_hops += other.noc_byte_hops * times
        for k, v in other.breakdown.items():
            self.breakdown[k] = self.breakdown.get(k, 0.0) + v * times


def is_safe(wl: Workload, steps: tuple[Step, ...]) -> bool:
    """Every consumer's inputs are produced in the same or an earlier step, and the groups of
    a step depend on each other without cycles (so sub-batches can flow as a pipeline)."""
    step_of: dict[int, int] = {}
    group_of: dict[int, int] = {}
    for s, step in enumerate(steps):
        for g, group in enumerate(step.groups):
            for layer in group.layers:
                step_of[layer], group_of[layer] = s, g
    for s, step in enumerate(steps):
        deps: dict[int, set[int]] = {g: set() for g in range(len(step.groups))}
        for g, group in enumerate(step.groups):
            for layer in group.layers:
                for src, _ in wl.layers[layer].inputs:
                    if step_of[src] > s:
                        return False
                    if step_of[src] == s and group_of[src] != g:
                        deps[g].add(group_of[src])
        if not _acyclic(deps):
            return False
    return True


def _acyclic(deps: dict[int, set[int]]) -> bool:
    """True when the dependency graph (node -> its prerequisites) has no cycle."""
    state: dict[int, int] = {}

    def visit(v: int) -> bool:
        if state.get(v) == 1:
            return False
        if state.get(v) == 2:
            return True
        state[v] = 1
        ok = all(visit(u) for u in deps[v])
        state[v] = 2
        return ok

    return all(visit(v) for v in deps)


@dataclass(frozen=True, slots=True)
class MeshPlan:
    """A complete plan of `workload` on a rows x cols mesh, with the costs it was priced with.

    `cost` is the plan's estimate (the execution-faithful one when `priced_by` is "exec");
    `analytic` is always the SET-aligned mesh model's.
    """

    workload: Workload
    rows: int
    cols: int
    steps: tuple[Step, ...]
    method: str
    cost: Cost
    analytic: Cost
    priced_by: str = "exec"  # exec | set
    search_s: float = 0.0
    offchip: frozenset[str] = frozenset()  # tensors sent through DDR though they fit on chip

    def verify(self) -> None:
        """Every layer exactly once, rectangles disjoint and inside the mesh, and safe."""
        seen: set[int] = set()
        for s, step in enumerate(self.steps):
            if step.nsub < 1 or self.workload.batch % step.nsub:
                raise NpuccError(f"step {s}: {step.nsub} sub-batches do not divide the batch")
            if step.loop and (s == 0 or self.steps[s - 1].nsub != step.nsub):
                raise NpuccError(f"step {s}: in a sub-batch loop with a different sub-batch count")
            used: set[tuple[int, int]] = set()
            for group in step.groups:
                r = group.rect
                if r.w < 1 or r.h < 1 or r.x + r.w > self.cols or r.y + r.h > self.rows:
                    raise NpuccError(f"step {s}: rectangle {r.to_text()} outside the mesh")
                cells = set(r.coords())
                if cells & used:
                    raise NpuccError(f"step {s}: rectangle {r.to_text()} overlaps another")
                used |= cells
                if seen & set(group.layers):
                    raise NpuccError(f"step {s}: a layer is planned twice")
                seen |= set(group.layers)
        if seen != set(range(len(self.workload.layers))):
            raise NpuccError("the plan does not cover every layer")
        if not is_safe(self.workload, self.steps):
            raise NpuccError("unsafe plan: a layer reads a tensor produced in a later step")

    def to_text(self) -> str:
        """One line per step and per group: rectangle and layer names."""
        c = self.analytic
        names = [layer.name for layer in self.workload.layers]
        lines = [
            f"mesh-plan {self.workload.name!r} method={self.method} batch={self.workload.batch}"
            f" mesh={self.cols}x{self.rows} steps={len(self.steps)}",
            f"  cost energy_pj={c.energy_pj:.6g} latency_cycles={c.latency_cycles:.6g}"
            f" edp={c.edp:.6g} dram_bytes={int(c.dram_bytes)} noc_byte_hops={int(c.noc_byte_hops)}",
        ]
        if self.priced_by == "exec":
            x = self.cost
            lines.append(
                f"  exec-cost energy_pj={x.energy_pj:.6g} latency_cycles={x.latency_cycles:.6g}"
                f" edp={x.edp:.6g} dram_bytes={int(x.dram_bytes)}"
            )
        if self.offchip:
            lines.append(f"  offchip {', '.join(repr(t) for t in sorted(self.offchip))}")
        for s, step in enumerate(self.steps):
            loop = " (same loop)" if step.loop else ""
            lines.append(f"  step {s} sub-batches={step.nsub}{loop}")
            for group in step.groups:
                layers = ", ".join(f"{names[i]!r}" for i in group.layers)
                lines.append(f"    {group.rect.to_text()} : {layers}")
        return "\n".join(lines)


@dataclass(slots=True)
class PlannedGraph:
    """The graph and its mesh plan: what the multi-core lowering reads."""

    graph: Graph
    plan: MeshPlan

    def verify(self) -> None:
        """Verify the graph and the plan."""
        self.graph.verify()
        self.plan.verify()

    def to_text(self) -> str:
        """The plan's text form (the graph prints with its own pass dumps); on one core, where
        there is nothing to plan, the graph's."""
        if self.plan.rows * self.plan.cols == 1:
            return self.graph.to_text()
        return self.plan.to_text()
