"""Codegen: render scheduled per-core DAGs as the textual command stream plus the const image.

For every node in schedule order codegen resolves symbolic operands to addresses (a buffer's
offset at that point of the schedule, a DDR tensor's address in the layout) and turns each
precedence edge between different queues into a flag, dropping edges already implied by pipe
order and earlier flags, so the stream's own synchronisation reproduces the schedule's timing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from npucc import progress
from npucc.backend.schedule.scan_kernel import csr
from npucc.codegen import flags_kernel
from npucc.codegen.ddr_layout import DdrLayout, build_image, layout_ddr
from npucc.codegen.debug_map import debug_map, host_segments
from npucc.codegen.printer import Printer, resolve
from npucc.ir.dtypes import host_dtype
from npucc.ir.graph_schema import HOST_OP
from npucc.ir.isa import DDR, NOC, PIPES, HostOp, Instr, MemRef, Spill
from npucc.ir.isa_cost import instr_energy
from npucc.ir.program import TiledProgram
from npucc.ir.replay import Replay
from npucc.ir.schedule import Schedule
from npucc.ir.scheduled_program import ScheduledProgram
from npucc.ir.stream import Generated, TensorSpec
from npucc.ir.stream_text import (
    SYNC_BAR,
    SYNC_SEP,
    format_body,
    format_event,
    format_flag,
    format_header,
    format_stream,
    format_tensor,
    line_head,
    sync_word,
)
from npucc.ir.tiled import TileGraph
from npucc.passes import CompileContext, IRType, Pass
from npucc.target import DTYPE_BYTES, Target

# a node's queue: its pipe's index in PIPES, -1 for a ctrl node (no pipe)
_QUEUE_INDEX: dict[str | None, int] = {None: -1} | {p: i for i, p in enumerate(PIPES)}


@dataclass(slots=True)
class Flags:
    """Flags between queues: by node id its line's tail (`line_tail`) of the flags it waits
    for and sets ("": none), and the last flag number used."""

    tails: list[str]
    count: int = 0


@dataclass(slots=True)
class Remote:
    """A core's flags to and from other cores: by node, the words (`sync_word`) of those its
    line waits for and sets."""

    waits: dict[int, list[str]] = field(default_factory=dict)
    sets: dict[int, list[str]] = field(default_factory=dict)


def _queue(node_pipe: str | None) -> str:
    return node_pipe.lower() if node_pipe is not None else "ctrl"


def plan_flags(replay: Replay, first_flag: int = 0, remote: Remote | None = None) -> Flags:
    """One flag per cross-queue edge that pipe order and earlier flags do not already imply
    (the rule's home: npucc.codegen.flags_kernel), numbered from `first_flag` + 1; `remote`:
    the core's flags to and from other cores, each line's after its own."""
    preds = replay.preds  # the augmented graph's: original, spill and address-reuse edges
    total = len(preds)
    # NOTE: `replay.pipes[v]` is `replay.nodes[v].pipe` (spill nodes' included), one list
    queue = np.fromiter(map(_QUEUE_INDEX.__getitem__, replay.pipes), np.int64, total)
    offsets, sources = csr(preds)
    names = [_queue(p) for p in PIPES] + [_queue(None)]  # by queue index (-1, the last: ctrl)
    # NOTE: `sync_word(verb, format_flag(src, dst, n))` is `sync_word(verb, format_flag(src,
    # dst, 0)[:-1]) + str(n)`: the kernel's words, by (src, dst) queue pair
    flag = [format_flag(src, dst, 0)[:-1] for src in names for dst in names]
    words = ([sync_word("wait", f) for f in flag], [sync_word("set", f) for f in flag],
             SYNC_SEP, SYNC_BAR)  # fmt: skip
    far = (remote.waits, remote.sets) if remote is not None else ({}, {})
    tails, count = flags_kernel.flag_edges(
        np.asarray(replay.order, np.int64),
        queue,
        np.asarray(replay.position, np.int64),
        offsets,
        sources,
        len(PIPES),
        words,
        first_flag,
        far,
    )
    return Flags(tails, count)


def render_core(
    program: TiledProgram,
    core_index: int,
    replay: Replay,
    layout: DdrLayout,
    flag_base: int = 0,
    remote: Remote | None = None,
    bar: progress.Bar | None = None,
    done: int = 0,
    printer: Printer | None = None,
) -> tuple[list[str], int, float]:
    """Lines of one core in schedule order; returns them, the last flag number used and the
    picojoules its instructions spend.

    `remote` holds this core's flags to and from other cores, by node; `bar` (with `done`
    nodes of earlier cores) shows the nodes rendered; `printer` may be shared by the cores.
    """
    core = program.cores[core_index]
    graph = core.graph
    target = program.target
    if printer is None:
        printer = Printer(target, layout)
    flags = plan_flags(replay, flag_base, remote)
    lines: list[str] = []
    n_orig = len(graph.nodes)
    energy = 0.0
    buffers = graph.buffers
    tiers = [buf.tier for buf in buffers]
    here = printer.core(replay, tiers)
    renders_get, offs = here.renders.get, here.offs
    every = progress.EVERY
    nodes, offset_at = replay.nodes, replay.offset_at
    tails, add = flags.tails, lines.append
    barrier = line_head("barrier", "")
    events: list[str | None] = [None] * len(buffers)  # alloc/free body of a buffer never moved
    for i, v in enumerate(replay.order, 1):
        if bar is not None and i % every == 0:
            bar.update(done + i)
        node = nodes[v]
        tail = tails[v]
        pipe = node.pipe
        if pipe is None:
            if node.op == "BARRIER":
                add(barrier + tail)
                continue
            # NOTE: a buffer's FREE prints its ALLOC's body, unless a spill moved it between
            b = node.bufs[0]
            body = events[b]
            if body is None:
                buf = buffers[b]
                at = offs[b]
                if at is None:
                    body = format_event(buf.tier, offset_at(v, b), buf.size, b)
                else:
                    body = events[b] = format_event(buf.tier, at, buf.size, b)
            add(line_head(node.op.lower(), body) + tail)
            continue
        instr = node.instr
        render = renders_get(type(instr)) if v < n_orig else None
        if render is None:  # a spill, a host node or the first of its class
            plain: Instr | None = None  # printed as it is resolved
            if v >= n_orig:
                plain = _spill_instr(v - n_orig, node.bufs[0], v, replay, layout, graph,
                                     core_index, target)  # fmt: skip
            elif isinstance(instr, HostOp):
                plain = resolve(instr, v, replay, layout, target, tiers.__getitem__)
            if plain is not None:
                energy += instr_energy(target, plain)
                add(line_head(pipe, format_body(plain, target)) + tail)
                continue
            assert instr is not None, f"node {v} ({node.op}) has no instruction"
            render = here.render(type(instr))
        text, pj = render(instr, v, pipe)
        energy += pj
        add(text + tail)
    return lines, flags.count, energy


def spill_key(core_index: int, spill: int) -> str:
    """DDR key of the slot that holds spill number `spill` of a core."""
    return f"spill.{core_index}.{spill}"


def _spill_instr(
    k2: int,
    buf_id: int,
    node: int,
    replay: Replay,
    layout: DdrLayout,
    graph: TileGraph,
    core_index: int,
    target: Target,
) -> Instr:
    """The copy of a SPILL_OUT (even k2) or SPILL_IN (odd k2) node."""
    buf = graph.buffers[buf_id]
    slot = MemRef(DDR, layout.addr[spill_key(core_index, k2 // 2)])
    here = MemRef(buf.tier, replay.offset_at(node, buf_id))
    elems = buf.size // target.tier_bytes(buf.tier)
    return Spill(slot, here, elems) if k2 % 2 == 0 else Spill(here, slot, elems)


def generate(program: TiledProgram, schedules: list[tuple[Schedule, Replay]]) -> Generated:
    """Render every core of `program`, scheduled by `schedules` (one per core, same order)."""
    eb = program.target.elem_bytes
    extra: dict[str, int] = {}
    slot_types: dict[str, str] = {}  # spill slot -> element type (its buffer's tier's)
    for index, (schedule, _) in enumerate(schedules):
        graph = program.cores[index].graph
        for k, (buf, _offset) in enumerate(schedule.spills):
            extra[spill_key(index, k)] = graph.buffers[buf].size
            slot_types[spill_key(index, k)] = program.target.tier_dtype(graph.buffers[buf].tier)
    layout = layout_ddr(program, extra)
    image = build_image(program, layout)
    remote = [Remote() for _ in program.cores]
    flag = 0
    for src_core, u, dst_core, v in program.cross_edges:
        flag += 1
        src, dst = program.cores[src_core], program.cores[dst_core]
        qu = _queue(schedules[src_core][1].nodes[u].pipe)
        qv = _queue(schedules[dst_core][1].nodes[v].pipe)
        remote[src_core].sets.setdefault(u, []).append(
            sync_word("set", format_flag(qu, qv, flag, dst_at=(dst.row, dst.col)))
        )
        remote[dst_core].waits.setdefault(v, []).append(
            sync_word("wait", format_flag(qu, qv, flag, src_at=(src.row, src.col)))
        )
    blocks = []
    energy = 0.0
    done = 0
    printer = Printer(program.target, layout)
    with progress.task("codegen", sum(len(r.order) for _, r in schedules)) as bar:
        for index, (_, replay) in enumerate(schedules):
            lines, flag, pj = render_core(
                program, index, replay, layout, flag, remote[index], bar, done, printer
            )
            done += len(replay.order)
            energy += pj
            blocks.append((program.cores[index].row, program.cores[index].col, lines))
    output_names = {io.name for io in program.io if io.kind == "output"}
    ddr = [
        (layout.addr[t.key], format_tensor(t.role, _quote(t.key), DDR, layout.addr[t.key],
                                           t.nbytes(eb), t.stream_dtype(program.target), t.shape,
                                           quant=t.quant))
        for t in program.tensors.values()
        if not (t.role in ("temp", "onchip") and t.key in output_names) and t.key in layout.addr
    ]  # fmt: skip
    ddr += [
        (layout.addr[key], format_tensor("temp", _quote(key), DDR, layout.addr[key], n,
                                         slot_types[key], (n // DTYPE_BYTES[slot_types[key]],)))
        for key, n in extra.items()
    ]  # fmt: skip
    ddr.sort(key=lambda t: t[0])
    tensors = [text for _, text in ddr]
    tensors += [
        format_tensor(t.role, _quote(t.key), NOC, layout.noc[t.key], t.nbytes(eb),
                      t.stream_dtype(program.target), t.shape, program.onchip[t.key])
        for t in program.tensors.values()
        if t.key in layout.noc
    ]  # fmt: skip
    tensors += [
        format_tensor("output", _quote(io.name), DDR, layout.addr[io.key],
                      program.tensors[io.key].elems * eb, io.dtype, io.shape, quant=io.quant)
        for io in program.io
        if io.kind == "output"
    ]  # fmt: skip
    header = format_header(program.target.to_json(), len(image),
                           hashlib.sha256(image).hexdigest(), layout.size)  # fmt: skip
    return Generated(
        format_stream(header, tensors, blocks),
        image,
        _specs(program, "input"),
        _specs(program, "output"),
        energy,
    )


def _specs(program: TiledProgram, kind: str) -> dict[str, TensorSpec]:
    """The model's inputs or outputs: name -> shape and host dtype."""
    return {
        io.name: TensorSpec(io.shape, host_dtype(io.dtype)) for io in program.io if io.kind == kind
    }


def _quote(name: str) -> str:
    """A name as the stream writes it: a JSON string literal."""
    return json.dumps(name, ensure_ascii=True)


@dataclass(frozen=True, slots=True)
class CodegenPass(Pass):
    """Render the scheduled program as a command stream and its image (`codegen`)."""

    name: ClassVar[str] = "codegen"
    input_ir: ClassVar[IRType] = ScheduledProgram
    output_ir: ClassVar[IRType] = Generated
    debug_map: bool = False  # leave the debug map in ctx.stats["debug_map"] (the driver's)

    def run(self, ir: ScheduledProgram, ctx: CompileContext) -> Generated:
        generated = generate(ir.program, ir.schedules)
        ctx.stats["stream_lines"] = generated.stream.count("\n")
        ctx.stats["image_bytes"] = len(generated.image)
        ctx.stats["energy_pj"] = generated.energy_pj
        if any(work.op == HOST_OP for work in ir.program.layers):
            ctx.stats["host_segments"] = host_segments(ir, generated.stream)
        if self.debug_map:
            ctx.stats["debug_map"] = debug_map(ir, generated.stream)
        return generated
