"""The SET-aligned analytic mesh model: energy and latency of a plan (`npucc.ir.plan`).

It follows the HyperCut/SET papers' platform description (docs/cost-model.md states every
formula); the plan the lowering executes is priced by `exec_cost`. Units: bytes, cycles,
picojoules. Costs add over steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np

from npucc.ir.plan import Cost, Group, MeshPlan, Rect, Step, Workload
from npucc.target import Target

KEEP_FRACTION = 0.5  # share of a rectangle's SRAM a tensor may occupy to stay on chip
OPERAND_REUSE = 16  # MACs per operand element fetched from the core buffer (cube m0/n0)


@dataclass(frozen=True, slots=True)
class MeshParams:
    """Every hardware figure the mesh cost model uses (bytes per cycle, pJ)."""

    rows: int
    cols: int
    macs_per_core: int  # the papers' tile ([mesh] macs_per_core), not [cube]
    vector_per_core: int  # element operations per cycle per core (pooling, add, softmax)
    sram_per_core: int  # bytes: the papers' tile ([mesh] sram_per_core), not [memory]
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
    # True: every tensor read more than one pipeline stage later goes through DRAM (SET's
    # `is_shortcut` accounting); False: only when its waiting sub-batches overflow the SRAM
    skips_via_dram: bool = False

    @classmethod
    def from_target(cls, target: Target, **overrides: Any) -> MeshParams:
        """Read the [mesh] and [energy] sections (and dtype) of a target; overrides win.

        NOTE: the per-core MACs and SRAM are the SET/HyperCut papers' tile figures
        (`target.mesh.set_model`), not the core that `[cube]` and `[memory]` describe.
        `overrides` name MeshParams fields, each with a value of that field's type.
        """
        m, e = target.mesh, target.energy
        eb = target.elem_bytes
        operand = 2 * eb * e.byte_L1 / OPERAND_REUSE
        params = cls(
            rows=m.rows,
            cols=m.cols,
            macs_per_core=m.set_model.macs_per_core,
            vector_per_core=target.vector.width,
            sram_per_core=m.set_model.sram_per_core,
            noc_bandwidth=float(m.noc_bandwidth),
            noc_hop_latency=m.noc_hop_latency,
            dram_bandwidth=float(m.ddr_bandwidth),
            elem_bytes=eb,
            mac_pj=e.mac,
            vector_pj=e.vector_op,
            sram_read_pj=e.byte_L1,
            sram_write_pj=e.byte_L1,
            core_buffer_pj_per_mac=operand,
            noc_pj_bit_hop=e.noc_bit_hop,
            dram_pj_bit=e.ddr_bit,
        )
        return replace(params, **overrides)

    @property
    def whole(self) -> Rect:
        """The whole mesh."""
        return Rect(0, 0, self.cols, self.rows)


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


@lru_cache(maxsize=65536)
def rect_hops(a: Rect, b: Rect) -> float:
    """Mean Manhattan distance from a core of `a` to a core of `b` (a tensor spread over a's
    cores is redistributed over b's: inside one rectangle too)."""
    return _span(a.x, a.w, b.x, b.w) + _span(a.y, a.h, b.y, b.h)


@lru_cache(maxsize=4096)
def _span(a0: int, an: int, b0: int, bn: int) -> float:
    """Mean |i - j| for i in a0..a0+an-1 and j in b0..b0+bn-1."""
    i = np.arange(a0, a0 + an)[:, None]
    j = np.arange(b0, b0 + bn)[None, :]
    return float(np.abs(i - j).mean())


class LinkLoad:
    """Bytes on every directed mesh link under XY routing (rectangle-level spreading)."""

    __slots__ = ("load", "east", "west", "north", "south")

    def __init__(self, rows: int, cols: int) -> None:
        side, across, along = max(rows, cols), max(cols - 1, 1), max(rows - 1, 1)
        self.load = np.zeros((4, side, max(across, along)))  # one array: one max for the peak
        self.east, self.west = self.load[0, :rows, :across], self.load[1, :rows, :across]
        self.south, self.north = self.load[2, :cols, :along], self.load[3, :cols, :along]

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
        return float(self.load.max())


def loop_bounds(steps: tuple[Step, ...]) -> list[tuple[int, int]]:
    """First and end step of every sub-batch loop, in order."""
    out: list[tuple[int, int]] = []
    for s, step in enumerate(steps):
        if step.loop and s:
            out[-1] = (out[-1][0], s + 1)
        else:
            out.append((s, s + 1))
    return out


ON_STEP, ON_CHIP, IN_DRAM = 0, 1, 2  # where a step's input tensor comes from


def evaluate(
    p: MeshParams, wl: Workload, steps: tuple[Step, ...], cache: dict | None = None
) -> Cost:
    """Energy, latency and traffic of a plan; traffic inside a group is not charged.

    `cache` (owned by the caller, one per workload and params) memoises step costs.
    """
    total = Cost()
    for cost in step_costs(p, wl, steps, cache):
        total.add(cost)
    return total


def plan_edp(p: MeshParams, wl: Workload, steps: tuple[Step, ...], cache: dict) -> float:
    """EDP of a plan (the search's fast path of `evaluate`)."""
    costs = step_costs(p, wl, steps, cache)
    return sum(c.energy_pj for c in costs) * sum(c.latency_cycles for c in costs)


def step_costs(
    p: MeshParams, wl: Workload, steps: tuple[Step, ...], cache: dict | None = None
) -> list[Cost]:
    """Cost of every step of a (safe) plan, including the sub-batch loop it sits in."""
    memo: dict = {} if cache is None else cache
    out: list[Cost] = []
    for a, b in loop_bounds(steps):
        out.extend(loop_costs(p, wl, steps, a, b, memo))
    return out


def loop_costs(
    p: MeshParams, wl: Workload, steps: tuple[Step, ...], a: int, b: int, cache: dict
) -> list[Cost]:
    """Costs of steps a..b-1, one sub-batch loop of a (safe) plan.

    They are the same in every plan with the same groups in the step before the loop (their
    tensors may stay on chip for the loop's first step) and after it (the last step's may
    stay on chip for it), so `cache` memoises them per loop as well as per step.
    """
    n = len(steps)
    key = (steps[a - 1].groups if a else None, steps[a:b], steps[b].groups if b < n else None)
    costs = cache.get(key)
    if costs is None:
        costs = cache[key] = _loop_costs(p, wl, steps, a, b, cache)
    return costs


def _loop_costs(
    p: MeshParams, wl: Workload, steps: tuple[Step, ...], a: int, b: int, memo: dict
) -> list[Cost]:
    """Costs of steps a..b-1, one sub-batch loop; producers before step a-1 and consumers
    after step b exchange their tensors through DRAM (plans are safe)."""
    where: dict[int, tuple[int, Rect, int]] = {}  # layer -> step, rectangle, group
    for s in range(max(a - 1, 0), min(b + 1, len(steps))):
        for g, group in enumerate(steps[s].groups):
            for i in group.layers:
                where[i] = (s, group.rect, g)
    eb, batch, sram = p.elem_bytes, wl.batch, KEEP_FRACTION * p.sram_per_core
    looped = b - a > 1
    weights = sum(wl.layers[i].weights for step in steps[a:b] for i in _layers(step))
    mode = (looped, looped and weights * eb <= sram * p.rows * p.cols)
    layers, consumers, nowhere = wl.layers, wl.consumers, (b + 1, p.whole, -1)

    def kept(i: int, s: int, t: int) -> bool:
        """Layer i's output (step s) stays on chip until step t: one sub-batch of it fits
        when both steps are in this loop, the whole batch when t is the next step."""
        nbytes, capacity = layers[i].out * eb * batch, sram * where[i][1].cores
        in_loop = looped and a <= s and t < b
        return (in_loop and nbytes <= capacity * steps[s].nsub) or (
            t == s + 1 and nbytes <= capacity
        )

    out: list[Cost] = []
    for s in range(a, b):
        step = steps[s]
        places: dict[int, tuple[int, Rect, int]] = {}
        to_dram: dict[int, bool] = {}
        for group in step.groups:
            for i in group.layers:
                for src, _ in layers[i].inputs:
                    t, rect, g = where.get(src, nowhere)  # not in the window: in DRAM
                    if t == s:
                        places[src] = (ON_STEP, rect, g)
                    elif t < s and kept(src, t, s):
                        places[src] = (ON_CHIP, rect, -1)
                    else:
                        places[src] = (IN_DRAM, rect, -1)
                dram = layers[i].is_output
                for c in consumers[i]:
                    t = where.get(c, nowhere)[0]  # not in the window: after it
                    if t > s and not kept(i, s, t):
                        dram = True
                to_dram[i] = dram
        # an on-chip input's cost depends on where its producer sits
        sources = tuple(
            sorted(
                (src, kind, rect if kind == ON_CHIP else None)
                for src, (kind, rect, _) in places.items()
            )
        )
        key = (step.groups, step.nsub, sources, tuple(to_dram.values()), mode)
        cost = memo.get(key)
        if cost is None:
            if looped:  # one sub-batch per loop iteration; weights once if resident
                sub = batch // step.nsub
                first = _step_cost(p, wl, step.groups, places, to_dram, sub, 1, 1)
                cost = Cost()
                cost.add(first)
                again = (
                    _step_cost(p, wl, step.groups, places, to_dram, sub, 1, 0) if mode[1] else first
                )
                cost.add(again, step.nsub - 1)
            else:
                cost = _step_cost(p, wl, step.groups, places, to_dram, batch, step.nsub, -1)
            memo[key] = cost
        out.append(cost)
    return out


def _layers(step: Step) -> list[int]:
    return [i for group in step.groups for i in group.layers]


def _step_cost(
    p: MeshParams,
    wl: Workload,
    groups: tuple[Group, ...],
    sources: dict[int, tuple[int, Rect, int]],
    to_dram: dict[int, bool],
    batch: int,
    nsub: int,
    weight_loads: int,
) -> Cost:
    """Cost of one step on `batch` samples pipelined in `nsub` sub-batches (see
    docs/cost-model.md); weights are loaded `weight_loads` times (-1: once if they fit)."""
    eb = p.elem_bytes
    links = LinkLoad(p.rows, p.cols)
    energy = {"mac": 0.0, "buffer": 0.0, "noc": 0.0, "dram": 0.0}
    dram_total = noc_hops = 0.0
    stage_time = 0.0
    depth, skips = _stages(p, wl, groups, sources, batch, nsub)
    spilled = {src for _, src in skips}  # producers that write a skipped tensor to DRAM
    for g, group in enumerate(groups):
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
                kind, src_rect, _ = sources[src]
                if kind == IN_DRAM or (g, src) in skips:
                    dram_in += nbytes
                    continue
                links.transfer(src_rect, rect, nbytes)
                noc_hops += nbytes * rect_hops(src_rect, rect)
            outside = any(c not in members for c in wl.consumers[i])
            if to_dram[i] or outside:
                sram_out += layer.out * eb * batch
            if to_dram[i] or i in spilled:
                dram_out += layer.out * eb * batch
        reloads = weight_loads
        if reloads < 0:
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
    pipeline = stage_time * (nsub + depth - 1)
    shared = max(dram_total / p.dram_bandwidth, links.peak() / p.noc_bandwidth)
    return Cost(
        energy_pj=sum(energy.values()),
        latency_cycles=max(pipeline, shared),
        dram_bytes=dram_total,
        noc_byte_hops=noc_hops,
        breakdown=energy,
    )


def _stages(
    p: MeshParams,
    wl: Workload,
    groups: tuple[Group, ...],
    sources: dict[int, tuple[int, Rect, int]],
    batch: int,
    nsub: int,
) -> tuple[int, set[tuple[int, int]]]:
    """Pipeline depth of a step and its (consumer group, producer) edges that go via DRAM."""
    # A group's stage is 1 + the deepest stage it reads from in this step. A tensor read
    # d > 1 stages after it is made waits d sub-batch slots in its consumer's SRAM, so
    # min(d, nsub) sub-batches of it are held there; when they overflow KEEP_FRACTION of
    # that SRAM, the producer writes the tensor to DRAM and the consumer reads it back.
    edges: list[tuple[int, int, int, int]] = []  # consumer group, producer, its group, elems
    deps: dict[int, set[int]] = {g: set() for g in range(len(groups))}
    for g, group in enumerate(groups):
        for i in group.layers:
            for src, elems in wl.layers[i].inputs:
                kind, _, src_group = sources[src]
                if kind == ON_STEP and src_group != g:
                    deps[g].add(src_group)
                    edges.append((g, src, src_group, elems))
    stage: dict[int, int] = {}

    def level(g: int) -> int:
        if g not in stage:
            stage[g] = 1 + max((level(d) for d in deps[g]), default=0)
        return stage[g]

    depth = max((level(g) for g in deps), default=1)
    skips: set[tuple[int, int]] = set()
    sub_bytes = p.elem_bytes * batch / nsub
    for g, src, src_group, elems in edges:
        distance = stage[g] - stage[src_group]
        held = min(distance, nsub) * elems * sub_bytes
        room = KEEP_FRACTION * p.sram_per_core * groups[g].rect.cores
        if distance > 1 and (p.skips_via_dram or held > room):
            skips.add((g, src))
    return depth, skips


def priced_plan(p: MeshParams, wl: Workload, steps: tuple[Step, ...], method: str) -> MeshPlan:
    """A MeshPlan of `steps` priced by this model alone (its `cost` is the analytic one)."""
    cost = evaluate(p, wl, steps)
    return MeshPlan(wl, p.rows, p.cols, steps, method, cost, cost)
