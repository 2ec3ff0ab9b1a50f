"""Each instruction's cost: its path, bytes, MACs and lanes, priced by `npucc.target.cost`.

The one dispatch from instructions to the numeric formulas: the lowering stamps nodes with
`instr_cycles`, the estimators and the interpreter charge `instr_energy` and pass `ddr_bytes`
through the shared DDR channel; a compiled program's spills are `TargetSpillModel`'s DMAs.
"""

from __future__ import annotations

import math

from npucc.ir.dtypes import INDEX_DTYPE
from npucc.ir.isa import (
    DDR,
    NOC,
    SOFTMAX_WEIGHT,
    VECTOR_OP_WEIGHT,
    Copy,
    Gather,
    HostOp,
    Img2Col,
    Instr,
    Mmad,
    NocCopy,
    Requant,
    Spill,
    VBinary,
    VFill,
    VReduce,
    VSoftmax,
    VUnary,
    dma_path,
    vector_elements,
)
from npucc.target import DTYPE_BYTES, Target
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


def operand_bytes(target: Target | None, instr: Instr, name: str) -> int:
    """Bytes of one element of operand `name` (its offsets and extents count these).

    NOTE: the one home of an operand's element size: its tier's (`Target.tier_bytes`: L0C holds
    the accumulator type) except a spill (both sides the buffer's tier's, a spill slot in DDR
    holds L0C's accumulators unconverted) and a gather's i64 indices (4-byte words). Without a
    target every element is 4 bytes (the fp32 form that symbolic text prints).
    """
    if target is None:
        return 4
    if isinstance(instr, Gather) and name == "idx":
        return 4 if instr.index == INDEX_DTYPE else DTYPE_BYTES[instr.index]
    if isinstance(instr, Spill):
        return target.tier_bytes(instr.dst.tier if instr.src.tier == DDR else instr.src.tier)
    return target.tier_bytes(getattr(instr, name).tier)


def operand_nbytes(target: Target | None, instr: Instr) -> dict[str, int]:
    """Bytes each operand's access pattern spans (its extent in elements times their size)."""
    return {n: e * operand_bytes(target, instr, n) for n, e in instr.extents().items()}


def copy_bytes(target: Target, instr: Copy | Spill | Img2Col) -> int:
    """Bytes one DMA moves: its elements at the larger element size of its two sides (a
    conversion L0C -> UB reads 4-byte accumulators and writes 2-byte fp16 values)."""
    if isinstance(instr, Spill):
        return instr.size * operand_bytes(target, instr, "src")
    elems = instr.extents()["dst"] if isinstance(instr, Img2Col) else math.prod(instr.dims)
    return elems * max(operand_bytes(target, instr, "src"), operand_bytes(target, instr, "dst"))


def copy_cycles(target: Target, src_tier: str, dst_tier: str, nbytes: int) -> int:
    """Cycles of one DMA moving nbytes from src_tier to dst_tier (on the path between them)."""
    return dma_cycles(target, dma_path(src_tier, dst_tier), nbytes)


def instr_cycles(target: Target, instr: Instr) -> int:
    """Cycles one instruction occupies its pipe."""
    if isinstance(instr, NocCopy):
        return noc_cycles(target, copy_bytes(target, instr), instr.hops)
    if isinstance(instr, (Copy, Spill)):
        return copy_cycles(target, instr.src.tier, instr.dst.tier, copy_bytes(target, instr))
    if isinstance(instr, Img2Col):
        return copy_cycles(target, "L1", "L0A", copy_bytes(target, instr))
    if isinstance(instr, Gather):
        return copy_cycles(target, DDR, instr.dst.tier, gather_bytes(target, instr))
    if isinstance(instr, Mmad):
        return mmad_cycles(target, instr.m, instr.n, instr.k)
    if isinstance(instr, Requant):  # the fix-pipe converts in flight: timed as the L0C -> UB copy
        return copy_cycles(target, "L0C", "UB", instr.m * instr.n * target.tier_bytes("L0C"))
    if isinstance(instr, (VUnary, VBinary, VReduce)):  # NOTE: `q` (int8) converts in flight
        return vector_cycles(target, math.prod(instr.dims), VECTOR_OP_WEIGHT.get(instr.op, 1))
    if isinstance(instr, VFill):
        return vector_cycles(target, math.prod(instr.dims))
    if isinstance(instr, VSoftmax):  # max, exp, sum, divide: the weights of exp and div, + 2
        return vector_cycles(target, instr.rows * instr.cols, SOFTMAX_WEIGHT)
    if isinstance(instr, HostOp):
        return host_cycles(target, sum(operand_nbytes(target, instr).values()))
    raise TypeError(f"no cycle formula for {type(instr).__name__}")


def gather_bytes(target: Target, instr: Gather) -> int:
    """Bytes a gather moves: one DMA of its n rows plus the n indices it reads first."""
    idx = instr.extents()["idx"] * operand_bytes(target, instr, "idx")
    return instr.n * instr.row * operand_bytes(target, instr, "dst") + idx


def ddr_bytes(target: Target, ins: Instr) -> int:
    """Bytes an instruction moves to or from DDR (0 for one that does not touch DDR; a `noc`
    copy never does, although before codegen its on-chip side is still a DDR key; a host
    segment's bytes go over the host link, not the NPU's DDR channel)."""
    if isinstance(ins, NocCopy):
        return 0
    if isinstance(ins, Gather):
        return gather_bytes(target, ins)
    if isinstance(ins, (Spill, Copy)) and DDR in (ins.src.tier, ins.dst.tier):
        return copy_bytes(target, ins)
    return 0


def noc_bytes(target: Target, ins: Instr) -> tuple[int, int]:
    """Bytes a `noc` copy moves over the NoC: (read from a home, written to one)."""
    if not isinstance(ins, NocCopy):
        return 0, 0
    nbytes = math.prod(ins.dims) * target.elem_bytes
    return (0, nbytes) if ins.dst.tier in (DDR, NOC) else (nbytes, 0)


def instr_energy(target: Target, instr: Instr) -> float:
    """Picojoules one instruction spends: MACs, vector lanes, and bytes read/written per tier."""
    pj = 0.0
    if isinstance(instr, HostOp):  # NOTE: the host's energy is not modelled (nor its link's)
        return 0.0
    if isinstance(instr, Mmad):
        pj += mac_energy(target, instr.m * instr.n * instr.k)
    else:
        pj += vector_energy(target, vector_elements(instr))
    if isinstance(instr, NocCopy):  # the core side's tier, and the NoC (no DDR)
        nbytes = copy_bytes(target, instr)
        near = instr.src.tier if instr.dst.tier in (DDR, NOC) else instr.dst.tier
        return tier_energy(target, near, nbytes) + noc_energy(target, nbytes, instr.hops)
    if isinstance(instr, Gather):  # the rows read (not the whole table) and the indices
        rows = instr.n * instr.row * operand_bytes(target, instr, "dst")
        return tier_energy(target, DDR, gather_bytes(target, instr)) + tier_energy(
            target, instr.dst.tier, rows
        )
    for name, elems in instr.extents().items():
        tier = getattr(instr, name).tier
        if isinstance(instr, (Copy, VUnary, VBinary)):
            elems = math.prod(instr.dims)
        pj += tier_energy(target, tier, elems * operand_bytes(target, instr, name))
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
