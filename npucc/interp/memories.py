"""The memories of a run (each core's tiers, DDR, the on-chip NOC space) and their liveness.

Each memory keeps its data (bytes) and, per unit (`Memories.unit` bytes: the stream's
smallest element), whether it is live (inside an alloc, a spilled in region, or a DDR or onchip
tensor) and whether it has been written since it became live. A region freed by a spill out
stays live until the copy finishes.

NOTE: the graph's inputs and outputs keep their model types: the host converts an input to
the storage type when it loads DDR (float32 -> float16 rounds to nearest even; beyond the
float16 range it is +-inf) and an output back when it reads it (exactly).
"""

from __future__ import annotations

import heapq
import json
from typing import cast

import numpy as np

from npucc.errors import NpuccError
from npucc.interp.access import Access, check_unit, locate, typed_view
from npucc.interp.steps import Step, fail
from npucc.ir.dtypes import (
    HOST_DTYPES,
    INDEX_DTYPE,
    NUMPY_DTYPES,
    dequantize_host,
    quantize_host,
    to_device,
    to_host,
)
from npucc.ir.instr_text import format_ref
from npucc.ir.isa import DDR, NOC, Instr
from npucc.ir.stream import Stream, StreamTensor


class Memory:
    """One memory (a tier of a core, or DDR): data, and per unit whether it is dead (not
    live) and stale (not written since it became live).

    NOTE: the masks hold the negations so that DDR starts as zeros, live and written: the OS
    zero-fills its pages lazily, so the const image's units (VGG-19: 137 M of them, in each
    mask) are never touched; only the other tensors' and the gaps' are set.
    NOTE: a dead unit is stale too (what a dead unit's stale mask held is never read), so a
    read none of whose units is stale touches no dead one either: one mask to look at.
    """

    __slots__ = ("data", "stale", "dead", "allocs", "const")

    def __init__(self, nbytes: int, unit: int, live: bool = False) -> None:
        n = nbytes // unit
        self.data = np.zeros(n * unit, np.uint8)
        self.stale = np.zeros(n, bool) if live else np.ones(n, bool)
        self.dead = np.zeros(n, bool) if live else np.ones(n, bool)
        self.allocs: dict[int, int] = {}  # live regions: byte address -> bytes
        # NOTE: DDR's first bytes are the const image, read in place (read-only) rather than
        # copied into `data` (VGG-19: 548 MB) until a step writes there (`materialize`)
        self.const: np.ndarray | None = None

    def view(
        self, addr: int, dims: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype
    ) -> np.ndarray:
        """`typed_view` of this memory's data (of the image, read-only, below its end)."""
        const = self.const
        if const is not None and addr < const.size:
            try:
                return typed_view(const, addr, dims, strides, dtype)
            except ValueError:  # a pattern that runs past the image's end
                self.materialize()
        return typed_view(self.data, addr, dims, strides, dtype)

    def materialize(self) -> None:
        """Copy the image into `data`, which is then read and written in its place."""
        if self.const is not None:
            self.data[: self.const.size] = self.const
            self.const = None


