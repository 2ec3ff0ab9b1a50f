"""The elements each operand of an instruction touches, as views of per-element arrays.

Memories are float32 arrays of 4-byte elements; so are their checking states (written mask,
liveness, last writer). An `Access` selects the elements of one operand in any of them.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from npucc.interp.ops import img2col_args, img2col_index, img2col_reads
from npucc.ir.instr_text import format_ref
from npucc.ir.isa import (
    Copy,
    Gather,
    HostOp,
    Img2Col,
    Instr,
    MemRef,
    Mmad,
    Operand,
    Spill,
    VBinary,
    VFill,
    VReduce,
    VUnary,
)


@lru_cache(maxsize=4096)
def _is_dense(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    expected = 1
    for d, s in zip(reversed(dims), reversed(strides), strict=True):
        if d != 1 and s != expected:
            return False
        expected *= d
    return True


def strided(
    arr: np.ndarray, base: int, dims: tuple[int, ...], strides: tuple[int, ...]
) -> np.ndarray:
    """Writable view of arr's elements base + sum(i*s) for i in dims (strides in elements).

    The same view as `as_strided`, built with the ndarray constructor (several times cheaper).
    """
    if _is_dense(dims, strides):
        return arr[base : base + math.prod(dims)].reshape(dims)
    size = arr.itemsize
    return np.ndarray(dims, arr.dtype, arr, base * size, tuple(s * size for s in strides))


@lru_cache(maxsize=4096)
def _canonical(
    dims: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same set of elements with broadcast and unit dims dropped and dense dims merged."""
    merged: list[list[int]] = []
    for d, s in zip(reversed(dims), reversed(strides), strict=True):
        if d == 1 or s == 0:
            continue
        if merged and merged[-1][0] * merged[-1][1] == s:
            merged[-1][0] *= d
        else:
            merged.append([d, s])
    merged.reverse()
    return tuple(d for d, _ in merged), tuple(s for _, s in merged)


def resolved(ref: Operand) -> MemRef:
    """An operand of a parsed stream: the parser accepts only resolved (MemRef) operands."""
    assert isinstance(ref, MemRef)
    return ref


class Access:
    """The set of elements one operand of one instruction touches, for checks and bookkeeping."""

    __slots__ = ("name", "tier", "base", "dims", "strides", "index", "lo", "hi")

    def __init__(
        self,
        name: str,
        operand: Operand,
        dims: tuple[int, ...],
        strides: tuple[int, ...],
        index: np.ndarray | None = None,
    ) -> None:
        ref = resolved(operand)
        self.name = name
        self.tier = ref.tier
        self.base = ref.addr >> 2
        self.dims, self.strides = _canonical(dims, strides)
        self.index = index  # explicit element offsets (img2col source), else a strided pattern
        dense = index is None and len(self.dims) <= 1 and self.strides in ((), (1,))
        self.lo = self.base if dense else -1  # a dense pattern is the slice [lo, hi)
        self.hi = self.base + math.prod(self.dims)

    def get(self, arr: np.ndarray) -> np.ndarray:
        """The touched elements of a per-element array."""
        if self.lo >= 0:
            return arr[self.lo : self.hi]
        if self.index is not None:
            return arr[self.base :][self.index]
        return strided(arr, self.base, self.dims, self.strides)

    def put(self, arr: np.ndarray, value: object) -> None:
        """Assign to the touched elements of a per-element array."""
        if self.lo >= 0:
            arr[self.lo : self.hi] = value
        elif self.index is not None:
            arr[self.base :][self.index] = value
        else:
            strided(arr, self.base, self.dims, self.strides)[...] = value

    def address(self, pos: int) -> int:
        """Byte address of the pos-th touched element."""
        if self.index is not None:
            return (self.base + int(self.index[pos])) * 4
        coords = np.unravel_index(pos, self.dims) if self.dims else ()
        return (self.base + sum(int(c) * s for c, s in zip(coords, self.strides, strict=True))) * 4


def locate(acc: Access, bad: np.ndarray, op: str, write: bool, who: str) -> tuple[int, str]:
    """The first flagged element of an access, and `OP: read|write of TIER[0xADDR] by WHO`."""
    pos = int(np.argmax(bad.ravel()))
    what = "write" if write else "read"
    return pos, f"{op}: {what} of {format_ref(acc.tier, acc.address(pos))} by {who}"


def accesses(ins: Instr) -> tuple[list[Access], list[Access]]:
    """The read and write element sets of an instruction."""
    reads: list[Access] = []
    writes: list[Access] = []
    if isinstance(ins, Spill):
        reads.append(Access("src", ins.src, (ins.size,), (1,)))
        writes.append(Access("dst", ins.dst, (ins.size,), (1,)))
    elif isinstance(ins, Img2Col):
        args = img2col_args(ins)
        reads.append(Access("src", ins.src, (), (), img2col_reads(*args)))
        writes.append(Access("dst", ins.dst, (img2col_index(*args)[0].size,), (1,)))
    elif isinstance(ins, Mmad):
        reads.append(Access("a", ins.a, (ins.m * ins.k,), (1,)))
        reads.append(Access("b", ins.b, (ins.k * ins.n,), (1,)))
        if ins.acc:
            reads.append(Access("dst", ins.dst, (ins.m * ins.n,), (1,)))
        writes.append(Access("dst", ins.dst, (ins.m * ins.n,), (1,)))
    elif isinstance(ins, VReduce):
        outer = len(ins.dims) - ins.nred
        reads.append(Access("src", ins.src, ins.dims, ins.src_strides))
        writes.append(Access("dst", ins.dst, ins.dims[:outer], ins.dst_strides))
    elif isinstance(ins, Gather):
        # the table rows read depend on the indices: the event loop adds them once idx is checked
        reads.append(Access("idx", ins.idx, (ins.extents()["idx"],), (1,)))
        writes.append(Access("dst", ins.dst, (ins.n * ins.row,), (1,)))
    elif isinstance(ins, HostOp):  # whole DDR tensors
        extents = ins.extents()
        reads += [Access(n, getattr(ins, n), (extents[n],), (1,)) for n in ins.reads]
        writes += [Access(n, getattr(ins, n), (extents[n],), (1,)) for n in ins.writes]
    elif isinstance(ins, VBinary):
        reads.append(Access("a", ins.a, ins.dims, ins.a_strides))
        reads.append(Access("b", ins.b, ins.dims, ins.b_strides))
        if ins.accumulates:
            reads.append(Access("dst", ins.dst, ins.dims, ins.dst_strides))
        writes.append(Access("dst", ins.dst, ins.dims, ins.dst_strides))
    else:
        assert isinstance(ins, (Copy, VUnary, VFill))  # the other INSTRUCTIONS are handled above
        if not isinstance(ins, VFill):
            reads.append(Access("src", ins.src, ins.dims, ins.src_strides))
        writes.append(Access("dst", ins.dst, ins.dims, ins.dst_strides))
    return reads, writes
