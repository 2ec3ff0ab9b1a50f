"""The one home of every cycle and energy formula, on numbers (paths, bytes, MACs, lanes).

The scheduler's predictions, the cost models and the interpreter's timing all call these
functions, so a predicted makespan and an interpreted one agree exactly. Which formula an
instruction takes, and with which numbers, is `npucc.ir.isa_cost`'s dispatch (target/ knows
no instruction).
"""

from __future__ import annotations

import math

from npucc.target import Target

# Operator-level trace rules (shared/dan-traces.md, rule 2): spill latency is affine in bytes.
TRACE_SPILL_FIXED = 150
TRACE_SPILL_PER_BYTE = 2

# A host segment (an ONNX node the host runs, docs/command-stream.md): a fixed round trip
# (hand-off to the host, its dispatch and the operator's run) plus its operands' bytes over the
# host link. Documented defaults, not target fields (a target file has no [host] section).
HOST_LATENCY_US = 20.0  # microseconds per host segment
HOST_LINK_GBPS = 16.0  # host link bandwidth, GB/s (PCIe 4.0 x8-class)


def dma_cycles(target: Target, path: str, nbytes: int) -> int:
    """Cycles of one DMA on the [dma] `path` moving nbytes: fixed latency plus bytes over
    bandwidth."""
    dma = target.dma.path(path)
    return dma.latency + math.ceil(nbytes / dma.bandwidth)


def noc_cycles(target: Target, nbytes: int, hops: int) -> int:
    """Cycles of one NoC DMA: fixed latency + hops x hop latency + bytes over link bandwidth.

    NOTE: each transfer gets the whole link bandwidth (contention between concurrent transfers
    on a shared link is not modelled).
    """
    m = target.mesh
    return m.noc_dma_cycles + hops * m.noc_hop_latency + math.ceil(nbytes / m.noc_bandwidth)


def host_cycles(target: Target, nbytes: int) -> int:
    """Cycles of one host segment moving nbytes (inputs read plus outputs written) over the
    host link: HOST_LATENCY_US plus bytes over HOST_LINK_GBPS, at the target's clock."""
    clock_hz = target.clock_ghz * 1e9
    latency = math.ceil(HOST_LATENCY_US * 1e-6 * clock_hz)
    return latency + math.ceil(nbytes * clock_hz / (HOST_LINK_GBPS * 1e9))


def noc_energy(target: Target, nbytes: int, hops: int) -> float:
    """Picojoules of moving nbytes over `hops` NoC hops (no DDR energy)."""
    return nbytes * 8 * target.energy.noc_bit_hop * hops


def mmad_cycles(target: Target, m: int, n: int, k: int) -> int:
    """Cycles of one cube multiply: one fractal (m0 x n0 x k0) per cycle plus pipeline latency."""
    c = target.cube
    return c.latency + math.ceil(m / c.m0) * math.ceil(n / c.n0) * math.ceil(k / c.k0)


def vector_cycles(target: Target, elements: int, weight: int = 1) -> int:
    """Cycles of one vector instruction over `elements` lanes, `weight` cycles per lane group
    (transcendental ops cost more)."""
    return target.vector.latency + math.ceil(elements / target.vector.width) * weight


def cube_bound(target: Target, macs: int) -> int:
    """The fewest cycles in which the cores' cubes can do `macs` multiply-accumulates: every
    `mmad_cycles` fractal full, no pipeline latency, all cores busy."""
    return math.ceil(macs / (target.cube.macs * target.cores))


def vector_bound(target: Target, elements: int) -> int:
    """The fewest cycles in which the cores' vector units can process `elements` lanes: the
    `vector_cycles` rate (weight 1) without its latency, all cores busy."""
    return math.ceil(elements / (target.vector.width * target.cores))


def ddr_bound(target: Target, read: int, write: int) -> int:
    """The fewest cycles in which `read` bytes can come from DDR and `write` bytes go to it.

    NOTE: one core reads DDR on one in-order pipe at most at its fastest DDR path's bandwidth
    and writes it on another at the TIER_DDR path's (`dma_cycles` without the latency); on a
    mesh the cores share the DDR channel, reads and writes alike (`ddr_channel`).
    """
    dma, cores = target.dma, target.cores
    # NOTE: the paths by attribute, not `Dma.path` (a name check each): the blocking search
    # asks this per plan priced
    read_bw = max(dma.DDR_L1.bandwidth, dma.DDR_UB.bandwidth, dma.DDR_L0.bandwidth)
    cycles = max(
        math.ceil(read / (read_bw * cores)), math.ceil(write / (dma.TIER_DDR.bandwidth * cores))
    )
    shared = shared_ddr_bandwidth(target)
    return cycles if shared is None else max(cycles, math.ceil((read + write) / shared))


def noc_bound(target: Target, read: int, write: int) -> int:
    """The fewest cycles in which the cores can read `read` bytes from on-chip homes over the
    NoC and write `write` bytes to them: each core reads on one DMA pipe and writes on another,
    each transfer at a link's bandwidth (`noc_cycles` without its latencies); 0 on one core."""
    if target.cores <= 1:
        return 0
    rate = target.mesh.noc_bandwidth * target.cores
    return max(math.ceil(read / rate), math.ceil(write / rate))


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
    held = ddr_channel_held(target, nbytes)
    if held == 0:
        return start + cycles, channel_free
    begin = max(start, channel_free)
    return begin + cycles, begin + held


def ddr_channel_held(target: Target, nbytes: int) -> int:
    """Cycles a DDR transfer of `nbytes` holds the mesh's shared DDR channel (`ddr_channel`;
    0 without bytes or on one core)."""
    bandwidth = shared_ddr_bandwidth(target)
    if bandwidth is None or nbytes == 0:
        return 0
    return math.ceil(nbytes / bandwidth)


def trace_spill_cycles(size: int) -> int:
    """Cycles of one trace spill transfer (dan-traces.md rule 2): 2*Size + 150."""
    return TRACE_SPILL_PER_BYTE * size + TRACE_SPILL_FIXED


def mac_energy(target: Target, macs: int) -> float:
    """Picojoules of `macs` cube multiply-accumulates."""
    return macs * target.energy.mac


def vector_energy(target: Target, elements: int) -> float:
    """Picojoules of a vector instruction over `elements` lanes."""
    return elements * target.energy.vector_op


def tier_energy(target: Target, tier: str, nbytes: int) -> float:
    """Picojoules of reading or writing nbytes in `tier` (DDR: per bit)."""
    e = target.energy
    return nbytes * 8 * e.ddr_bit if tier == "DDR" else nbytes * e.per_byte(tier)


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


def sync_cycles(target: Target, src: tuple[int, int], dst: tuple[int, int]) -> int:
    """Cycles a flag takes from core `src` to core `dst`: one hop latency per mesh hop (the
    one home of the hop latency of a synchronisation)."""
    hops = abs(src[0] - dst[0]) + abs(src[1] - dst[1])
    return hops * target.mesh.noc_hop_latency
