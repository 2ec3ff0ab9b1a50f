"""Printer of the tiled IR and of the scheduled program (`npucc.ir.tiled_parse` reads them back).

    tiled-program "small_cnn"
    target {"name":"davinci-core",...}
    ddr const "w" f32[8,3,3,3] sha256=9f86d0...
    ddr input "x" f32[1,3,32,32]
    alias "flat" = "y"
    input "x" = "x" f32[1,3,32,32]
    output "y" = "y" f32[1,8,32,32]
    layer 0 "conv" conv2d macs=221184 vector=0 weights=216
    core 0 0 "core0_0" nodes=3 buffers=1
      buffer b0 L1 4096 "x.tile"
      %0 = ALLOC - 0 [b0] <- [] layer=0
      %1 = COPY_IN MTE2 264 [b0] <- [%0] layer=0 copy dst=b0+0 src=@"x"+0 dims=[1024] ...
      %2 = FREE - 0 [b0] <- [%1] layer=0

A `layer` line is a graph layer (`LayerWork`: its name, op and least work). A node line is
`%ID = OP PIPE CYCLES [BUFS] <- [PREDS] layer=L INSTR`: `layer=L` names the layer the node was
lowered from (absent for a node of no layer), the instruction is in the
symbolic form of `ir.instr_text.format_instr`. Constant data is elided (its sha256 is kept, parsing
makes zero-filled stand-ins), as in the graph text form. A scheduled program starts with
`scheduled-program` instead and adds per core a `schedule` block: the buffer offsets, the spill
plan and the order with each node's start and finish, which parsing checks against a replay.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from npucc.ir.dtypes import data_digest
from npucc.ir.stream_text import format_body

if TYPE_CHECKING:
    from npucc.ir.program import TiledProgram
    from npucc.ir.scheduled_program import ScheduledProgram


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _shape(shape: tuple[int, ...], dtype: str = "f32") -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


def _program_lines(program: TiledProgram, head: str) -> list[str]:
    lines = [f"{head} {_q(program.name)}", f"target {program.target.to_json()}"]
    for t in program.tensors.values():
        digest = f" sha256={data_digest(t.data)}" if t.data is not None else ""
        if t.key in program.onchip:
            digest += " " + program.onchip[t.key].text()
        lines.append(f"ddr {t.role} {_q(t.key)} {_shape(t.shape, t.dtype)}{digest}")
    lines += [f"alias {_q(a)} = {_q(k)}" for a, k in program.aliases.items()]
    lines += [
        f"{io.kind} {_q(io.name)} = {_q(io.key)} {_shape(io.shape, io.dtype)}" for io in program.io
    ]
    lines += [
        f"layer {i} {_q(w.name)} {w.op} macs={w.macs} vector={w.vector} weights={w.weights}"
        for i, w in enumerate(program.layers)
    ]
    for core in program.cores:
        g = core.graph
        lines.append(
            f"core {core.row} {core.col} {_q(g.name)} nodes={len(g)} buffers={len(g.buffers)}"
        )
        lines += [f"  buffer b{b.id} {b.tier} {b.size} {_q(b.name)}" for b in g.buffers]
        for node in g.nodes:
            preds = ",".join(f"%{p}" for p in g.preds[node.id])
            body = f" {format_body(node.instr, symbolic=True)}" if node.instr else ""
            bufs = ",".join(f"b{b}" for b in node.bufs)
            layer = f" layer={node.layer}" if node.layer >= 0 else ""
            lines.append(
                f"  %{node.id} = {node.op} {node.pipe or '-'} {node.cycles} [{bufs}]"
                f" <- [{preds}]{layer}{body}"
            )
    return lines


def tiled_to_text(program: TiledProgram) -> str:
    """Print a TiledProgram (deterministic; ends with a newline)."""
    return "\n".join(_program_lines(program, "tiled-program")) + "\n"


def scheduled_to_text(scheduled: ScheduledProgram) -> str:
    """Print a ScheduledProgram: its tiled program, then per core offsets, spills and times."""
    lines = _program_lines(scheduled.program, "scheduled-program")
    for core, (schedule, replay) in zip(scheduled.program.cores, scheduled.schedules, strict=True):
        lines.append(
            f"schedule {core.row} {core.col} method={schedule.method} makespan={replay.makespan}"
            f" peak={replay.peak} spills={replay.spills} extra_ddr={replay.extra_ddr}"
        )
        lines += [f"  offset b{b} {off}" for b, off in sorted(schedule.offsets.items())]
        lines += [f"  spill b{b} {off}" for b, off in schedule.spills]
        for v in replay.order:
            node = replay.nodes[v]
            bufs = " ".join(f"b{b}@{replay.offset_at(v, b)}" for b in node.bufs)
            lines.append(
                f"  %{v} {node.op} {node.pipe or '-'} [{replay.start[v]},{replay.finish[v]})"
                f" {bufs}".rstrip()
            )
    return "\n".join(lines) + "\n"
