"""The interpreter's opt-in execution trace: every instruction's timing and memory accesses."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TraceOperand:
    """One operand of a traced instruction: where it points and how many bytes it spans."""

    name: str  # field name: dst, src, a, b
    tier: str  # L1, UB, L0A, L0B, L0C or DDR
    addr: int  # byte address
    nbytes: int  # bytes from the first to one past the last element touched
    write: bool  # written (else read)


@dataclass(frozen=True, slots=True)
class TraceInstr:
    """One executed pipe instruction."""

    core: tuple[int, int]  # mesh row, column
    queue: str  # pipe
    start: int  # cycle
    finish: int  # cycle
    opcode: str
    operands: tuple[TraceOperand, ...]
    lineno: int  # line in the stream


@dataclass(frozen=True, slots=True)
class TraceMem:
    """A region of an on-chip tier becoming live (alloc, spill in) or dead (free, spill out)."""

    core: tuple[int, int]
    time: int  # cycle
    kind: str  # alloc | free
    tier: str
    addr: int  # byte address
    size: int  # bytes
    lineno: int  # the alloc/free/spill line


@dataclass(slots=True)
class Trace:
    """Everything a traced run recorded, in execution order."""

    instrs: list[TraceInstr] = field(default_factory=list)
    mem: list[TraceMem] = field(default_factory=list)