class Memories:
    """Every memory of a run and the releases still to come."""

    __slots__ = ("stream", "unit", "storage", "tiers", "ddr", "noc", "releases")

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        target = stream.target
        self.unit = check_unit(target)  # bytes of a checking unit
        self.storage = np.dtype(NUMPY_DTYPES[target.dtype])  # DDR's, L1's, UB's, L0A/B's
        self.tiers: list[dict[str, Memory]] = [{} for _ in stream.cores]
        self.ddr = self._new(DDR, live=True)  # the gaps between tensors die in `load`
        self.noc = self._new(NOC, live=True) if NOC in stream.extent else None
        self.releases: list[tuple[int, int, str, int, int]] = []  # (time, core, tier, addr, bytes)

    def mem(self, core: int, tier: str) -> Memory:
        """The memory `tier` of core index `core` (DDR and NOC are shared)."""
        if tier == DDR:
            return self.ddr
        if tier == NOC:
            assert self.noc is not None  # the parser only accepts NOC inside onchip tensors
            return self.noc
        mems = self.tiers[core]
        if tier not in mems:
            mems[tier] = self._new(tier)
        return mems[tier]

    def _new(self, tier: str, live: bool = False) -> Memory:
        """A memory of the bytes the stream addresses in `tier` (at most its capacity), all
        live or all dead."""
        nbytes, lineno = self.stream.extent[tier]
        try:
            return Memory(nbytes, self.unit, live)
        except (MemoryError, ValueError):  # a huge target: numpy cannot allocate it
            raise fail(self.stream, lineno, f"cannot simulate {nbytes} bytes of {tier}") from None

    # ------------------------------------------------------------------------ DDR in and out

    def load(self, image: bytes, inputs: dict[str, np.ndarray], timing_only: bool) -> None:
        """Load the image at DDR address 0 and the inputs; only the tensors are live, and
        only consts and inputs written."""
        ddr, unit = self.ddr, self.unit
        ddr.const = np.frombuffer(image, np.uint8)
        ddr.const.flags.writeable = False
        declared = {t.name: t for t in self.stream.tensors.values() if t.kind == "input"}
        for name in inputs:
            if name not in declared:
                raise NpuccError(f"unknown input {json.dumps(name)} (inputs: "
                                 f"{', '.join(json.dumps(n) for n in declared)})")  # fmt: skip
        held: dict[int, list[tuple[int, int]]] = {id(ddr): []}  # memory -> its tensors' units
        written: list[tuple[int, int]] = []  # the consts' and loaded inputs' units
        for tensor in self.stream.tensors.values():
            lo, hi = tensor.addr // unit, (tensor.addr + tensor.nbytes) // unit
            if tensor.kind == "onchip":  # live and unwritten in the on-chip buffer
                assert self.noc is not None
                held.setdefault(id(self.noc), []).append((lo, hi))
                self.noc.stale[lo:hi] = True
                continue
            held[id(ddr)].append((lo, hi))
            if tensor.kind == "const":
                written.append((lo, hi))
            else:
                ddr.stale[lo:hi] = True
            if tensor.kind == "input":
                if tensor.name not in inputs and timing_only:
                    continue  # timing computes no data: inputs are optional
                written.append((lo, hi))
                if tensor.name not in inputs:
                    raise NpuccError(f"missing input {json.dumps(tensor.name)}")
                if tensor.addr < len(image):  # an input inside the image is written there
                    ddr.materialize()
                value = np.asarray(inputs[tensor.name])
                if value.shape != tensor.shape:
                    raise NpuccError(f"input {json.dumps(tensor.name)} has shape "
                                     f"{value.shape}, expected {tensor.shape}")  # fmt: skip
                if tensor.dtype == INDEX_DTYPE:
                    if value.dtype.kind not in "iu":
                        raise NpuccError(f"input {json.dumps(tensor.name)} has dtype "
                                         f"{value.dtype}, expected integer indices "
                                         f"({INDEX_DTYPE})")  # fmt: skip
                    self._tensor(tensor, np.dtype("<i8"))[...] = value.astype(np.int64).ravel()
                elif tensor.quant is not None:  # an int8 program's float input
                    self._tensor(tensor)[...] = quantize_host(value, *tensor.quant).ravel()
                elif tensor.dtype in HOST_DTYPES:
                    storage = self.stream.target.dtype
                    device = to_device(tensor.name, value, tensor.dtype, storage).ravel()
                    self._tensor(tensor)[...] = device.astype(self.storage)
                else:
                    wide = value.astype(np.float32).ravel()
                    with np.errstate(over="ignore"):  # beyond float16's range: +-inf
                        self._tensor(tensor)[...] = wide.astype(self.storage)
        for lo, hi in written:  # after every tensor: an output may alias an input or a const
            if ddr.stale[lo:hi].any():  # NOTE: a read, so a const's zero pages stay untouched
                ddr.stale[lo:hi] = False
        for mem in (ddr, self.noc):
            if mem is not None:
                _kill_gaps(mem, held.get(id(mem), []))

    def outputs(self, check: bool) -> dict[str, np.ndarray]:
        """Every output tensor, as its host dtype (with `check`, it must be fully written)."""
        outputs = {}
        for tensor in self.stream.tensors.values():
            if tensor.kind != "output":
                continue
            lo, hi = tensor.addr // self.unit, (tensor.addr + tensor.nbytes) // self.unit
            if check and self.ddr.stale[lo:hi].any():
                raise fail(self.stream, tensor.lineno, f"output {json.dumps(tensor.name)} is not "
                                                       "fully written at the end")  # fmt: skip
            if tensor.quant is not None:  # an int8 program's float output
                q = self._tensor(tensor).reshape(tensor.shape)
                outputs[tensor.name] = dequantize_host(q, *tensor.quant)
                continue
            data = self._tensor(tensor).astype(np.float32).reshape(tensor.shape)
            storage = self.stream.target.dtype
            outputs[tensor.name] = to_host(tensor.name, data, tensor.dtype, storage)  # a copy
        return outputs

    def _tensor(self, tensor: StreamTensor, dtype: np.dtype | None = None) -> np.ndarray:
        """A DDR tensor's elements, as `dtype` (default: the storage type)."""
        kind = self.storage if dtype is None else dtype
        return self.ddr.view(tensor.addr, (tensor.nbytes // kind.itemsize,), (1,), kind)

    # ------------------------------------------------------------------------ liveness

    def make_live(self, step: Step, tier: str, addr: int, size: int) -> None:
        """An alloc or spill in: the region becomes live and unwritten."""
        mem = self.mem(step.core, tier)
        lo, hi = addr // self.unit, (addr + size) // self.unit
        if not mem.dead[lo:hi].all():
            other = [format_ref(tier, a, b) for a, b in mem.allocs.items() if a < addr + size
                     and addr < a + b] or ["being spilled out"]  # fmt: skip
            raise fail(self.stream, step, f"{step.line.queue}: {format_ref(tier, addr, size)} "
                                          f"overlaps the live region {other[0]}")  # fmt: skip
        mem.dead[lo:hi] = False
        mem.stale[lo:hi] = True
        mem.allocs[addr] = size

    def end_live(self, step: Step, tier: str, addr: int, size: int) -> None:
        """A free or spill out: the region must be a live alloc (it is released separately)."""
        mem = self.mem(step.core, tier)
        if mem.allocs.get(addr) != size:
            raise fail(self.stream, step, f"{step.line.queue} of {format_ref(tier, addr, size)} "
                                          "does not match a live alloc")  # fmt: skip
        del mem.allocs[addr]

    def release(self, core: int, tier: str, addr: int, size: int) -> None:
        """The region stops being live."""
        mem = self.mem(core, tier)
        lo, hi = addr // self.unit, (addr + size) // self.unit
        mem.dead[lo:hi] = True
        mem.stale[lo:hi] = True

    def release_at(self, time: int, core: int, tier: str, addr: int, size: int) -> None:
        """Release the region once the clock reaches `time` (a spill out's finish)."""
        heapq.heappush(self.releases, (time, core, tier, addr, size))

    def release_until(self, time: int) -> None:
        """Carry out every release due at or before `time`."""
        while self.releases and self.releases[0][0] <= time:
            self.release(*heapq.heappop(self.releases)[1:])

    # ------------------------------------------------------------------------ accesses

    def check(
        self, step: Step, mem: Memory, acc: Access, write: bool, spill: bool, who: str
    ) -> None:
        """An access of `mem` touches live elements, and a read (not a spill's) written ones."""
        # NOTE: count_nonzero, not any(): 2-4x faster on the L0 tiers' reads (<= 16 k units)
        if not write and not spill and not np.count_nonzero(acc.get(mem.stale)):
            return  # nothing stale, so nothing dead (Memory)
        op = cast(Instr, step.line.instr).opcode  # only pipe steps have accesses
        dead = acc.get(mem.dead)
        if dead.any():
            text = locate(acc, dead, op, write, who)[1]
            raise fail(self.stream, step, f"{text}: region not live (never allocated, or already "
                                          "freed)")  # fmt: skip
        if not write and not spill:
            stale = acc.get(mem.stale)
            if stale.any():
                text = locate(acc, stale, op, write, who)[1]
                raise fail(self.stream, step, f"{text}: not written since its alloc")

    def before_writes(self, step: Step) -> None:
        """Materialize DDR's image (`Memory.materialize`) when `step` writes inside it."""
        const = self.ddr.const
        if const is not None:
            end = const.size // self.unit
            if any(acc.tier == DDR and acc.span()[0] < end for acc in step.writes):
                self.ddr.materialize()

    def record_writes(self, step: Step, spill: bool) -> None:
        """Mark what a step wrote (a spill copies its source's written mask)."""
        for acc in step.writes:
            mem = self.mem(step.core, acc.tier)
            if spill:
                src = step.reads[0]
                acc.put(mem.stale, src.get(self.mem(step.core, src.tier).stale))
            else:
                acc.put(mem.stale, False)


def _kill_gaps(mem: Memory, spans: list[tuple[int, int]]) -> None:
    """Mark dead every unit of `mem` outside the unit ranges `spans` (they may overlap)."""
    end = 0
    for lo, hi in sorted(spans):
        if lo > end:
            mem.dead[end:lo] = True
            mem.stale[end:lo] = True
        end = max(end, hi)
    mem.dead[end:] = True
    mem.stale[end:] = True
