"""What a run adds up: busy cycles per pipe, energy, bytes per path, MACs, instruction counts."""

from __future__ import annotations

from typing import TypedDict

from npucc.ir.isa import (
    DDR,
    HOST,
    PIPES,
    Copy,
    Gather,
    HostOp,
    Img2Col,
    Instr,
    Mmad,
    NocCopy,
    Spill,
    vector_elements,
)
from npucc.ir.isa_cost import copy_bytes, gather_bytes, operand_nbytes
from npucc.target import Target


class Counters(TypedDict):
    """Statistics of a run (a plain dict at run time)."""

    bytes: dict[str, int]  # "SRC->DST" tier path -> bytes copied
    noc_byte_hops: int  # bytes moved over the NoC times the hops each travelled
    macs: int
    vector_elements: int
    instructions: int
    events: int
    opcodes: dict[str, int]  # opcode -> instructions executed


class Tally:
    """The running totals of a run."""

    __slots__ = ("target", "busy", "energy", "counters")

    def __init__(self, target: Target) -> None:
        self.target = target
        # pipe -> cycles busy, summed over cores (HOST only once a host record ran)
        self.busy = dict.fromkeys((p for p in PIPES if p != HOST), 0)
        self.energy = 0.0  # picojoules
        self.counters: Counters = {
            "bytes": {},
            "noc_byte_hops": 0,
            "macs": 0,
            "vector_elements": 0,
            "instructions": 0,
            "events": 0,
            "opcodes": {},
        }

    def event(self) -> None:
        """An alloc, free or barrier ran."""
        self.counters["events"] += 1

    def instr(self, ins: Instr, pipe: str, cycles: int, energy: float) -> None:
        """An instruction ran on `pipe` for `cycles`, spending `energy`."""
        self.busy[pipe] = self.busy.get(pipe, 0) + cycles
        self.energy += energy
        c = self.counters
        c["instructions"] += 1
        c["opcodes"][ins.opcode] = c["opcodes"].get(ins.opcode, 0) + 1
        if isinstance(ins, Mmad):
            c["macs"] += ins.m * ins.n * ins.k
        elif vector_elements(ins):
            c["vector_elements"] += vector_elements(ins)
        elif isinstance(ins, HostOp):  # over the host link
            spans = operand_nbytes(self.target, ins)
            for path, names in (("DDR->HOST", ins.reads), ("HOST->DDR", ins.writes)):
                nbytes = sum(spans[n] for n in names)
                c["bytes"][path] = c["bytes"].get(path, 0) + nbytes
        else:
            if isinstance(ins, Gather):
                nbytes = gather_bytes(self.target, ins)
            else:
                assert isinstance(ins, (Copy, Spill, Img2Col))  # the other INSTRUCTIONS above
                nbytes = copy_bytes(self.target, ins)
            src_tier = DDR if isinstance(ins, Gather) else ins.src.tier
            path = f"{src_tier}->{ins.dst.tier}"
            if isinstance(ins, NocCopy):
                c["noc_byte_hops"] += nbytes * ins.hops
            c["bytes"][path] = c["bytes"].get(path, 0) + nbytes
