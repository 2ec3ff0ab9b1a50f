"""The one home of every cycle and energy formula.

The scheduler's predictions, the cost models and the interpreter's timing all call these
functions, so a predicted makespan and an interpreted one agree exactly.
"""

from __future__ import annotations

import math

from npucc.ir.isa import (
    DDR,
    NOC,
    VECTOR_OP_WEIGHT,
    Copy,
    Gather,
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

# Operator-level trace rules (shared/dan-traces.md, rule 2): spill latency is affine in bytes.
TRACE_SPILL_FIXED = 150
TRACE_SPILL_PER_BYTE = 2


def dma_cycles(target: Target, src_tier: str, dst_tier: str, nbytes: int) -> int:
    """Cycles of one DMA moving nbytes: fixed latency plus bytes over bandwidth."""
    path = target.dma.path(dma_path(src_tier, dst_tier))
    return path.latency + math.ceil(nbytes / path.bandwidth)


def noc_cycles(target: Target, nbytes: int, hops: int) -> int:
    """Cycles of one NoC DMA: fixed latency + hops x hop latency + bytes over link bandwidth.

    NOTE: each transfer gets the whole link bandwidth (contention between concurrent transfers
    on a shared link is not modelled).
    """
    m = target.mesh
    return m.noc_dma_cycles + hops * m.noc_hop_latency + math.ceil(nbytes / m.noc_bandwidth)


def noc_energy(target: Target, nbytes: int, hops: int) -> float:
    """Picojoules of moving nbytes over `hops` NoC hops (no DDR energy)."""
    return nbytes * 8 * target.energy.noc_bit_hop * hops


def mmad_cycles(target: Target, m: int, n: int, k: int) -> int:
    """Cycles of one cube multiply: one fractal (m0 x n0 x k0) per cycle plus pipeline latency."""
    c = target.cube
    return c.latency + math.ceil(m / c.m0) * math.ceil(n / c.n0) * math.ceil(k / c.k0)


def vector_cycles(target: Target, elements: int, op: str = "") -> int:
    """Cycles of one vector instruction over `elements` lanes (transcendental ops cost more)."""
    weight = VECTOR_OP_WEIGHT.get(op, 1)
    return target.vector.latency + math.ceil(elements / target.vector.width) * weight


def instr_cycles(target: Target, instr: Instr) -> int:
    """Cycles one instruction occupies its pipe."""
    eb = target.elem_bytes
    if isinstance(instr, NocCopy):
        return noc_cycles(target, math.prod(instr.dims) * eb, instr.hops)
    if isinstance(instr, Copy):
        src, dst = instr.src.tier, instr.dst.tier
        return dma_cycles(target, src, dst, math.prod(instr.dims) * eb)
    if isinstance(instr, Spill):
        return dma_cycles(target, instr.src.tier, instr.dst.tier, instr.size * eb)
    if isinstance(instr, Img2Col):
        return dma_cycles(target, "L1", "L0A", instr.extents()["dst"] * eb)
    if isinstance(instr, Gather):
        return dma_cycles(target, DDR, instr.dst.tier, gather_bytes(target, instr))
    if isinstance(instr, Mmad):
        return mmad_cycles(target, instr.m, instr.n, instr.k)
    if isinstance(instr, (VUnary, VBinary, VReduce)):
        return vector_cycles(target, math.prod(instr.dims), instr.op)
    if isinstance(instr, VFill):
        return vector_cycles(target, math.prod(instr.dims))
    raise TypeError(f"no cycle formula for {type(instr).__name__}")


def gather_bytes(target: Target, instr: Gather) -> int:
    """Bytes a gather moves: one DMA of its n rows plus the n indices it reads first."""
    return instr.n * instr.row * target.elem_bytes + 4 * instr.extents()["idx"]


def ddr_bytes(target: Target, ins: Instr) -> int:
    """Bytes an instruction moves to or from DDR (0 for one that does not touch DDR; a `noc`
    copy never does, although before codegen its on-chip side is still a DDR key)."""
    if isinstance(ins, NocCopy):
        return 0
    if isinstance(ins, Gather):
        return gather_bytes(target, ins)
    if isinstance(ins, Spill) and DDR in (ins.src.tier, ins.dst.tier):
        return ins.size * target.elem_bytes
    if isinstance(ins, Copy) and DDR in (ins.src.tier, ins.dst.tier):
        return math.prod(ins.dims) * target.elem_bytes
    return 0


def shared_ddr_bandwidth(target: Target) -> int | None:
    """Bytes per cycle DDR serves to all cores together on a mesh (None on one core, whose DMA
    paths have their own bandwidths)."""
    return target.mesh.ddr_bandwidth if target.cores > 1 else None


def ddr_channel(
    target: Target, nbytes: int, cycles: int, start: int, channel_free: int
) -> tuple[int, int]:
    """Finish of a DDR transfer of `cycles` cycles that is ready at `start` on a mesh, and when
    the shared DDR channel is free again.

    NOTE: transfers enter the channel one at a time, in the order they become ready: one waits
    for the channel to be free, then holds it for its bytes over the mesh's DDR bandwidth; its
    own latency and bandwidth then apply as on an idle machine (a core's DMA path may be
    slower than the channel: several transfers then stream at once).
    """
    bandwidth = shared_ddr_bandwidth(target)
    if bandwidth is None or nbytes == 0:
        return start + cycles, channel_free
    begin = max(start, channel_free)
    return begin + cycles, begin + math.ceil(nbytes / bandwidth)


def spill_cycles(target: Target, tier: str, nbytes: int, out: bool) -> int:
    """Cycles of a SPILL_OUT (tier -> DDR) or SPILL_IN (DDR -> tier) of nbytes."""
    return dma_cycles(target, tier, DDR, nbytes) if out else dma_cycles(target, DDR, tier, nbytes)


def trace_spill_cycles(size: int) -> int:
    """Cycles of one trace spill transfer (dan-traces.md rule 2): 2*Size + 150."""
    return TRACE_SPILL_PER_BYTE * size + TRACE_SPILL_FIXED


def instr_energy(target: Target, instr: Instr) -> float:
    """Picojoules one instruction spends: MACs, vector lanes, and bytes read/written per tier."""
    e = target.energy
    eb = target.elem_bytes
    pj = 0.0
    if isinstance(instr, Mmad):
        pj += instr.m * instr.n * instr.k * e.mac
    elif isinstance(instr, (VUnary, VBinary, VReduce, VFill)):
        pj += math.prod(instr.dims) * e.vector_op
    if isinstance(instr, NocCopy):  # the core side's tier, and the NoC (no DDR)
        nbytes = math.prod(instr.dims) * eb
        near = instr.src.tier if instr.dst.tier in (DDR, NOC) else instr.dst.tier
        return nbytes * e.per_byte(near) + noc_energy(target, nbytes, instr.hops)
    if isinstance(instr, Gather):  # the rows read (not the whole table) and the indices
        rows = instr.n * instr.row * eb
        return gather_bytes(target, instr) * 8 * e.ddr_bit + rows * e.per_byte(instr.dst.tier)
    for name, elems in instr.extents().items():
        tier = getattr(instr, name).tier
        nbytes = elems * eb
        if isinstance(instr, (Copy, VUnary, VBinary)):
            nbytes = math.prod(instr.dims) * eb
        pj += nbytes * 8 * e.ddr_bit if tier == DDR else nbytes * e.per_byte(tier)
    return pj


class SpillModel:
    """Cycles and extra DDR bytes of one spill (SPILL_OUT + SPILL_IN) of a buffer."""

    def out_cycles(self, tier: str, size: int, clean: bool) -> int:
        """Cycles of SPILL_OUT; `clean` means the data still lives in DDR (loaded by COPY_IN)."""
        raise NotImplementedError

    def in_cycles(self, tier: str, size: int, clean: bool) -> int:
        """Cycles of SPILL_IN."""
        raise NotImplementedError

    def traffic(self, size: int, clean: bool) -> int:
        """Extra DDR bytes the spill moves."""
        raise NotImplementedError


class TraceSpillModel(SpillModel):
    """dan-traces.md rule 2: a clean spill-out is free; each transfer costs 2*Size + 150."""

    def out_cycles(self, tier: str, size: int, clean: bool) -> int:
        return 0 if clean else trace_spill_cycles(size)

    def in_cycles(self, tier: str, size: int, clean: bool) -> int:
        return trace_spill_cycles(size)

    def traffic(self, size: int, clean: bool) -> int:
        return size if clean else 2 * size


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


def sync_cycles(target: Target, src: tuple[int, int], dst: tuple[int, int]) -> int:
    """Cycles a flag takes from core `src` to core `dst`: one hop latency per mesh hop."""
    hops = abs(src[0] - dst[0]) + abs(src[1] - dst[1])
    return hops * target.mesh.noc_hop_latency
