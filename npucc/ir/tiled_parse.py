"""Parser of the tiled and scheduled text forms printed by `npucc.ir.tiled_text`.

Constant data comes back zero-filled (the text keeps only its sha256). A scheduled program's
schedules are validated and replayed (`npucc.ir.replay`) and every printed start, finish and
metric must equal the replay's.
"""

from __future__ import annotations

import json
import re

from npucc.errors import NpuccError
from npucc.ir.dtypes import HOST_DTYPES, INDEX_DTYPE, zero_data
from npucc.ir.instr_text import ParseError, parse_instr, parse_symbolic
from npucc.ir.isa import Instr
from npucc.ir.isa_cost import TargetSpillModel
from npucc.ir.onchip import parse_onchip
from npucc.ir.program import Core, IoBinding, LayerWork, TiledProgram
from npucc.ir.replay import replay, validate
from npucc.ir.schedule import UNBOUNDED, Schedule, capacities
from npucc.ir.scheduled_program import ScheduledProgram
from npucc.ir.stream_text import match_host
from npucc.ir.tiled import TileGraph
from npucc.target import target_from_json

_STR = r'"(?:[^"\\]|\\.)*"'
_SHAPE = rf"(f32|{INDEX_DTYPE}|{'|'.join(HOST_DTYPES)})\[([0-9,]*)\]"
_HEAD = re.compile(rf"^(tiled-program|scheduled-program) ({_STR})$")
_DDR = re.compile(
    rf"^ddr (const|input|temp|onchip) ({_STR}) {_SHAPE}(?: sha256=([0-9a-f]{{64}}))?"
    r"(?: (homes=\[[0-9,;]*\]) (chunk=\d+) (at=\d+) (live=\d+\.\.\d+)(?: (turn=\d+\.\.\d+))?"
    r"(?: (lives=\[[0-9.;]*\]))?)?$"
)
_ALIAS = re.compile(rf"^alias ({_STR}) = ({_STR})$")
_IO = re.compile(rf"^(input|output) ({_STR}) = ({_STR}) {_SHAPE}$")
_LAYER = re.compile(rf"^layer (\d+) ({_STR}) (\S+) macs=(\d+) vector=(\d+) weights=(\d+)$")
_CORE = re.compile(rf"^core (\d+) (\d+) ({_STR}) nodes=(\d+) buffers=(\d+)$")
_BUFFER = re.compile(rf"^  buffer b(\d+) (\w+) (\d+) ({_STR})$")
_NODE = re.compile(
    r"^  %(\d+) = (\S+) (\S+) (\d+) \[([b\d,]*)\] <- \[([%\d,]*)\](?: layer=(\d+))?(?: (.+))?$"
)
_SCHED = re.compile(
    r"^schedule (\d+) (\d+) method=(\S*) makespan=(\d+) peak=(\d+) spills=(\d+) extra_ddr=(\d+)$"
)
_OFFSET = re.compile(r"^  offset b(\d+) (\d+)$")
_SPILL = re.compile(r"^  spill b(\d+) (\d+)$")
_STEP = re.compile(r"^  %(\d+) (\S+) (\S+) \[(\d+),(\d+)\)(?: (.*))?$")


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
                tokens = m.group(6, 7, 8, 9) + tuple(g for g in m.group(10, 11) if g)
                program.onchip[key] = parse_onchip(tokens)
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
    while m := r.match(_LAYER):
        if int(m.group(1)) != len(program.layers):
            raise r.error(f"expected layer {len(program.layers)}", -1)
        macs, vector, weights = (int(m.group(i)) for i in (4, 5, 6))
        program.layers.append(LayerWork(json.loads(m.group(2)), m.group(3), macs, vector, weights))
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
        if m.group(8):
            try:
                instr = _instr(m.group(8), tiers)
            except (ParseError, TypeError) as exc:
                raise r.error(str(exc), -1) from None
        pipe = None if m.group(3) == "-" else m.group(3)
        layer = -1 if m.group(7) is None else int(m.group(7))
        g.add_node(m.group(2), pipe, int(m.group(4)), bufs, instr, layer)
        for p in preds:
            g.add_edge(p, nid)
    if r.peek().startswith("  "):
        raise r.error(f"malformed line {r.peek().strip()[:40]!r}")
    if len(g.nodes) != nodes or len(g.buffers) != buffers:
        raise r.error(f"core declares {nodes} nodes and {buffers} buffers, lists "
                      f"{len(g.nodes)} and {len(g.buffers)}")  # fmt: skip


def _instr(body: str, tiers: list[str]) -> Instr:
    """A node's instruction in the symbolic form (a host record, or an instruction)."""
    if body.startswith("host "):
        host = match_host(body, lambda raw: parse_symbolic(raw, tiers))
        if isinstance(host, str):
            raise ParseError(host)
        return host[0]
    return parse_instr(body, buffer_tiers=tiers)[0]


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
                validate(core.graph, schedule, None, target.memory.alignment, single_l0=True)
            else:
                validate(core.graph, schedule, capacity, target.memory.alignment)
            rep = replay(core.graph, schedule, capacity, model, target.memory.alignment)
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
