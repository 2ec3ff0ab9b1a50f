"""The elements each operand of an instruction touches, as views of per-unit arrays.

Memories are byte arrays, viewed as each operand's element type (`typed_view`). Their checking
states (written mask, liveness, last writer) keep one entry per unit of `unit` bytes (the
smallest element of the stream: 4 bytes at fp32, 2 at fp16, where an L0C accumulator spans two
units). An `Access` selects the units of one operand in any of them.
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
    Requant,
    Spill,
    VBinary,
    VFill,
    VReduce,
    VSoftmax,
    VUnary,
)
from npucc.ir.isa_cost import operand_bytes
from npucc.target import Target


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


def check_unit(target: Target) -> int:
    """Bytes of one checking unit of a stream for `target`: its smallest element."""
    return min(target.elem_bytes, target.tier_bytes("L0C"))


def typed_view(
    data: np.ndarray, addr: int, dims: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype
) -> np.ndarray:
    """Writable view, as `dtype`, of the byte array `data`'s elements at byte `addr` +
    sum(i*s) elements of `dtype` for i in dims."""
    size = dtype.itemsize
    if _is_dense(dims, strides):
        return data[addr : addr + math.prod(dims) * size].view(dtype).reshape(dims)
    return np.ndarray(dims, dtype, data, addr, tuple(s * size for s in strides))


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

    __slots__ = ("name", "tier", "base", "dims", "strides", "index", "lo", "hi", "unit", "_span",
                 "key")  # fmt: skip

    def __init__(
        self,
        name: str,
        operand: Operand,
        dims: tuple[int, ...],
        strides: tuple[int, ...],
        index: np.ndarray | None = None,
        units: tuple[int, int] = (4, 4),
    ) -> None:
        """`units`: (bytes of the operand's element, bytes of a checking unit)."""
        ref = resolved(operand)
        elem, self.unit = units
        per = elem // self.unit  # units per element (NOTE: every element size is a multiple)
        if per > 1:
            dims, strides = (*dims, per), (*(s * per for s in strides), 1)
            if index is not None:
                index = (index[:, None] * per + np.arange(per)).ravel()
        self.name = name
        self.tier = ref.tier
        self.base = ref.addr // self.unit
        self.dims, self.strides = _canonical(dims, strides)
        self.index = index  # explicit element offsets (img2col source), else a strided pattern
        dense = index is None and len(self.dims) <= 1 and self.strides in ((), (1,))
        self.lo = self.base if dense else -1  # a dense pattern is the slice [lo, hi)
        self.hi = self.base + math.prod(self.dims)
        self._span: tuple[int, int] | None = None
        # NOTE: equal keys touch the same units of a memory: a dense pattern's are its slice,
        # another's its own identity (valid while the Access lives)
        self.key: object = (self.lo, self.hi) if dense else id(self)

    def span(self) -> tuple[int, int]:
        """The units [first, last + 1) between which every touched unit lies."""
        if self._span is None:
            if self.lo >= 0:
                self._span = (self.lo, self.hi)
            elif self.index is not None:
                idx = self.index
                first, last = (int(idx.min()), int(idx.max())) if idx.size else (0, -1)
                self._span = (self.base + first, self.base + last + 1)
            else:
                low = sum((d - 1) * s for d, s in zip(self.dims, self.strides, strict=True)
                          if s < 0)  # fmt: skip
                high = sum((d - 1) * s for d, s in zip(self.dims, self.strides, strict=True)
                           if s > 0)  # fmt: skip
                self._span = (self.base + low, self.base + high + 1)
        return self._span

    def get(self, arr: np.ndarray, start: int = 0) -> np.ndarray:
        """The touched elements of a per-unit array whose entry 0 is unit `start`."""
        if self.lo >= 0:
            return arr[self.lo - start : self.hi - start]
        if self.index is not None:
            return arr[self.base - start :][self.index]
        return strided(arr, self.base - start, self.dims, self.strides)

    def put(self, arr: np.ndarray, value: object, start: int = 0) -> None:
        """Assign to the touched elements of a per-unit array whose entry 0 is unit `start`."""
        if self.lo >= 0:
            arr[self.lo - start : self.hi - start] = value
        elif self.index is not None:
            arr[self.base - start :][self.index] = value
        else:
            strided(arr, self.base - start, self.dims, self.strides)[...] = value

    def address(self, pos: int) -> int:
        """Byte address of the pos-th touched unit."""
        if self.index is not None:
            return (self.base + int(self.index[pos])) * self.unit
        coords = np.unravel_index(pos, self.dims) if self.dims else ()
        offset = sum(int(c) * s for c, s in zip(coords, self.strides, strict=True))
        return (self.base + offset) * self.unit


def locate(acc: Access, bad: np.ndarray, op: str, write: bool, who: str) -> tuple[int, str]:
    """The first flagged element of an access, and `OP: read|write of TIER[0xADDR] by WHO`."""
    pos = int(np.argmax(bad.ravel()))
    what = "write" if write else "read"
    return pos, f"{op}: {what} of {format_ref(acc.tier, acc.address(pos))} by {who}"


def accesses(ins: Instr, target: Target, unit: int) -> tuple[list[Access], list[Access]]:
    """The read and write unit sets of an instruction (`unit`: bytes of a checking unit); an
    operand read and written (an accumulating dst) is one Access in both lists."""
    reads: list[Access] = []
    writes: list[Access] = []

    def make(
        name: str, operand: Operand, dims: tuple[int, ...], strides: tuple[int, ...],
        index: np.ndarray | None = None,
    ) -> Access:  # fmt: skip
        """The Access of one operand, at its element size."""
        return Access(name, operand, dims, strides, index, (operand_bytes(target, ins, name), unit))

    if isinstance(ins, Spill):
        reads.append(make("src", ins.src, (ins.size,), (1,)))
        writes.append(make("dst", ins.dst, (ins.size,), (1,)))
    elif isinstance(ins, Img2Col):
        args = img2col_args(ins)
        # NOTE: a pattern where the offsets are one (a view, not a gather, in every check)
        first, dims, strides, offsets = img2col_reads(*args)
        src = resolved(ins.src).at(first, operand_bytes(target, ins, "src"))
        reads.append(make("src", src, dims, strides, offsets))
        writes.append(make("dst", ins.dst, (img2col_index(*args)[0].size,), (1,)))
    elif isinstance(ins, Mmad):
        reads.append(make("a", ins.a, (ins.m * ins.k,), (1,)))
        reads.append(make("b", ins.b, (ins.k * ins.n,), (1,)))
        dst = make("dst", ins.dst, (ins.m * ins.n,), (1,))
        if ins.acc:
            reads.append(dst)  # NOTE: the one Access it reads and writes (`read_too`)
        writes.append(dst)
    elif isinstance(ins, (Requant, VSoftmax)):  # dense rows: extents() are the elements
        reads += [make(n, getattr(ins, n), (ins.extents()[n],), (1,)) for n in ins.reads]
        writes.append(make("dst", ins.dst, (ins.extents()["dst"],), (1,)))
    elif isinstance(ins, VReduce):
        outer = len(ins.dims) - ins.nred
        reads.append(make("src", ins.src, ins.dims, ins.src_strides))
        writes.append(make("dst", ins.dst, ins.dims[:outer], ins.dst_strides))
    elif isinstance(ins, Gather):
        # the table rows read depend on the indices: the event loop adds them once idx is checked
        reads.append(make("idx", ins.idx, (ins.extents()["idx"],), (1,)))
        writes.append(make("dst", ins.dst, (ins.n * ins.row,), (1,)))
    elif isinstance(ins, HostOp):  # whole DDR tensors
        extents = ins.extents()
        reads += [make(n, getattr(ins, n), (extents[n],), (1,)) for n in ins.reads]
        writes += [make(n, getattr(ins, n), (extents[n],), (1,)) for n in ins.writes]
    elif isinstance(ins, VBinary):
        reads.append(make("a", ins.a, ins.dims, ins.a_strides))
        reads.append(make("b", ins.b, ins.dims, ins.b_strides))
        dst = make("dst", ins.dst, ins.dims, ins.dst_strides)
        if ins.accumulates:
            reads.append(dst)
        writes.append(dst)
    else:
        assert isinstance(ins, (Copy, VUnary, VFill))  # the other INSTRUCTIONS are handled above
        if not isinstance(ins, VFill):
            reads.append(make("src", ins.src, ins.dims, ins.src_strides))
        writes.append(make("dst", ins.dst, ins.dims, ins.dst_strides))
    return reads, writes
