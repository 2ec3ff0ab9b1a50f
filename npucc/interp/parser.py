"""Parse a command stream (docs/command-stream.md) into a `Stream`, rejecting malformed lines."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from npucc.errors import NpuccError
from npucc.ir.dtypes import HOST_DTYPES, INDEX_BYTES, INDEX_DTYPE
from npucc.ir.isa import (
    BINARY_OPS,
    DDR,
    GATHER_INDEX,
    NOC,
    PIPES,
    REDUCE_OPS,
    UNARY_OPS,
    Copy,
    Gather,
    Img2Col,
    Instr,
    MemRef,
    Mmad,
    NocCopy,
    ParseError,
    Spill,
    VBinary,
    VReduce,
    VUnary,
    copy_pipe,
    field_names,
    parse_instr,
)
from npucc.ir.onchip import OnChip, chunk_bytes, parse_onchip
from npucc.target import TIERS, Target, target_from_json

EVENTS = ("alloc", "free", "barrier")
QUEUE_NAMES = (*(p.lower() for p in PIPES), "ctrl")
_NAMES = {name: name for name in QUEUE_NAMES}  # parsed queue names map to these objects
TENSOR_KINDS = ("const", "input", "output", "temp", "onchip")
UNARY_ARITY = {"clip": 2, "muls": 1, "adds": 1, "pows": 1}
VECTOR_TIERS = ("UB", "L0C")

_OPERAND_RE = re.compile(r"^(L1|UB|L0A|L0B|L0C|DDR|NOC)\[0x([0-9a-f]+)\+(\d+)\]$")
_FLAG_RE = re.compile(r"^([a-z0-9]+)(?:@(\d+),(\d+))?>([a-z0-9]+)(?:@(\d+),(\d+))?#(\d+)$")
_SHAPE_RE = re.compile(r"^([a-z0-9]+)\[([0-9,]*)\]$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_JSON = json.JSONDecoder()

FlagKey = tuple[tuple[int, int], tuple[int, int], int]  # setter core, waiter core, number


class StreamError(NpuccError):
    """A malformed or incorrect command stream; the message starts with `FILE:LINE:`."""


@dataclass(frozen=True, slots=True)
class Flag:
    """A synchronisation token `src>dst#num` between two queues, of one core or of two."""

    src: str
    dst: str
    num: int
    src_at: tuple[int, int] = (0, 0)  # (row, col) of the core whose queue sets it
    dst_at: tuple[int, int] = (0, 0)  # (row, col) of the core whose queue waits for it

    @property
    def key(self) -> FlagKey:
        """Identity of the token: both endpoints and the number."""
        return (self.src_at, self.dst_at, self.num)

    def __str__(self) -> str:
        if self.src_at == self.dst_at:
            return f"{self.src}>{self.dst}#{self.num}"
        (r0, c0), (r1, c1) = self.src_at, self.dst_at
        return f"{self.src}@{r0},{c0}>{self.dst}@{r1},{c1}#{self.num}"


@dataclass(frozen=True, slots=True)
class Event:
    """A pipe-less event: alloc/free of `tier[addr+size]` (buffer `buf`), or a barrier."""

    kind: str
    tier: str = ""
    addr: int = 0
    size: int = 0  # bytes
    buf: int = -1


@dataclass(frozen=True, slots=True)
class Line:
    """One record of a core block: a pipe instruction or an event, with its flags."""

    queue: str  # a PIPES name, or alloc/free/barrier
    instr: Instr | Event
    waits: tuple[Flag, ...]
    sets: tuple[Flag, ...]
    lineno: int


@dataclass(frozen=True, slots=True)
class Tensor:
    """A DDR tensor declared in the header."""

    kind: str  # const, input, output, temp
    name: str
    addr: int
    nbytes: int
    shape: tuple[int, ...]
    lineno: int
    dtype: str = "f32"  # the target dtype, i64 (an input of indices, 8 bytes an element), or a
    # HOST_DTYPES type of an input or output (npucc.ir.dtypes; held as the target dtype)
    onchip: OnChip | None = None  # an onchip tensor's homes (it lies in NOC, not DDR)


@dataclass(slots=True)
class Core:
    """The ordered lines of one core block."""

    row: int
    col: int
    lineno: int
    lines: list[Line] = field(default_factory=list)


@dataclass(slots=True)
class Stream:
    """A parsed command stream: header plus one block per core."""

    path: str
    target: Target
    image_size: int
    image_sha256: str
    ddr_size: int
    tensors: dict[str, Tensor]
    cores: list[Core]
    image_line: int = 0  # line of the `image` record
    # memory (tier or DDR) -> (bytes from 0 that the stream addresses, line that reaches them)
    extent: dict[str, tuple[int, int]] = field(default_factory=dict)

    def where(self, lineno: int) -> str:
        """The `FILE:LINE` prefix of a line."""
        return f"{self.path}:{lineno}"


def load_stream(path: str | Path) -> Stream:
    """Read and parse a stream file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NpuccError(f"cannot read stream {path}: {exc}") from None
    return parse_stream(text, str(path))


