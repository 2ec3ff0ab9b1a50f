"""The command-stream IR: a stream's header, tensors and per-core lines, and codegen's output.

Its text form is `npucc.ir.stream_text` (records) and `npucc.ir.instr_text` (instruction
bodies); `npucc.ir.stream_parse` reads it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import host_dtype
from npucc.ir.isa import DDR, NOC, Instr
from npucc.ir.onchip import OnChip
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
from npucc.target import Target

FlagKey = tuple[tuple[int, int], tuple[int, int], int]  # setter core, waiter core, number


class StreamError(NpuccError):
    """A malformed or incorrect command stream; the message starts with `FILE:LINE:`."""


# NOTE: Flag, Event and Line are not frozen (hashable all the same, `unsafe_hash`) but never
# assigned once made: the parser makes one per flag, event and line (VGG-19: 805 k, 216 k and
# 398 k), and a frozen dataclass's __init__ (object.__setattr__ per field) took 3x as long
@dataclass(slots=True, unsafe_hash=True)
class Flag:
    """A synchronisation token `src>dst#num` between two queues, of one core or of two."""

    src: str
    dst: str
    num: int
    src_at: tuple[int, int] = (0, 0)  # (row, col) of the core whose queue sets it
    dst_at: tuple[int, int] = (0, 0)  # (row, col) of the core whose queue waits for it
    # identity of the token: both endpoints and the number (NOTE: kept, not made at each use:
    # the interpreter looks a flag up by it about six times)
    key: FlagKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.src_at, self.dst_at, self.num)

    def wait_text(self) -> str:
        """The flag as its waiting line writes it (the setter's core if it is another)."""
        far = self.src_at if self.src_at != self.dst_at else None
        return format_flag(self.src, self.dst, self.num, src_at=far)

    def set_text(self) -> str:
        """The flag as its setting line writes it (the waiter's core if it is another)."""
        far = self.dst_at if self.src_at != self.dst_at else None
        return format_flag(self.src, self.dst, self.num, dst_at=far)

    def __str__(self) -> str:
        if self.src_at == self.dst_at:
            return format_flag(self.src, self.dst, self.num)
        return format_flag(self.src, self.dst, self.num, self.src_at, self.dst_at)


@dataclass(slots=True, unsafe_hash=True)  # NOTE: not frozen, see Flag
class Event:
    """A pipe-less event: alloc/free of `tier[addr+size]` (buffer `buf`), or a barrier."""

    kind: str
    tier: str = ""
    addr: int = 0
    size: int = 0  # bytes
    buf: int = -1

    def body(self) -> str:
        """The text after the queue name (none for a barrier)."""
        return (
            ""
            if self.kind == "barrier"
            else format_event(self.tier, self.addr, self.size, self.buf)
        )


@dataclass(slots=True, unsafe_hash=True)  # NOTE: not frozen, see Flag
class Line:
    """One record of a core block: a pipe instruction or an event, with its flags."""

    queue: str  # a PIPES name, or alloc/free/barrier
    instr: Instr | Event
    waits: tuple[Flag, ...]
    sets: tuple[Flag, ...]
    lineno: int

    def body(self, target: Target) -> str:
        """The text between the queue name and the `|` (operand bytes: `target`'s)."""
        ins = self.instr
        return format_body(ins, target) if isinstance(ins, Instr) else ins.body()

    def text(self, target: Target) -> str:
        """The line as codegen writes it."""
        sync = format_sync([f.wait_text() for f in self.waits], [f.set_text() for f in self.sets])
        return format_line(self.queue, self.body(target), sync)


@dataclass(frozen=True, slots=True)
class StreamTensor:
    """A tensor declared in the stream header (in DDR, or on chip in NOC)."""

    kind: str  # const, input, output, temp, onchip
    name: str
    addr: int
    nbytes: int
    shape: tuple[int, ...]
    lineno: int
    dtype: str = "f32"  # the target dtype, i64 (an input of indices, 8 bytes an element), or a
    # HOST_DTYPES type of an input or output (npucc.ir.dtypes; held as the target dtype)
    onchip: OnChip | None = None  # an onchip tensor's homes (it lies in NOC, not DDR)
    quant: tuple[float, int] | None = None  # an int8 program's input or output: (scale, zp)

    def text(self) -> str:
        """The `tensor` line."""
        tier = DDR if self.onchip is None else NOC
        name = json.dumps(self.name, ensure_ascii=True)
        return format_tensor(self.kind, name, tier, self.addr, self.nbytes, self.dtype, self.shape,
                             self.onchip, self.quant)  # fmt: skip


@dataclass(slots=True)
class StreamCore:
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
    tensors: dict[str, StreamTensor]
    cores: list[StreamCore]
    image_line: int = 0  # line of the `image` record
    # memory (tier or DDR) -> (bytes from 0 that the stream addresses, line that reaches them)
    extent: dict[str, tuple[int, int]] = field(default_factory=dict)

    def where(self, lineno: int) -> str:
        """The `FILE:LINE` prefix of a line."""
        return f"{self.path}:{lineno}"

    def specs(self, kind: str) -> dict[str, TensorSpec]:
        """The declared model inputs (`kind` "input") or outputs ("output"), in stream order."""
        return {
            t.name: TensorSpec(t.shape, host_dtype(t.dtype))
            for t in sorted(self.tensors.values(), key=lambda t: t.lineno)
            if t.kind == kind
        }

    def to_text(self) -> str:
        """The stream in codegen's canonical form (it round-trips codegen's output)."""
        header = format_header(self.target.to_json(), self.image_size, self.image_sha256,
                               self.ddr_size)  # fmt: skip
        tensors = [t.text() for t in sorted(self.tensors.values(), key=lambda t: t.lineno)]
        cores = [(c.row, c.col, [line.text(self.target) for line in c.lines]) for c in self.cores]
        return format_stream(header, tensors, cores)


class TensorSpec(tuple[int, ...]):
    """A model input's or output's shape (the tuple itself) and its host dtype (`.dtype`).

    NOTE: a tuple so that code taking a shape (`np.zeros(program.inputs["x"])`) keeps working.
    """

    dtype: np.dtype

    def __new__(cls, shape: tuple[int, ...], dtype: str | np.dtype = "float32") -> TensorSpec:
        spec = super().__new__(cls, shape)
        spec.dtype = np.dtype(dtype)
        return spec

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape as a plain tuple."""
        return tuple(self)

    def __repr__(self) -> str:
        return f"TensorSpec({tuple(self)!r}, {str(self.dtype)!r})"

    def __reduce__(self) -> tuple[type[TensorSpec], tuple[tuple[int, ...], str]]:
        return (TensorSpec, (tuple(self), str(self.dtype)))


@dataclass(slots=True)
class Generated:
    """Codegen's output: the stream text and the const image it loads at DDR address 0."""

    stream: str
    image: bytes  # its consts' data are read-only views of it (codegen)
    inputs: dict[str, TensorSpec]  # model input name -> shape (and dtype)
    outputs: dict[str, TensorSpec]  # model output name -> shape (and dtype)
    energy_pj: float = 0.0  # what its instructions spend (isa_cost.instr_energy), picojoules

    def to_text(self) -> str:
        """The stream itself."""
        return self.stream
