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

    __slots__ = ("target", "busy", "energy", "counters", "runs")

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
        # (pipe, id of an instruction) -> [it (held: its id is not reused), cycles, runs], in
        # the order of their first runs; `close` adds them up
        self.runs: dict[tuple[str, int], list] = {}

    def event(self) -> None:
        """An alloc, free or barrier ran."""
        self.counters["events"] += 1

    def instr(self, ins: Instr, pipe: str, cycles: int, energy: float) -> None:
        """An instruction ran on `pipe` for `cycles`, spending `energy`.

        NOTE: energy is summed as the steps run (a float: its order is kept); the rest is
        counted per instruction and added up by `close` (VGG-19: 182 k runs of 47 k)."""
        self.energy += energy
        run = self.runs.get((pipe, id(ins)))
        if run is None:
            self.runs[pipe, id(ins)] = [ins, cycles, 1]
        else:
            run[2] += 1

    def close(self) -> None:
        """Add up the instructions' runs: busy cycles, instruction, opcode, byte and work
        counts (each dict's keys in the order of their first runs, as if added per run)."""
        c = self.counters
        for (pipe, _), (ins, cycles, n) in self.runs.items():
            self.busy[pipe] = self.busy.get(pipe, 0) + cycles * n
            c["instructions"] += n
            c["opcodes"][ins.opcode] = c["opcodes"].get(ins.opcode, 0) + n
            for name, path, k in self._adds(ins):
                if path:
                    c["bytes"][path] = c["bytes"].get(path, 0) + k * n
                else:
                    c[name] += k * n  # type: ignore[literal-required]
        self.runs = {}

    def _adds(self, ins: Instr) -> list[tuple[str, str, int]]:
        """What one run of `ins` adds: (counter, "SRC->DST" path of a bytes counter or "",
        amount)."""
        if isinstance(ins, Mmad):
            return [("macs", "", ins.m * ins.n * ins.k)]
        if vector_elements(ins):
            return [("vector_elements", "", vector_elements(ins))]
        if isinstance(ins, HostOp):  # over the host link
            spans = operand_nbytes(self.target, ins)
            return [
                ("bytes", path, sum(spans[n] for n in names))
                for path, names in (("DDR->HOST", ins.reads), ("HOST->DDR", ins.writes))
            ]
        if isinstance(ins, Gather):
            nbytes = gather_bytes(self.target, ins)
        else:
            assert isinstance(ins, (Copy, Spill, Img2Col))  # the other INSTRUCTIONS above
            nbytes = copy_bytes(self.target, ins)
        src_tier = DDR if isinstance(ins, Gather) else ins.src.tier
        hops = [("noc_byte_hops", "", nbytes * ins.hops)] if isinstance(ins, NocCopy) else []
        return [*hops, ("bytes", f"{src_tier}->{ins.dst.tier}", nbytes)]
