"""The estimate's runs of a sub-batch loop's staged constants (the lowering's `stage_const`):
what `ExecCostModel._priced` sets before a split layer's first sub-batch."""

from __future__ import annotations

import math

from npucc.backend.estimate.list_schedule import READY_AT, LayerRun, RunCost, core_spans
from npucc.backend.estimate.profile import stage_profile
from npucc.backend.hypercut.onchip_plan import staged_key
from npucc.ir.graph import Graph
from npucc.ir.onchip import OnChip
from npucc.target import Target
from npucc.target.cost import ddr_channel_held


def stage_runs(
    graph: Graph, target: Target, index: int, loop: int, onchip: dict[str, OnChip]
) -> list[LayerRun]:
    """The stagings of layer `index`'s constants that sub-batch loop `loop` keeps on chip
    (the lowering's `stage_const`, before the layer's first sub-batch): each home core
    copies its chunk from DDR into its on-chip buffer."""
    runs = []
    cols, eb = target.mesh.cols, target.elem_bytes
    for name in graph.layers[index].inputs:
        home = onchip.get(staged_key(name, loop)) if name else None
        if home is None:
            continue
        elems = math.prod(graph.tensors[name].shape)
        sizes = [min(home.chunk, elems - i * home.chunk) for i in range(len(home.homes))]
        timing = stage_profile(target, sizes[0]).timing(1)
        ys = [y for y, _ in home.homes]
        xs = [x for _, x in home.homes]
        energy = sum(stage_profile(target, size).energy_pj for size in sizes)
        cost = RunCost(
            timing, energy, elems * eb, ddr_channel_held(target, elems * eb), 0,
            timing[0].mte2_tail,
        )  # fmt: skip
        cores = tuple(y * cols + x for y, x in home.homes)
        box = (min(ys), min(xs), max(ys), max(xs))
        runs.append(LayerRun(cost, core_spans(cores), box, (), (), READY_AT))  # NOTE: read by none
    return runs
