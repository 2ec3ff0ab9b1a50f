"""The interpreter's opt-in execution trace: every instruction's timing and memory accesses."""

from __future__ import annotations

from dataclasses import dataclass, field

from npucc.interp.access import resolved
from npucc.ir.isa import DDR, Instr, MemRef, Spill
from npucc.ir.isa_cost import operand_nbytes
from npucc.target import Target


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


class Tracer:
    """Records a traced run into a `Trace`."""

    __slots__ = ("trace", "target")

    def __init__(self, target: Target) -> None:
        self.trace = Trace()
        self.target = target  # its element sizes give each operand's bytes

    def mem(self, core: tuple[int, int], time: int, kind: str, tier: str, addr: int, size: int,
            lineno: int) -> None:  # fmt: skip
        """A region became live (alloc) or dead (free)."""
        self.trace.mem.append(TraceMem(core, time, kind, tier, addr, size, lineno))

    def instr(self, core: tuple[int, int], queue: str, start: int, finish: int, ins: Instr,
              lineno: int) -> None:  # fmt: skip
        """An instruction ran (a spill also moves a region on or off chip)."""
        nbytes = operand_nbytes(self.target, ins)
        operands = tuple(
            TraceOperand(name, ref.tier, ref.addr, nbytes[name], name in ins.writes)
            for name, ref in ins.operands().items()
            if isinstance(ref, MemRef)
        )
        self.trace.instrs.append(
            TraceInstr(core, queue, start, finish, ins.opcode, operands, lineno)
        )
        if isinstance(ins, Spill):
            dst, src = resolved(ins.dst), resolved(ins.src)
            size = nbytes["src"]
            if dst.tier != DDR:
                self.mem(core, start, "alloc", dst.tier, dst.addr, size, lineno)
            else:
                self.mem(core, finish, "free", src.tier, src.addr, size, lineno)
