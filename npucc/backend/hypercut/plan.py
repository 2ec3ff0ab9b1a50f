"""The mesh plan: time steps x layer groups -> sub-grid rectangle, batch split; and its checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from npucc.backend.hypercut.exec_cost import ExecCostModel
from npucc.errors import NpuccError
from npucc.target.mesh_cost import Cost, MeshParams, Step, Workload, evaluate


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
    """A complete plan: steps of single-layer groups on disjoint rectangles, with its cost.

    With `execution` (a plan that will be lowered and run), `cost` is the execution-faithful
    estimate; `analytic_cost` is always the SET-aligned mesh model's.
    """

    workload: Workload
    params: MeshParams
    steps: tuple[Step, ...]
    method: str
    search_s: float = 0.0
    execution: ExecCostModel | None = field(default=None, compare=False)
    offchip: frozenset[str] = frozenset()  # tensors sent through DDR though they fit on chip

    def cost(self) -> Cost:
        """The plan's estimate: execution-faithful when the plan has an ExecCostModel."""
        if self.execution is not None:
            return self.execution.evaluate(self.steps, self.offchip)
        return self.analytic_cost()

    def analytic_cost(self) -> Cost:
        """The SET-aligned mesh cost model's estimate (npucc.target.mesh_cost)."""
        return evaluate(self.params, self.workload, self.steps)

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
                if (
                    r.w < 1
                    or r.h < 1
                    or r.x + r.w > self.params.cols
                    or r.y + r.h > self.params.rows
                ):
                    raise NpuccError(f"step {s}: rectangle {r.to_text()} outside the mesh")
                cells = {(x, y) for x in range(r.x, r.x + r.w) for y in range(r.y, r.y + r.h)}
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
        c = self.analytic_cost()
        names = [layer.name for layer in self.workload.layers]
        lines = [
            f"mesh-plan {self.workload.name!r} method={self.method} batch={self.workload.batch}"
            f" mesh={self.params.cols}x{self.params.rows} steps={len(self.steps)}",
            f"  cost energy_pj={c.energy_pj:.6g} latency_cycles={c.latency_cycles:.6g}"
            f" edp={c.edp:.6g} dram_bytes={int(c.dram_bytes)} noc_byte_hops={int(c.noc_byte_hops)}",
        ]
        if self.execution is not None:
            x = self.execution.evaluate(self.steps, self.offchip)
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
