"""Each instruction's cost: its path, bytes, MACs and lanes, priced by `npucc.target.cost`.

The one dispatch from instructions to the numeric formulas: the lowering stamps nodes with
`instr_cycles`, the estimators and the interpreter charge `instr_energy` and pass `ddr_bytes`
through the shared DDR channel; a compiled program's spills are `TargetSpillModel`'s DMAs.
"""

from __future__ import annotations

import math

from npucc.ir.isa import (
    DDR,
    NOC,
    VECTOR_OP_WEIGHT,
    Copy,
    Gather,
    HostOp,
    Img2Col,
    Instr,
    Mmad,
    NocCopy,
    Spill,
    VBinary,
    VFill,
    VReduce,
    VUnary,
    dma_path,
)
from npucc.target import Target
from npucc.target.cost import (
    SpillModel,
    dma_cycles,
    host_cycles,
    mac_energy,
    mmad_cycles,
    noc_cycles,
    noc_energy,
    tier_energy,
    vector_cycles,
    vector_energy,
)


def copy_cycles(target: Target, src_tier: str, dst_tier: str, nbytes: int) -> int:
    """Cycles of one DMA moving nbytes from src_tier to dst_tier (on the path between them)."""
    return dma_cycles(target, dma_path(src_tier, dst_tier), nbytes)


def instr_cycles(target: Target, instr: Instr) -> int:
    """Cycles one instruction occupies its pipe."""
    eb = target.elem_bytes
    if isinstance(instr, NocCopy):
        return noc_cycles(target, math.prod(instr.dims) * eb, instr.hops)
    if isinstance(instr, Copy):
        src, dst = instr.src.tier, instr.dst.tier
        return copy_cycles(target, src, dst, math.prod(instr.dims) * eb)
    if isinstance(instr, Spill):
        return copy_cycles(target, instr.src.tier, instr.dst.tier, instr.size * eb)
    if isinstance(instr, Img2Col):
        return copy_cycles(target, "L1", "L0A", instr.extents()["dst"] * eb)
    if isinstance(instr, Gather):
        return copy_cycles(target, DDR, instr.dst.tier, gather_bytes(target, instr))
    if isinstance(instr, Mmad):
        return mmad_cycles(target, instr.m, instr.n, instr.k)
    if isinstance(instr, (VUnary, VBinary, VReduce)):
        return vector_cycles(target, math.prod(instr.dims), VECTOR_OP_WEIGHT.get(instr.op, 1))
    if isinstance(instr, VFill):
        return vector_cycles(target, math.prod(instr.dims))
    if isinstance(instr, HostOp):
        return host_cycles(target, sum(instr.extents().values()) * eb)
    raise TypeError(f"no cycle formula for {type(instr).__name__}")


def gather_bytes(target: Target, instr: Gather) -> int:
    """Bytes a gather moves: one DMA of its n rows plus the n indices it reads first."""
    return instr.n * instr.row * target.elem_bytes + 4 * instr.extents()["idx"]


def ddr_bytes(target: Target, ins: Instr) -> int:
    """Bytes an instruction moves to or from DDR (0 for one that does not touch DDR; a `noc`
    copy never does, although before codegen its on-chip side is still a DDR key; a host
    segment's bytes go over the host link, not the NPU's DDR channel)."""
    if isinstance(ins, NocCopy):
        return 0
    if isinstance(ins, Gather):
        return gather_bytes(target, ins)
    if isinstance(ins, Spill) and DDR in (ins.src.tier, ins.dst.tier):
        return ins.size * target.elem_bytes
    if isinstance(ins, Copy) and DDR in (ins.src.tier, ins.dst.tier):
        return math.prod(ins.dims) * target.elem_bytes
    return 0


def noc_bytes(target: Target, ins: Instr) -> tuple[int, int]:
    """Bytes a `noc` copy moves over the NoC: (read from a home, written to one)."""
    if not isinstance(ins, NocCopy):
        return 0, 0
    nbytes = math.prod(ins.dims) * target.elem_bytes
    return (0, nbytes) if ins.dst.tier in (DDR, NOC) else (nbytes, 0)


def instr_energy(target: Target, instr: Instr) -> float:
    """Picojoules one instruction spends: MACs, vector lanes, and bytes read/written per tier."""
    eb = target.elem_bytes
    pj = 0.0
    if isinstance(instr, HostOp):  # NOTE: the host's energy is not modelled (nor its link's)
        return 0.0
    if isinstance(instr, Mmad):
        pj += mac_energy(target, instr.m * instr.n * instr.k)
    elif isinstance(instr, (VUnary, VBinary, VReduce, VFill)):
        pj += vector_energy(target, math.prod(instr.dims))
    if isinstance(instr, NocCopy):  # the core side's tier, and the NoC (no DDR)
        nbytes = math.prod(instr.dims) * eb
        near = instr.src.tier if instr.dst.tier in (DDR, NOC) else instr.dst.tier
        return tier_energy(target, near, nbytes) + noc_energy(target, nbytes, instr.hops)
    if isinstance(instr, Gather):  # the rows read (not the whole table) and the indices
        rows = instr.n * instr.row * eb
        return tier_energy(target, DDR, gather_bytes(target, instr)) + tier_energy(
            target, instr.dst.tier, rows
        )
    for name, elems in instr.extents().items():
        tier = getattr(instr, name).tier
        nbytes = elems * eb
        if isinstance(instr, (Copy, VUnary, VBinary)):
            nbytes = math.prod(instr.dims) * eb
        pj += tier_energy(target, tier, nbytes)
    return pj


def spill_cycles(target: Target, tier: str, nbytes: int, out: bool) -> int:
    """Cycles of a SPILL_OUT (tier -> DDR) or SPILL_IN (DDR -> tier) of nbytes."""
    return copy_cycles(target, tier, DDR, nbytes) if out else copy_cycles(target, DDR, tier, nbytes)


class TargetSpillModel(SpillModel):
    """A compiled program always copies the buffer out and back by DMA on the target's paths."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def out_cycles(self, tier: str, size: int, clean: bool) -> int:
        return spill_cycles(self.target, tier, size, out=True)

    def in_cycles(self, tier: str, size: int, clean: bool) -> int:
        return spill_cycles(self.target, tier, size, out=False)

    def traffic(self, size: int, clean: bool) -> int:
        return 2 * size
