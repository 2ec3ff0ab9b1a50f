"""Codegen: render scheduled per-core DAGs as the textual command stream plus the const image.

For every node in schedule order codegen resolves symbolic operands to addresses (a buffer's
offset at that point of the schedule, a DDR tensor's address in the layout) and turns each
precedence edge between different queues into a flag, dropping edges already implied by pipe
order and earlier flags, so the stream's own synchronisation reproduces the schedule's timing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from npucc import progress
from npucc.backend.schedule.scan_kernel import csr
from npucc.codegen import flags_kernel
from npucc.codegen.ddr_layout import DdrLayout, build_image, layout_ddr
from npucc.codegen.debug_map import debug_map, host_segments
from npucc.ir.dtypes import host_dtype
from npucc.ir.graph_schema import HOST_OP
from npucc.ir.instr_form import form_key, instr_fields
from npucc.ir.instr_text import fill_template, instr_template
from npucc.ir.isa import DDR, NOC, PIPES, BufRef, DdrRef, HostOp, Instr, MemRef, Spill
from npucc.ir.isa_cost import instr_energy, operand_bytes
from npucc.ir.program import TiledProgram
from npucc.ir.replay import Replay
from npucc.ir.schedule import Schedule
from npucc.ir.scheduled_program import ScheduledProgram
from npucc.ir.stream import Generated, TensorSpec
from npucc.ir.stream_text import (
    format_body,
    format_event,
    format_flag,
    format_header,
    format_line,
    format_stream,
    format_sync,
    format_tensor,
)
from npucc.ir.tiled import TileGraph
from npucc.passes import CompileContext, IRType, Pass
from npucc.target import DTYPE_BYTES, Target

# a node's queue: its pipe's index in PIPES, -1 for a ctrl node (no pipe)
_QUEUE_INDEX: dict[str | None, int] = {None: -1} | {p: i for i, p in enumerate(PIPES)}


@dataclass(slots=True)
class Flags:
    """Flags between queues: per node the flags (as its line writes them) it waits for and sets."""

    waits: dict[int, list[str]] = field(default_factory=dict)
    sets: dict[int, list[str]] = field(default_factory=dict)
    count: int = 0


def _queue(node_pipe: str | None) -> str:
    return node_pipe.lower() if node_pipe is not None else "ctrl"


def plan_flags(replay: Replay, first_flag: int = 0) -> Flags:
    """One flag per cross-queue edge that pipe order and earlier flags do not already imply
    (the rule's home: npucc.codegen.flags_kernel)."""
    preds = replay.preds  # the augmented graph's: original, spill and address-reuse edges
    total = len(preds)
    # NOTE: `replay.pipes[v]` is `replay.nodes[v].pipe` (spill nodes' included), one list
    queue = np.fromiter(map(_QUEUE_INDEX.__getitem__, replay.pipes), np.int64, total)
    offsets, sources = csr(preds)
    names = [_queue(p) for p in PIPES] + [_queue(None)]  # by queue index (-1, the last: ctrl)
    # `format_flag(names[uq], names[q], n)` is prefix[uq][q] + n
    prefix = [[format_flag(src, dst, 0)[:-1] for dst in names] for src in names]
    waits, sets, count = flags_kernel.flag_edges(
        np.asarray(replay.order, np.int64),
        queue,
        np.asarray(replay.position, np.int64),
        offsets,
        sources,
        len(PIPES),
        prefix,
        first_flag,
    )
    return Flags(waits, sets, count)


def _resolve(
    instr: Instr,
    node: int,
    replay: Replay,
    layout: DdrLayout,
    target: Target,
    tier_of: Callable[[int], str],
) -> Instr:
    """Replace BufRef/DdrRef operands by MemRefs at this node's point of the schedule."""
    resolved: dict[str, MemRef] = {}
    for name, ref in instr.operands().items():
        placed = _place(ref, node, replay, layout, tier_of)
        if placed is not None:
            tier, base, off = placed
            resolved[name] = MemRef(tier, base + off * operand_bytes(target, instr, name))
    return instr.with_operands(**resolved)


def _place(
    ref: object, node: int, replay: Replay, layout: DdrLayout, tier_of: Callable[[int], str]
) -> tuple[str, int, int] | None:
    """Where operand `ref` is at `node` of the schedule: its tier, the byte address of its
    buffer or tensor and its element offset there (None: not a BufRef or DdrRef)."""
    if isinstance(ref, BufRef):
        return tier_of(ref.buf), replay.offset_at(node, ref.buf), ref.off
    if isinstance(ref, DdrRef):
        if ref.key in layout.noc:
            return NOC, layout.noc[ref.key], ref.off
        return DDR, layout.addr[ref.key], ref.off
    return None


class _Printer:
    """Prints the resolved instructions of one program, those of one form (`form_key`: alike
    but for their addresses) from one cached template and energy."""

    def __init__(self, target: Target, layout: DdrLayout) -> None:
        self.target = target
        self.layout = layout
        self.forms: dict[tuple[Any, ...], tuple[str, tuple[int, ...], float]] = {}

    def body(self, instr: Instr, node: int, replay: Replay, tiers: list[str]) -> tuple[str, float]:
        """The text of `instr` resolved at `node` of `replay` (`tiers`: its core's buffer tiers)
        and the picojoules it spends."""
        fields = instr_fields(type(instr))
        tier_of = tiers.__getitem__
        layout = self.layout
        placed = [
            _place(ref, node, replay, layout, tier_of) or (ref.tier, ref.addr, 0)
            for ref in fields.operands(instr)
        ]  # NOTE: (tier, base, offset); a MemRef operand is already resolved
        key = form_key(instr, fields, [tier for tier, _, _ in placed])
        form = self.forms.get(key)
        if form is None:
            target = self.target
            resolved = _resolve(instr, node, replay, layout, target, tier_of)
            sizes = tuple(operand_bytes(target, resolved, n) for n in fields.names)
            form = instr_template(resolved, target), sizes, instr_energy(target, resolved)
            self.forms[key] = form
        template, sizes, energy = form
        addrs = tuple([base + off * e for (_, base, off), e in zip(placed, sizes, strict=True)])
        return fill_template(template, addrs), energy


def render_core(
    program: TiledProgram,
    core_index: int,
    replay: Replay,
    layout: DdrLayout,
    flag_base: int = 0,
    remote: Flags | None = None,
    bar: progress.Bar | None = None,
    done: int = 0,
    printer: _Printer | None = None,
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
        printer = _Printer(target, layout)
    flags = plan_flags(replay, flag_base)
    if remote is not None:
        for table, extra in ((flags.waits, remote.waits), (flags.sets, remote.sets)):
            for v, items in extra.items():
                table.setdefault(v, []).extend(items)
    lines: list[str] = []
    n_orig = len(graph.nodes)
    energy = 0.0
    tiers = [buf.tier for buf in graph.buffers]

    every = progress.EVERY
    nodes, buffers, offset_at = replay.nodes, graph.buffers, replay.offset_at
    waits_of, sets_of, add = flags.waits.get, flags.sets.get, lines.append
    events: dict[tuple[int, int], str] = {}  # (buffer, offset) -> its alloc/free body
    for i, v in enumerate(replay.order, 1):
        if bar is not None and i % every == 0:
            bar.update(done + i)
        node = nodes[v]
        waits, sets = waits_of(v), sets_of(v)
        sync = format_sync(waits or (), sets or ()) if waits or sets else ""
        pipe = node.pipe
        if pipe is None:
            if node.op == "BARRIER":
                add(format_line("barrier", "", sync))
                continue
            # NOTE: a buffer's FREE prints its ALLOC's body, unless a spill moved it between
            b = node.bufs[0]
            at = offset_at(v, b)
            body = events.pop((b, at), None)
            if body is None:
                buf = buffers[b]
                body = events[b, at] = format_event(buf.tier, at, buf.size, b)
            add(format_line(node.op.lower(), body, sync))
            continue
        if v >= n_orig:
            instr = _spill_instr(v - n_orig, node.bufs[0], v, replay, layout, graph, core_index,
                                 target)  # fmt: skip
            body, pj = format_body(instr, target), instr_energy(target, instr)
        elif isinstance(node.instr, HostOp):
            instr = _resolve(node.instr, v, replay, layout, target, tiers.__getitem__)
            body, pj = format_body(instr, target), instr_energy(target, instr)
        else:
            assert node.instr is not None, f"node {v} ({node.op}) has no instruction"
            body, pj = printer.body(node.instr, v, replay, tiers)
        energy += pj
        add(format_line(pipe, body, sync))
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
    remote = [Flags() for _ in program.cores]
    flag = 0
    for src_core, u, dst_core, v in program.cross_edges:
        flag += 1
        src, dst = program.cores[src_core], program.cores[dst_core]
        qu = _queue(schedules[src_core][1].nodes[u].pipe)
        qv = _queue(schedules[dst_core][1].nodes[v].pipe)
        remote[src_core].sets.setdefault(u, []).append(
            format_flag(qu, qv, flag, dst_at=(dst.row, dst.col))
        )
        remote[dst_core].waits.setdefault(v, []).append(
            format_flag(qu, qv, flag, src_at=(src.row, src.col))
        )
    blocks = []
    energy = 0.0
    done = 0
    printer = _Printer(program.target, layout)
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
