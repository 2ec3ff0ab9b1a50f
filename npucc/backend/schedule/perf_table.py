"""The per-layer performance table of a compiled program (`--perf-csv`, Program.stats["layers"]).

Each tile node names the graph layer it was lowered from (`TileNode.layer`; a spill node its
buffer's). Per layer, over every core, as scheduled (docs/roofline.md):

    macs            the layer's MACs (the model's math: `LayerWork.macs`)
    cycles          its span: the latest finish minus the earliest start of its pipe nodes
    start, finish   that span in the schedule (each core's own clock)
    busiest_pipe    the pipe its nodes occupy longest, and those busy cycles (busiest_cycles)
    cube_cycles     the cycles its nodes occupy the cube
    cube_util       macs / (cycles x m0 n0 k0 x cores it ran on): the cube's share of its peak
    ddr_read/write  DDR bytes its nodes move (its spills included)
    onchip_peak     the most L1+UB bytes live (any layer's buffers) at any of its nodes, in
                    schedule order (npucc.ir.residency: the one definition of residency)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from npucc.backend.schedule.dan.headroom import peak_steps
from npucc.backend.schedule.roofline import Traffic, node_layers
from npucc.ir.isa import PIPES
from npucc.ir.scheduled_program import ScheduledProgram

COLUMNS = (
    "layer", "name", "op", "macs", "cycles", "start", "finish", "busiest_pipe", "busiest_cycles",
    "cube_cycles", "cube_util", "ddr_read", "ddr_write", "onchip_peak",
)  # fmt: skip


@dataclass(slots=True)
class LayerRow:
    """One row of the table (see the module docstring for each column)."""

    layer: int
    name: str
    op: str
    macs: int
    cycles: int = 0
    start: int = 0
    finish: int = 0
    busiest_pipe: str = "-"
    busiest_cycles: int = 0
    cube_cycles: int = 0
    cube_util: float = 0.0
    ddr_read: int = 0
    ddr_write: int = 0
    onchip_peak: int = 0


def layer_table(scheduled: ScheduledProgram, traffic: Sequence[Traffic]) -> list[LayerRow]:
    """One row per non-view layer of the program (layers with no node have zero cycles;
    `traffic`: each core's `node_traffic`)."""
    program = scheduled.program
    target = program.target
    count = len(program.layers)
    pipe_index = {p: k for k, p in enumerate(PIPES)}
    # per layer, over every core: its peak live L1+UB bytes at its nodes, whether pipe nodes
    # of it ran, the cores they ran on, their earliest start and latest finish, per pipe in
    # PIPES their busy cycles, and the DDR bytes its nodes read and write
    peak = np.zeros(count, np.int64)
    ran = np.zeros(count, np.bool_)
    cores = np.zeros(count, np.int64)
    first = np.full(count, np.iinfo(np.int64).max, np.int64)
    last = np.zeros(count, np.int64)
    busy = np.zeros((count, len(PIPES)), np.int64)
    read = [0] * count
    write = [0] * count
    for (_, rep), moves in zip(scheduled.schedules, traffic, strict=True):
        layers = node_layers(rep)
        order = np.array(rep.order, np.int64)
        layer_at = np.array(layers, np.int64)[order]
        counted = layer_at >= 0
        # NOTE: the L1+UB bytes live after each position (npucc.ir.residency's: the ALLOC and
        # FREE nodes' steps, `peak_steps`, summed in the order, as `order_peak` sums them)
        live = np.cumsum(peak_steps(rep.graph, len(rep.nodes))[order])
        np.maximum.at(peak, layer_at[counted], live[counted])
        # NOTE: per node its pipe's index in PIPES, -1 another pipe (no busy cycles kept),
        # -2 none
        pipe = np.array([-2 if p is None else pipe_index.get(p, -1) for p in rep.pipes], np.int64)
        piped = counted & (pipe[order] > -2)
        timed, layer = order[piped], layer_at[piped]
        here = np.zeros(count, np.bool_)  # NOTE: not np.unique (its first call imports numpy.ma)
        here[layer] = True
        ran |= here
        cores += here
        np.minimum.at(first, layer, np.array(rep.start, np.int64)[timed])
        np.maximum.at(last, layer, np.array(rep.finish, np.int64)[timed])
        on = pipe[timed]
        known = on >= 0
        np.add.at(
            busy,
            (layer[known], on[known]),
            np.array(rep.cycles, np.int64)[timed][known],
        )
        nodes = rep.nodes
        for v, nbytes, reads, _, _ in moves:
            index = layers[v]
            if index < 0 or nodes[v].pipe is None:
                continue
            if reads:
                read[index] += nbytes
            else:
                write[index] += nbytes
    rows = []
    peak_macs = target.cube.macs
    for index, work in enumerate(program.layers):
        if work.op == "reshape" and not ran[index]:
            continue
        row = LayerRow(index, work.name, work.op, work.macs)
        if ran[index]:
            cycles = {p: int(c) for p, c in zip(PIPES, busy[index].tolist(), strict=True) if c}
            row.start, row.finish = int(first[index]), int(last[index])
            row.cycles = row.finish - row.start
            row.busiest_pipe, row.busiest_cycles = max(cycles.items(), key=lambda kv: kv[1])
            row.cube_cycles = cycles.get("CUBE", 0)
            if row.cycles:
                row.cube_util = round(work.macs / (row.cycles * peak_macs * int(cores[index])), 6)
        row.ddr_read, row.ddr_write, row.onchip_peak = read[index], write[index], int(peak[index])
        rows.append(row)
    return rows


def rows_as_dicts(rows: list[LayerRow]) -> list[dict[str, Any]]:
    """The table as JSON-ready dicts (Program.stats["layers"])."""
    return [asdict(row) for row in rows]


def to_csv(rows: list[dict[str, Any]]) -> str:
    """The table as CSV text, one header line then one line per layer."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