def parse_stream(text: str, path: str = "<stream>") -> Stream:
    """Parse stream text; `path` names the file in error messages."""
    return _Parser(path).parse(text)


def _fmt_ref(tier: str, addr: int, nbytes: int | None = None) -> str:
    return f"{tier}[0x{addr:06x}]" if nbytes is None else f"{tier}[0x{addr:06x}+{nbytes}]"


class _Parser:
    __slots__ = ("path", "target", "ddr_size", "lineno", "flag_sets", "flag_waits", "extent",
                 "onchip")  # fmt: skip

    def __init__(self, path: str) -> None:
        self.path = path
        self.lineno = 0
        self.ddr_size = 0
        self.extent: dict[str, tuple[int, int]] = {}
        self.flag_sets: dict[FlagKey, tuple[Flag, int]] = {}
        self.flag_waits: dict[FlagKey, tuple[Flag, int]] = {}
        self.onchip: list[Tensor] = []  # onchip tensors by NOC address

    def fail(self, message: str, lineno: int | None = None) -> StreamError:
        return StreamError(f"{self.path}:{self.lineno if lineno is None else lineno}: {message}")

    def parse(self, text: str) -> Stream:
        records = self._records(text)
        it = iter(records)

        def expect(what: str) -> list[str]:
            for self.lineno, content in it:
                return content.split()
            raise self.fail(f"unexpected end of file, expected {what}")

        if expect("'npucc-stream 1'") != ["npucc-stream", "1"]:
            raise self.fail("expected 'npucc-stream 1'")
        self.target = self._target(it)
        image_size, image_sha = self._image(expect("image"))
        image_line = self.lineno
        self.ddr_size = self._ddr(expect("ddr"))
        self.extent[DDR] = (self.ddr_size, self.lineno)
        if image_size > self.ddr_size:
            raise self.fail(f"image size {image_size} exceeds ddr size {self.ddr_size}")
        tensors: dict[str, Tensor] = {}
        cores: list[Core] = []
        core: Core | None = None
        for self.lineno, content in it:
            if core is not None:
                if content == "end":
                    core = None
                else:
                    core.lines.append(self._line(content, (core.row, core.col)))
            elif content.startswith("tensor ") and not cores:
                tensor = self._tensor(content, image_size)
                if tensor.name in tensors:
                    raise self.fail(f"duplicate tensor {json.dumps(tensor.name)}")
                tensors[tensor.name] = tensor
            elif content.startswith("core "):
                core = self._core(content, cores)
                cores.append(core)
            else:
                raise self.fail(f"unexpected line '{_clip(content)}'")
        if core is not None:
            raise self.fail(f"core block opened at line {core.lineno} has no 'end'")
        if not cores:
            raise self.fail("stream has no core block")
        for key, (flag, lineno) in self.flag_sets.items():
            if key not in self.flag_waits:
                raise self.fail(f"flag {flag} is set but never waited", lineno)
        return Stream(
            self.path, self.target, image_size, image_sha, self.ddr_size, tensors, cores,
            image_line, self.extent,
        )  # fmt: skip

    def _records(self, text: str) -> list[tuple[int, str]]:
        records = []
        for lineno, raw in enumerate(text.split("\n"), 1):
            content = raw.strip()
            if content and not content.startswith("#"):
                if not content.isascii() or not content.replace("\t", " ").isprintable():
                    raise self.fail("non-ASCII or control character", lineno)
                records.append((lineno, content))
        return records

    def _target(self, it: Iterator[tuple[int, str]]) -> Target:
        for self.lineno, content in it:
            key, _, body = content.partition(" ")
            if key != "target" or not body:
                raise self.fail("expected 'target {json}'")
            try:
                target = target_from_json(body)
            except (ValueError, NpuccError) as exc:
                raise self.fail(f"bad target: {exc}") from None
            if target.elem_bytes != 4:
                raise self.fail(f"unsupported dtype {target.dtype}")
            return target
        raise self.fail("unexpected end of file, expected target")

    def _image(self, tokens: list[str]) -> tuple[int, str]:
        if len(tokens) != 3 or tokens[0] != "image":
            raise self.fail("expected 'image size=N sha256=HEX'")
        size = self._int_field(tokens[1], "size")
        sha = tokens[2].removeprefix("sha256=")
        if not tokens[2].startswith("sha256=") or not _SHA_RE.match(sha):
            raise self.fail(f"bad image digest '{_clip(tokens[2])}'")
        return size, sha

    def _ddr(self, tokens: list[str]) -> int:
        if len(tokens) != 2 or tokens[0] != "ddr":
            raise self.fail("expected 'ddr size=N'")
        size = self._int_field(tokens[1], "size")
        if size % 4:
            raise self.fail(f"ddr size {size} is not a multiple of 4")
        if size > self.target.memory.DDR:
            raise self.fail(f"ddr size {size} exceeds the target's DDR {self.target.memory.DDR}")
        return size

    def _reach(self, tier: str, end: int) -> None:
        if end > self.extent.get(tier, (0, 0))[0]:
            self.extent[tier] = (end, self.lineno)

    def _int_field(self, token: str, key: str) -> int:
        name, eq, value = token.partition("=")
        if name != key or not eq or not value.isdigit():
            raise self.fail(f"expected {key}=N, got '{_clip(token)}'")
        return int(value)

    def _tensor(self, content: str, image_size: int) -> Tensor:
        parts = content.split(None, 2)
        kind, rest = (parts[1], parts[2]) if len(parts) == 3 else ("", "")
        if kind not in TENSOR_KINDS:
            raise self.fail(f"bad tensor kind '{_clip(kind)}' (one of {', '.join(TENSOR_KINDS)})")
        if not rest.startswith('"'):
            raise self.fail("tensor name must be a JSON string literal")
        try:
            name, end = _JSON.raw_decode(rest)
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad tensor name literal: {exc.msg}") from None
        tokens = rest[end:].split()
        if kind == "onchip":
            return self._onchip(name, tokens)
        if len(tokens) != 2 or not rest[end : end + 1].isspace():
            raise self.fail("expected 'tensor KIND \"NAME\" DDR[0xADDR+BYTES] TYPE[DIMS]'")
        m = _OPERAND_RE.match(tokens[0])
        if not m or m.group(1) != DDR:
            raise self.fail(f"bad tensor location '{_clip(tokens[0])}'")
        addr, nbytes = int(m.group(2), 16), int(m.group(3))
        s = _SHAPE_RE.match(tokens[1])
        dtype = s.group(1) if s else ""
        if dtype != self.target.dtype and not (
            (dtype == INDEX_DTYPE and kind == "input")
            or (dtype in HOST_DTYPES and kind in ("input", "output"))
        ):
            raise self.fail(
                f"bad tensor type '{_clip(tokens[1])}' (target dtype is {self.target.dtype}; "
                f"{INDEX_DTYPE} only for inputs, {', '.join(HOST_DTYPES)} for inputs and outputs)"
            )
        assert s is not None
        try:
            shape = tuple(int(d) for d in s.group(2).split(",")) if s.group(2) else ()
        except ValueError:
            raise self.fail(f"bad tensor shape '{_clip(tokens[1])}'") from None
        if math.prod(shape) * (INDEX_BYTES if dtype == INDEX_DTYPE else 4) != nbytes:
            raise self.fail(f"tensor {json.dumps(name)}: {nbytes} bytes do not hold shape {shape}")
        if addr % 4 or addr + nbytes > self.ddr_size:
            raise self.fail(
                f"tensor {json.dumps(name)}: {_fmt_ref(DDR, addr, nbytes)} is "
                f"misaligned or outside ddr size {self.ddr_size}"
            )
        if kind == "const" and addr + nbytes > image_size:
            raise self.fail(f"const tensor {json.dumps(name)} lies outside the image")
        return Tensor(kind, name, addr, nbytes, shape, self.lineno, dtype)

    def _onchip(self, name: str, tokens: list[str]) -> Tensor:
        """`tensor onchip "NAME" NOC[0xADDR+BYTES] f32[DIMS] homes=[R,C;...] chunk=N`."""
        m = _OPERAND_RE.match(tokens[0]) if len(tokens) == 4 else None
        s = _SHAPE_RE.match(tokens[1]) if m else None
        if not m or not s or m.group(1) != NOC or s.group(1) != self.target.dtype:
            raise self.fail(
                'expected \'tensor onchip "NAME" NOC[0xADDR+BYTES] TYPE[DIMS] homes=[R,C;...] '
                "chunk=N'"
            )
        try:
            where = parse_onchip(tokens[2:])
            shape = tuple(int(d) for d in s.group(2).split(",")) if s.group(2) else ()
        except ValueError as exc:
            raise self.fail(f"onchip tensor {json.dumps(name)}: {exc}") from None
        addr, nbytes = int(m.group(2), 16), int(m.group(3))
        elems = math.prod(shape)
        if elems * 4 != nbytes or addr % 4:
            raise self.fail(f"tensor {json.dumps(name)}: {nbytes} bytes at 0x{addr:x} do not "
                            f"hold shape {shape}")  # fmt: skip
        if len(where.homes) != -(-elems // where.chunk):
            raise self.fail(f"onchip tensor {json.dumps(name)}: {len(where.homes)} homes do not "
                            f"hold {elems} elements in chunks of {where.chunk}")  # fmt: skip
        rows, cols = self.target.mesh.rows, self.target.mesh.cols
        budget = self.target.mesh.onchip_budget
        need = chunk_bytes(where.chunk, 4)
        for r, c in where.homes:
            if r >= rows or c >= cols:
                raise self.fail(f"onchip tensor {json.dumps(name)}: home {r},{c} outside the mesh")
        used: dict[tuple[int, int], int] = {}
        for t in (*self.onchip, Tensor("onchip", name, addr, nbytes, shape, 0, onchip=where)):
            assert t.onchip is not None
            for home in t.onchip.homes:
                used[home] = used.get(home, 0) + chunk_bytes(t.onchip.chunk, 4)
        over = [h for h, n in used.items() if n > budget]
        if over or need > budget:
            home = over[0] if over else where.homes[0]
            raise self.fail(f"onchip tensor {json.dumps(name)}: more than the on-chip buffer "
                            f"({budget} bytes) of core {home[0]},{home[1]}")  # fmt: skip
        for t in self.onchip:
            if addr < t.addr + t.nbytes and t.addr < addr + nbytes:
                raise self.fail(f"onchip tensor {json.dumps(name)} overlaps {json.dumps(t.name)}")
        tensor = Tensor("onchip", name, addr, nbytes, shape, self.lineno, s.group(1), where)
        self.onchip.append(tensor)
        self._reach(NOC, addr + nbytes)
        return tensor

    def _noc_hops(self, ref: MemRef, nbytes: int, core: tuple[int, int]) -> int:
        """Hops from `core` to the farthest home of the on-chip bytes [ref.addr, +nbytes)."""
        for t in self.onchip:
            if t.addr <= ref.addr and ref.addr + nbytes <= t.addr + t.nbytes:
                assert t.onchip is not None
                lo = (ref.addr - t.addr) // 4
                return t.onchip.hops(core, lo, lo + nbytes // 4)
        raise self.fail(f"noc: {_fmt_ref(NOC, ref.addr, nbytes)} is not inside one onchip tensor")

    def _core(self, content: str, cores: list[Core]) -> Core:
        tokens = content.split()
        if len(tokens) != 3 or not tokens[1].isdigit() or not tokens[2].isdigit():
            raise self.fail("expected 'core ROW COL'")
        row, col = int(tokens[1]), int(tokens[2])
        if row >= self.target.mesh.rows or col >= self.target.mesh.cols:
            raise self.fail(f"core {row} {col} is outside the target's mesh")
        for other in cores:
            if (other.row, other.col) == (row, col):
                raise self.fail(f"core {row} {col} already defined at line {other.lineno}")
        return Core(row, col, self.lineno)

    def _line(self, content: str, core: tuple[int, int]) -> Line:
        body, bar, sync = content.partition("|")
        queue, _, rest = body.strip().partition(" ")
        instr: Instr | Event
        if queue in PIPES:
            try:
                instr, declared = parse_instr(rest)
            except ParseError as exc:
                raise self.fail(str(exc)) from None
            self._check_instr(queue, instr, declared)
            if isinstance(instr, NocCopy):
                self._check_noc(instr, declared, core)
            sync_queue = queue.lower()
        elif queue in EVENTS:
            instr = self._event(queue, rest.split())
            sync_queue = "ctrl"
        else:
            raise self.fail(f"unknown queue '{_clip(queue)}' (one of {', '.join(PIPES + EVENTS)})")
        if bar and not sync.strip():
            raise self.fail("empty synchronisation after '|'")
        waits, sets = self._sync(sync.split(), sync_queue, core)
        return Line(queue, instr, waits, sets, self.lineno)

    def _check_noc(self, instr: NocCopy, declared: dict[str, int], core: tuple[int, int]) -> None:
        """A noc copy: one side a core tier, the other NOC; `hops` must be the route's."""
        far = "src" if instr.src.tier == NOC else "dst"
        near = instr.dst if far == "src" else instr.src
        if near.tier not in TIERS:
            raise self.fail("noc: one side must be NOC and the other a core tier")
        ref = cast(MemRef, getattr(instr, far))
        hops = self._noc_hops(ref, declared[far], core)
        if instr.hops != hops:
            raise self.fail(f"noc: hops={instr.hops}, but core {core[0]},{core[1]} is {hops} hops "
                            "from the farthest home it reaches")  # fmt: skip

    def _event(self, kind: str, tokens: list[str]) -> Event:
        if kind == "barrier":
            if tokens:
                raise self.fail(f"barrier takes no operands, got '{_clip(tokens[0])}'")
            return Event(kind)
        m = _OPERAND_RE.match(tokens[0]) if len(tokens) == 2 else None
        buf = tokens[1].removeprefix("b=") if m else ""
        if not m or not tokens[1].startswith("b=") or not buf.isdigit():
            raise self.fail(f"expected '{kind} TIER[0xADDR+BYTES] b=ID'")
        tier, addr, size = m.group(1), int(m.group(2), 16), int(m.group(3))
        if tier not in TIERS:
            raise self.fail(f"{kind}: {tier} is not an on-chip tier")
        if addr % self.target.memory.alignment or size == 0:
            raise self.fail(
                f"{kind}: {_fmt_ref(tier, addr, size)} is empty or not aligned to "
                f"{self.target.memory.alignment}"
            )
        if addr + size > self.target.memory.capacity(tier):
            raise self.fail(
                f"{kind}: {_fmt_ref(tier, addr, size)} exceeds {tier} capacity "
                f"{self.target.memory.capacity(tier)}"
            )
        self._reach(tier, addr + size)
        return Event(kind, tier, addr, size, int(buf))

    def _sync(
        self, tokens: list[str], queue: str, core: tuple[int, int]
    ) -> tuple[tuple[Flag, ...], tuple[Flag, ...]]:
        if len(tokens) % 2:
            raise self.fail(f"expected 'wait|set SRC>DST#N' pairs, got '{_clip(tokens[-1])}'")
        waits: list[Flag] = []
        sets: list[Flag] = []
        for verb, spec in zip(tokens[::2], tokens[1::2], strict=True):
            m = _FLAG_RE.match(spec)
            if verb not in ("wait", "set") or not m:
                raise self.fail(f"bad synchronisation '{_clip(verb)} {_clip(spec)}'")
            src_at = (int(m.group(2)), int(m.group(3))) if m.group(2) else core
            dst_at = (int(m.group(5)), int(m.group(6))) if m.group(5) else core
            if (dst_at if verb == "wait" else src_at) != core:
                raise self.fail(f"{verb} '{_clip(spec)}' names another core for this core's queue")
            # queue names interned: a stream has hundreds of thousands of flags
            src, dst = m.group(1), m.group(4)
            flag = Flag(_NAMES.get(src, src), _NAMES.get(dst, dst), int(m.group(7)), src_at, dst_at)
            if flag.src not in QUEUE_NAMES or flag.dst not in QUEUE_NAMES:
                raise self.fail(f"flag {flag}: unknown queue (one of {', '.join(QUEUE_NAMES)})")
            mine, other = (self.flag_sets, self.flag_waits)
            if verb == "wait":
                mine, other = other, mine
            if (flag.dst if verb == "wait" else flag.src) != queue:
                raise self.fail(f"{verb} {flag} on queue {queue}")
            key = flag.key
            if key in mine:
                raise self.fail(f"flag #{flag.num} {verb} twice (first at line {mine[key][1]})")
            if key in other and other[key][0] != flag:
                raise self.fail(
                    f"flag {flag} does not match {other[key][0]} at line {other[key][1]}"
                )
            mine[key] = (flag, self.lineno)
            (waits if verb == "wait" else sets).append(flag)
        return tuple(waits), tuple(sets)

    def _check_instr(self, queue: str, instr: Instr, declared: dict[str, int]) -> None:
        op = instr.opcode
        if isinstance(instr, Gather) and instr.index not in GATHER_INDEX:
            raise self.fail(f"gather: bad index={_clip(instr.index)} ({' or '.join(GATHER_INDEX)})")
        try:
            extents = instr.extents()
        except ValueError:
            raise self.fail(f"{op}: dims and strides differ in length") from None
        for name, value in _ints(instr):
            if value < 0 or value > _MAX_FIELD or (value == 0 and name in _POSITIVE):
                raise self.fail(f"{op}: bad {name}={_clip(str(value))}")
        for name, ref in instr.operands().items():
            assert isinstance(ref, MemRef)
            nbytes = declared[name]
            if ref.tier == NOC:
                cap = self.extent.get(NOC, (0, 0))[0]
            else:
                cap = self.ddr_size if ref.tier == DDR else self.target.memory.capacity(ref.tier)
            if ref.addr % 4:
                raise self.fail(f"{op}: operand {name} address 0x{ref.addr:x} not aligned to 4")
            if ref.addr + nbytes > cap:
                raise self.fail(
                    f"{op}: operand {name}={_fmt_ref(ref.tier, ref.addr, nbytes)} "
                    f"exceeds {ref.tier} size {cap}"
                )
            self._reach(ref.tier, ref.addr + nbytes)
            if extents[name] * 4 > nbytes:
                raise self.fail(
                    f"{op}: operand {name} pattern spans {extents[name] * 4} bytes, "
                    f"more than its declared {nbytes}"
                )
        pipe = self._pipe_and_kind(instr)
        if pipe != queue:
            raise self.fail(f"{op} must run on {pipe}, not {queue}")

    def _pipe_and_kind(self, instr: Instr) -> str:
        op = instr.opcode
        if isinstance(instr, (Copy, Spill)):
            try:
                pipe = copy_pipe(instr.src.tier, instr.dst.tier)
            except ValueError as exc:
                raise self.fail(f"{op}: {exc}") from None
            if isinstance(instr, Spill) and DDR not in (instr.src.tier, instr.dst.tier):
                raise self.fail("spill: one side must be DDR")
            if (NOC in (instr.src.tier, instr.dst.tier)) != isinstance(instr, NocCopy):
                raise self.fail(f"{op}: only a noc copy reaches NOC, and it must")
            return pipe
        if isinstance(instr, Gather):
            if instr.table.tier != DDR or instr.idx.tier != DDR or instr.dst.tier not in TIERS:
                raise self.fail("gather: table and idx must be in DDR and dst on chip")
            return "MTE2"
        if isinstance(instr, Img2Col):
            if instr.src.tier != "L1" or instr.dst.tier not in ("L0A", "L0B"):
                raise self.fail("img2col: src must be in L1 and dst in L0A or L0B")
            return "MTE1"
        if isinstance(instr, Mmad):
            tiers = (instr.a.tier, instr.b.tier, instr.dst.tier)
            if tiers != ("L0A", "L0B", "L0C"):
                raise self.fail("mmad: a, b, dst must be in L0A, L0B, L0C")
            if instr.acc not in (0, 1):
                raise self.fail(f"mmad: acc must be 0 or 1, got {instr.acc}")
            return "CUBE"
        for name, ref in instr.operands().items():
            if ref.tier not in VECTOR_TIERS:
                raise self.fail(f"{op}: operand {name} must be in UB or L0C, not {ref.tier}")
        if isinstance(instr, VUnary):
            if instr.op not in UNARY_OPS:
                raise self.fail(f"vunary: unknown op '{instr.op}'")
            if len(instr.scalars) != UNARY_ARITY.get(instr.op, 0):
                raise self.fail(
                    f"vunary {instr.op}: expects {UNARY_ARITY.get(instr.op, 0)} "
                    f"scalars, got {len(instr.scalars)}"
                )
        elif isinstance(instr, VBinary) and instr.op not in BINARY_OPS:
            raise self.fail(f"vbinary: unknown op '{instr.op}'")
        elif isinstance(instr, VReduce):
            if instr.op not in REDUCE_OPS:
                raise self.fail(f"vreduce: unknown op '{instr.op}'")
            if instr.nred > len(instr.dims) or len(instr.src_strides) != len(instr.dims):
                raise self.fail("vreduce: nred, dims and strides are inconsistent")
        return "VECTOR"


_MAX_FIELD = 1 << 32  # no count, stride or padding reaches this many elements (int64-safe)
_POSITIVE = frozenset(("dims", "size", "c", "h", "w", "kh", "kw", "sh", "sw", "dh", "dw", "oh",
                       "ow", "m", "n", "k", "row", "rows"))  # fmt: skip


def _ints(instr: Instr) -> Iterator[tuple[str, int]]:
    for name in field_names(type(instr)):
        value = getattr(instr, name)
        if isinstance(value, int):
            yield name, value
        elif isinstance(value, tuple) and name != "scalars":
            for v in value:
                yield name, v


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
