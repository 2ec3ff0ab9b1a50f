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

from npucc.backend.schedule.roofline import Traffic, node_layers
from npucc.ir.isa import PIPES
from npucc.ir.residency import Residency
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


@dataclass(slots=True)
class _Acc:
    """A layer's running totals while the replays are walked."""

    start: int = -1
    finish: int = 0
    busy: dict[str, int] | None = None
    cores: int = 0
    read: int = 0
    write: int = 0
    peak: int = 0


def layer_table(scheduled: ScheduledProgram, traffic: Sequence[Traffic]) -> list[LayerRow]:
    """One row per non-view layer of the program (layers with no node have zero cycles;
    `traffic`: each core's `node_traffic`)."""
    program = scheduled.program
    target = program.target
    accs = [_Acc() for _ in program.layers]
    for (_, rep), moves in zip(scheduled.schedules, traffic, strict=True):
        layers = node_layers(rep)
        seen: set[int] = set()
        res = Residency()
        buffers = rep.graph.buffers
        nodes, start, finish = rep.nodes, rep.start, rep.finish
        for v in rep.order:
            node = nodes[v]
            op = node.op
            if op == "ALLOC":
                buf = buffers[node.bufs[0]]
                res.alloc(buf.tier, buf.size)
            elif op == "FREE":
                buf = buffers[node.bufs[0]]
                res.free(buf.tier, buf.size)
            index = layers[v]
            if index < 0:
                continue
            acc = accs[index]
            if res.combined > acc.peak:
                acc.peak = res.combined
            pipe = node.pipe
            if pipe is None:
                continue
            if index not in seen:
                seen.add(index)
                acc.cores += 1
            busy = acc.busy
            if busy is None:
                busy = acc.busy = {}
                acc.start = start[v]
            elif start[v] < acc.start:
                acc.start = start[v]
            if finish[v] > acc.finish:
                acc.finish = finish[v]
            busy[pipe] = busy.get(pipe, 0) + node.cycles
        for v, nbytes, reads, _, _ in moves:
            index = layers[v]
            if index < 0 or nodes[v].pipe is None:
                continue
            if reads:
                accs[index].read += nbytes
            else:
                accs[index].write += nbytes
    rows = []
    peak_macs = target.cube.macs
    for index, (work, acc) in enumerate(zip(program.layers, accs, strict=True)):
        if work.op == "reshape" and acc.busy is None:
            continue
        row = LayerRow(index, work.name, work.op, work.macs)
        if acc.busy is not None:
            busy = {p: acc.busy[p] for p in PIPES if acc.busy.get(p)}
            row.start, row.finish = acc.start, acc.finish
            row.cycles = acc.finish - acc.start
            row.busiest_pipe, row.busiest_cycles = max(busy.items(), key=lambda kv: kv[1])
            row.cube_cycles = busy.get("CUBE", 0)
            if row.cycles:
                row.cube_util = round(work.macs / (row.cycles * peak_macs * acc.cores), 6)
        row.ddr_read, row.ddr_write, row.onchip_peak = acc.read, acc.write, acc.peak
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
