"""Text forms of the tiled IR and of the scheduled program; both print and parse back.

    tiled-program "small_cnn"
    target {"name":"davinci-core",...}
    ddr const "w" f32[8,3,3,3] sha256=9f86d0...
    ddr input "x" f32[1,3,32,32]
    alias "flat" = "y"
    input "x" = "x" f32[1,3,32,32]
    output "y" = "y" f32[1,8,32,32]
    core 0 0 "core0_0" nodes=3 buffers=1
      buffer b0 L1 4096 "x.tile"
      %0 = ALLOC - 0 [b0] <- []
      %1 = COPY_IN MTE2 264 [b0] <- [%0] copy dst=b0+0 src=@"x"+0 dims=[1024] ...
      %2 = FREE - 0 [b0] <- [%1]

A node line is `%ID = OP PIPE CYCLES [BUFS] <- [PREDS] INSTR`, with the instruction in the
symbolic form of `npucc.ir.isa.format_instr`. Constant data is elided (its sha256 is kept, parsing
makes zero-filled stand-ins), as in the graph text form. A scheduled program starts with
`scheduled-program` instead and adds per core a `schedule` block: the buffer offsets, the spill
plan and the order with each node's start and finish, which parsing checks against a replay.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from npucc.errors import NpuccError
from npucc.ir.dtypes import HOST_DTYPES, INDEX_DTYPE, data_digest, zero_data
from npucc.ir.isa import ParseError, format_instr, parse_instr
from npucc.ir.onchip import parse_onchip
from npucc.ir.tiled import TileGraph
from npucc.target import target_from_json

if TYPE_CHECKING:
    from npucc.backend.lower.program import TiledProgram
    from npucc.backend.schedule.schedule_pass import ScheduledProgram

_STR = r'"(?:[^"\\]|\\.)*"'
_SHAPE = rf"(f32|{INDEX_DTYPE}|{'|'.join(HOST_DTYPES)})\[([0-9,]*)\]"
_HEAD = re.compile(rf"^(tiled-program|scheduled-program) ({_STR})$")
_DDR = re.compile(
    rf"^ddr (const|input|temp|onchip) ({_STR}) {_SHAPE}(?: sha256=([0-9a-f]{{64}}))?"
    r"(?: (homes=\[[0-9,;]*\]) (chunk=\d+))?$"
)
_ALIAS = re.compile(rf"^alias ({_STR}) = ({_STR})$")
_IO = re.compile(rf"^(input|output) ({_STR}) = ({_STR}) {_SHAPE}$")
_CORE = re.compile(rf"^core (\d+) (\d+) ({_STR}) nodes=(\d+) buffers=(\d+)$")
_BUFFER = re.compile(rf"^  buffer b(\d+) (\w+) (\d+) ({_STR})$")
_NODE = re.compile(r"^  %(\d+) = (\S+) (\S+) (\d+) \[([b\d,]*)\] <- \[([%\d,]*)\](?: (.+))?$")
_SCHED = re.compile(
    r"^schedule (\d+) (\d+) method=(\S*) makespan=(\d+) peak=(\d+) spills=(\d+) extra_ddr=(\d+)$"
)
_OFFSET = re.compile(r"^  offset b(\d+) (\d+)$")
_SPILL = re.compile(r"^  spill b(\d+) (\d+)$")
_STEP = re.compile(r"^  %(\d+) (\S+) (\S+) \[(\d+),(\d+)\)(?: (.*))?$")


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
    for core in program.cores:
        g = core.graph
        lines.append(
            f"core {core.row} {core.col} {_q(g.name)} nodes={len(g)} buffers={len(g.buffers)}"
        )
        lines += [f"  buffer b{b.id} {b.tier} {b.size} {_q(b.name)}" for b in g.buffers]
        for node in g.nodes:
            preds = ",".join(f"%{p}" for p in g.preds[node.id])
            body = f" {format_instr(node.instr, symbolic=True)}" if node.instr else ""
            bufs = ",".join(f"b{b}" for b in node.bufs)
            lines.append(
                f"  %{node.id} = {node.op} {node.pipe or '-'} {node.cycles} [{bufs}]"
                f" <- [{preds}]{body}"
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


class _Reader:
    """Numbered non-blank lines of a text, with `FILE:LINE` errors."""

    __slots__ = ("path", "lines", "pos")

    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.lines = [(i, s.rstrip()) for i, s in enumerate(text.split("\n"), 1) if s.strip()]
        self.pos = 0

    def error(self, message: str, offset: int = 0) -> NpuccError:
        index = max(0, min(self.pos + offset, len(self.lines) - 1))
        lineno = self.lines[index][0] if self.lines else 1
        return NpuccError(f"{message} ({self.path}:{lineno})")

    def peek(self) -> str:
        return self.lines[self.pos][1] if self.pos < len(self.lines) else ""

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        m = pattern.match(self.peek())
        if m is not None:
            self.pos += 1
        return m

    def expect(self, pattern: re.Pattern[str], what: str) -> re.Match[str]:
        m = self.match(pattern)
        if m is None:
            found = self.peek()[:40] or "end of text"
            raise self.error(f"expected {what}, found {found!r}")
        return m


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split(",")) if text else ()


def _read_program(r: _Reader, head: str) -> TiledProgram:
    from npucc.backend.lower.program import Core, IoBinding, TiledProgram

    first = r.expect(_HEAD, f"'{head} \"NAME\"'")
    if first.group(1) != head:
        r.pos -= 1
        raise r.error(f"expected '{head}', found '{first.group(1)}'")
    name = json.loads(first.group(2))
    line = r.peek()
    if not line.startswith("target "):
        raise r.error("expected 'target {...}'")
    r.pos += 1
    target = target_from_json(line[len("target ") :])
    program = TiledProgram(name, target)
    while m := r.match(_DDR):
        role, key, dtype, shape = m.group(1), json.loads(m.group(2)), m.group(3), _dims(m.group(4))
        if (role == "const") != (m.group(5) is not None):
            raise r.error("a const tensor, and only one, has a sha256", -1)
        try:
            tensor = program.add_tensor(key, role, shape, dtype=dtype)
        except (ValueError, NpuccError) as exc:
            raise r.error(str(exc), -1) from None
        if m.group(5) is not None:
            tensor.data = zero_data("f32", shape, m.group(5))
        if (role == "onchip") != (m.group(6) is not None):
            raise r.error("an onchip tensor, and only one, has homes and a chunk", -1)
        if m.group(6) is not None:
            try:
                program.onchip[key] = parse_onchip((m.group(6), m.group(7)))
            except ValueError as exc:
                raise r.error(str(exc), -1) from None
    while m := r.match(_ALIAS):
        alias, key = json.loads(m.group(1)), json.loads(m.group(2))
        if key not in program.tensors:
            raise r.error(f"alias of unknown tensor {key!r}", -1)
        program.aliases[alias] = key
    while m := r.match(_IO):
        key = json.loads(m.group(3))
        if key not in program.tensors:
            raise r.error(f"{m.group(1)} bound to unknown tensor {key!r}", -1)
        io_name, dtype, shape = json.loads(m.group(2)), m.group(4), _dims(m.group(5))
        program.io.append(IoBinding(m.group(1), io_name, key, shape, dtype))
    while m := r.match(_CORE):
        graph = TileGraph(json.loads(m.group(3)))
        program.cores.append(Core(int(m.group(1)), int(m.group(2)), graph))
        _read_core(r, graph, int(m.group(4)), int(m.group(5)))
    return program


def _read_core(r: _Reader, g: TileGraph, nodes: int, buffers: int) -> None:
    while m := r.match(_BUFFER):
        if int(m.group(1)) != len(g.buffers):
            raise r.error(f"expected buffer b{len(g.buffers)}", -1)
        g.add_buffer(int(m.group(3)), m.group(2), json.loads(m.group(4)))
    tiers = [b.tier for b in g.buffers]
    while m := r.match(_NODE):
        nid = int(m.group(1))
        if nid != len(g.nodes):
            raise r.error(f"expected node %{len(g.nodes)}", -1)
        bufs = tuple(int(b[1:]) for b in m.group(5).split(",") if b)
        preds = [int(p[1:]) for p in m.group(6).split(",") if p]
        if any(b >= len(tiers) for b in bufs) or any(p >= nid for p in preds):
            raise r.error("unknown buffer, or a predecessor that does not come first", -1)
        instr = None
        if m.group(7):
            try:
                instr = parse_instr(m.group(7), buffer_tiers=tiers)[0]
            except (ParseError, TypeError) as exc:
                raise r.error(str(exc), -1) from None
        pipe = None if m.group(3) == "-" else m.group(3)
        g.add_node(m.group(2), pipe, int(m.group(4)), bufs, instr)
        for p in preds:
            g.add_edge(p, nid)
    if r.peek().startswith("  "):
        raise r.error(f"malformed line {r.peek().strip()[:40]!r}")
    if len(g.nodes) != nodes or len(g.buffers) != buffers:
        raise r.error(f"core declares {nodes} nodes and {buffers} buffers, lists "
                      f"{len(g.nodes)} and {len(g.buffers)}")  # fmt: skip


def _finish(r: _Reader) -> None:
    if r.pos != len(r.lines):
        raise r.error(f"unexpected {r.peek()[:40]!r}")


def tiled_from_text(text: str, path: str = "<tiled>") -> TiledProgram:
    """Parse the tiled text form (constants zero-filled); NpuccError with FILE:LINE if bad."""
    r = _Reader(text, path)
    try:
        program = _read_program(r, "tiled-program")
    except ValueError as exc:  # a bad JSON string or target
        raise r.error(f"malformed line: {exc}", -1) from None
    _finish(r)
    _verify(r, program)
    return program


def scheduled_from_text(text: str, path: str = "<schedule>") -> ScheduledProgram:
    """Parse the scheduled text form; replays each schedule and checks the printed times."""
    from npucc.backend.schedule import Schedule
    from npucc.backend.schedule.registry import UNBOUNDED
    from npucc.backend.schedule.replay import replay, validate
    from npucc.backend.schedule.schedule_pass import ScheduledProgram, capacities
    from npucc.target.cost import TargetSpillModel

    r = _Reader(text, path)
    try:
        program = _read_program(r, "scheduled-program")
    except ValueError as exc:  # a bad JSON string or target
        raise r.error(f"malformed line: {exc}", -1) from None
    target = program.target
    capacity = capacities(target)
    model = TargetSpillModel(target)
    schedules = []
    for core in program.cores:
        m = r.expect(_SCHED, f"'schedule {core.row} {core.col} ...'")
        if (int(m.group(1)), int(m.group(2))) != (core.row, core.col):
            raise r.error(f"schedule of core {core.row} {core.col} expected", -1)
        head = r.pos - 1
        schedule = Schedule([], {}, method=m.group(3))
        while o := r.match(_OFFSET):
            schedule.offsets[int(o.group(1))] = int(o.group(2))
        while o := r.match(_SPILL):
            schedule.spills.append((int(o.group(1)), int(o.group(2))))
        times: list[tuple[int, int, int]] = []
        while o := r.match(_STEP):
            schedule.order.append(int(o.group(1)))
            times.append((r.pos - 1, int(o.group(4)), int(o.group(5))))
        try:
            if schedule.method in UNBOUNDED:
                validate(core.graph, schedule, None, target.alignment, single_l0=True)
            else:
                validate(core.graph, schedule, capacity, target.alignment)
            rep = replay(core.graph, schedule, capacity, model, target.alignment)
        except NpuccError as exc:
            r.pos = head
            raise r.error(f"invalid schedule: {exc}") from None
        for v, (pos, start, finish) in zip(schedule.order, times, strict=True):
            if (rep.start[v], rep.finish[v]) != (start, finish):
                r.pos = pos
                raise r.error(f"node %{v} replays as [{rep.start[v]},{rep.finish[v]})")
        printed = tuple(int(m.group(i)) for i in (4, 5, 6, 7))
        if printed != (rep.makespan, rep.peak, rep.spills, rep.extra_ddr):
            r.pos = head
            raise r.error("metrics differ from the replay's")
        schedules.append((schedule, rep))
    _finish(r)
    scheduled = ScheduledProgram(program, schedules)
    _verify(r, scheduled)
    return scheduled


def _verify(r: _Reader, ir: TiledProgram | ScheduledProgram) -> None:
    try:
        ir.verify()
    except ValueError as exc:
        raise NpuccError(f"{exc} ({r.path})") from None
