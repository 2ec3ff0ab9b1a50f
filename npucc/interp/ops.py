"""Execution of each opcode on numpy views of the memories (one function per opcode).

Every function takes `view(operand, dims, strides)`, which returns a writable view of the
elements an access pattern touches (as its tier's element type: float32, or float16 at fp16,
where L0C stays float32), and the instruction; the machine has checked the accesses.

NOTE: the rounding rules (docs/command-stream.md, "Element types"): every compute instruction
widens its operands to float32, computes in float32 and rounds its result once to the
destination's type (round to nearest, ties to even); the cube multiplies fp16 operands exactly
and accumulates in float32 in L0C; a reduction accumulates in float32 and rounds once; a copy
between types converts (L0C -> UB: float32 -> float16, rounding).

NOTE: int8 (docs/precision.md): the cube multiplies int8 operands exactly and accumulates in
int32 in L0C, wrapping modulo 2**32 (acc=1 too); `requant` is the one way out of an int32
accumulator: the int32 sum with the bias (wrapping), converted to float32 (nearest even), times
the float32 scale (one float32 rounding), rounded half to even to an integer, plus the zero
point, clamped to [lo, hi] (saturation). An img2col pads with its `pad` value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from npucc.ir.dtypes import INDEX_DTYPE, quantize_host
from npucc.ir.isa import (
    DDR,
    REQUANT_BYTES,
    Copy,
    Gather,
    Img2Col,
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


# operands are MemRefs in a parsed stream (the parser rejects symbolic ones); typed as Operand
# because that is the instruction fields' type
class View(Protocol):
    """The memories' data as numpy views (the interpreter's `MemView`)."""

    def __call__(
        self, ref: Operand, dims: tuple[int, ...], strides: tuple[int, ...],
        dtype: np.dtype | None = None,
    ) -> np.ndarray:  # fmt: skip
        """Elements of a pattern at `ref`, as `dtype` (default: its tier's element type)."""
        ...

    def dtype(self, tier: str) -> np.dtype:
        """The element type of `tier`."""
        ...


F32 = np.float32


def _wide(x: np.ndarray) -> np.ndarray:
    """The values of a view as float32 (the vector and cube compute type; a float32 view as is)."""
    return x.astype(F32, copy=False)


I8 = np.dtype(np.int8)


def _read(x: np.ndarray, q: tuple[float, ...], index: int) -> np.ndarray:
    """Read operand `index` of a vector instruction as float32: dequantized by its `q` pair."""
    if not q:
        return _wide(x)
    scale, zp = q[2 * index : 2 * index + 2]
    return (x.astype(np.int32) - np.int32(zp)).astype(F32) * F32(scale)


def _store(dst: np.ndarray, result: np.ndarray | np.float32, q: tuple[float, ...]) -> None:
    """Write a float32 result: into int8, quantized by the last `q` pair (none: scale 1, zero
    point 0), rounding half to even and saturating; into a float type, rounded to it."""
    if dst.dtype == I8:
        scale, zp = q[-2:] if q else (1.0, 0)
        dst[...] = quantize_host(np.asarray(result, F32), scale, int(zp))
    else:
        dst[...] = result


def _mean(x: np.ndarray, axis: tuple[int, ...]) -> np.ndarray:
    """The float32 mean over the trailing `axis`, divided by the count after a sum in
    onnxruntime's order: along the first reduced axis in order, then the next (a window's
    columns of rows first: (a + c) + (b + d) for the 2x2 window [[a, b], [c, d]])."""
    total = x
    for _ in axis:
        acc = total[(slice(None),) * axis[0] + (0,)].copy()
        for k in range(1, total.shape[axis[0]]):
            acc += total[(slice(None),) * axis[0] + (k,)]
        total = acc
    return total / F32(math.prod(x.shape[axis[0] :]))


# Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution of erf's range)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(x: np.ndarray) -> np.ndarray:
    """Vectorised error function, computed in float64."""
    a = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + _ERF_P * a)
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    return np.sign(x) * (1.0 - poly * np.exp(-a * a))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _round_bf16(x: np.ndarray) -> np.ndarray:
    """Nearest bfloat16 value of float32 `x` (ties to even, NaN kept), as float32."""
    bits = x.astype(F32).view(np.uint32)
    up = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    rounded = (up & np.uint32(0xFFFF0000)).view(F32)
    return np.where(np.isnan(x), x, rounded)


def _truth(mask: np.ndarray) -> np.ndarray:
    """A boolean array as float32 1.0/0.0 (npucc's booleans)."""
    return mask.astype(F32)


UNARY: dict[str, Callable[..., np.ndarray]] = {
    "copy": lambda x: x.copy(),
    "relu": lambda x: np.maximum(x, F32(0)),
    "clip": lambda x, lo, hi: np.minimum(np.maximum(x, F32(lo)), F32(hi)),
    "exp": np.exp,
    "neg": np.negative,
    "sqrt": np.sqrt,
    "recip": lambda x: F32(1) / x,
    "square": np.square,
    "muls": lambda x, s: x * F32(s),
    "adds": lambda x, s: x + F32(s),
    "pows": lambda x, p: np.power(x, F32(p)),
    "tanh": np.tanh,
    "erf": _erf,
    "sigmoid": _sigmoid,
    "abs": np.abs,
    "log": np.log,
    "not": lambda x: _truth(x == F32(0)),
    "f16": lambda x: x.astype(np.float16).astype(F32),
    "bf16": _round_bf16,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "sign": np.sign,
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "lt": lambda a, b: _truth(a < b),
    "gt": lambda a, b: _truth(a > b),
    "le": lambda a, b: _truth(a <= b),
    "ge": lambda a, b: _truth(a >= b),
    "eq": lambda a, b: _truth(a == b),
    "ne": lambda a, b: _truth(a != b),
    "mask": lambda a, b: np.where(b != F32(0), a, F32(0)),
    "maskn": lambda a, b: np.where(b == F32(0), a, F32(0)),
    "mod": np.mod,
    "fmod": np.fmod,
}
REDUCE: dict[str, Callable[..., np.ndarray]] = {
    "sum": np.sum,
    "max": np.max,
    "min": np.min,
    "prod": np.prod,
    "mean": _mean,
}


def exec_copy(view: View, ins: Copy) -> None:
    """dst[i] = src[i] over the strided pattern, src read whole before dst is written.

    NOTE: src is copied first only where the two may overlap (numpy's own assignment does
    not always: a 1-D pair of different strides runs backwards): in one tier (two tiers
    are two memories)."""
    dst = view(ins.dst, ins.dims, ins.dst_strides)
    src = view(ins.src, ins.dims, ins.src_strides)
    same = ins.src.tier == ins.dst.tier and np.may_share_memory(dst, src)
    dst[...] = src.copy() if same else src


def exec_spill(view: View, ins: Spill) -> None:
    """Contiguous copy of `size` elements of the on-chip side's type (unconverted in DDR)."""
    kind = view.dtype(ins.src.tier if ins.dst.tier == DDR else ins.dst.tier)
    view(ins.dst, (ins.size,), (1,), kind)[...] = view(ins.src, (ins.size,), (1,), kind)


@lru_cache(maxsize=256)
def img2col_index(
    c: int, h: int, w: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, pt: int,
    pl: int, oh: int, ow: int,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Flat source offset (clamped) of every dst[oh*ow, c*kh*kw] element, and the flat dst
    positions of those outside the src tile (the padding)."""
    rows = (np.arange(oh) * sh)[:, None] + (np.arange(kh) * dh)[None, :] - pt  # (oh, kh)
    cols = (np.arange(ow) * sw)[:, None] + (np.arange(kw) * dw)[None, :] - pl  # (ow, kw)
    r = rows[:, None, None, :, None]
    q = cols[None, :, None, None, :]
    ch = np.arange(c)[None, None, :, None, None]
    shape = (oh, ow, c, kh, kw)
    valid = np.broadcast_to((r >= 0) & (r < h) & (q >= 0) & (q < w), shape)
    flat = ch * (h * w) + np.clip(r, 0, h - 1) * w + np.clip(q, 0, w - 1)
    index = np.broadcast_to(flat, shape).reshape(oh * ow, c * kh * kw)
    return index, np.flatnonzero(~valid)


@lru_cache(maxsize=256)
def img2col_reads(*args: int) -> tuple[int, tuple[int, ...], tuple[int, ...], np.ndarray | None]:
    """The distinct src offsets an img2col of geometry `args` reads, as (first, dims, strides,
    None), the strided pattern from offset `first` that touches them (equal blocks at equal
    steps: each channel's rows read whole), or else (0, (), (), the offsets, read-only)."""
    index, pads = img2col_index(*args)
    valid = np.ones(index.size, bool)
    valid[pads] = False
    reads = np.unique(index.reshape(-1)[valid])
    if reads.size:
        gaps = np.flatnonzero(np.diff(reads) != 1)
        run = int(gaps[0]) + 1 if gaps.size else reads.size  # the first block's length
        if reads.size % run == 0:
            blocks = reads.reshape(-1, run)
            step = int(blocks[1, 0] - blocks[0, 0]) if len(blocks) > 1 else 0
            pattern = reads[0] + np.arange(len(blocks))[:, None] * step + np.arange(run)
            if np.array_equal(blocks, pattern):
                return int(reads[0]), (len(blocks), run), (step, 1), None
    reads.flags.writeable = False
    return 0, (), (), reads


def img2col_args(ins: Img2Col) -> tuple[int, ...]:
    """The geometry of an img2col, as the key of `img2col_index`."""
    return (ins.c, ins.h, ins.w, ins.kh, ins.kw, ins.sh, ins.sw, ins.dh, ins.dw, ins.pt, ins.pl,
            ins.oh, ins.ow)  # fmt: skip


def exec_img2col(view: View, ins: Img2Col) -> None:
    """dst[M, K] gathered from the src[c, h, w] tile, `pad` outside it.

    NOTE: `take` into dst (dense) then the pads, not `where(valid, src[index], pad)`: one
    temporary fewer, 40 % less time on VGG-19's tiles (numpy buffers `out` if it overlaps src).
    """
    index, pads = img2col_index(*img2col_args(ins))
    src = view(ins.src, (ins.c * ins.h * ins.w,), (1,))
    dst = view(ins.dst, index.shape, (index.shape[1], 1))
    np.take(src, index, out=dst, mode="clip")  # the offsets are clamped into the tile
    if pads.size:
        dst.reshape(-1)[pads] = dst.dtype.type(ins.pad)


I32 = np.dtype(np.int32)


def _wrap32(x: np.ndarray) -> np.ndarray:
    """int64 values modulo 2**32 as int32 (two's complement wrap-around)."""
    return x.astype(np.int64).astype(np.uint32).view(np.int32)


def exec_mmad(view: View, ins: Mmad) -> None:
    """dst = a @ b (acc=0) or dst += a @ b (acc=1), in float32 (int8 operands: in int32)."""
    dst = view(ins.dst, (ins.m, ins.n), (ins.n, 1))
    if dst.dtype == I32:
        a8 = view(ins.a, (ins.m, ins.k), (ins.k, 1)).astype(np.float64)
        b8 = view(ins.b, (ins.k, ins.n), (ins.n, 1)).astype(np.float64)
        # int8 products summed in float64 are exact (|sum| < 2**53): BLAS dgemm, then int64
        product = np.matmul(a8, b8).astype(np.int64)
        dst[...] = _wrap32(product + dst.astype(np.int64)) if ins.acc else _wrap32(product)
        return
    a = _wide(view(ins.a, (ins.m, ins.k), (ins.k, 1)))
    b = _wide(view(ins.b, (ins.k, ins.n), (ins.n, 1)))
    # float32 operands (fp16 ones widened exactly): BLAS sgemm (a dtype= argument bypasses BLAS)
    product = np.matmul(a, b)
    if ins.acc:
        dst += product
    else:
        dst[...] = product


def requant_records(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 bias, float32 scale) per column from the bytes of requant parameter records."""
    records = np.ascontiguousarray(raw, np.uint8).reshape(-1, REQUANT_BYTES)
    bias = np.ascontiguousarray(records[:, :4]).view("<i4")[:, 0]
    scale = np.ascontiguousarray(records[:, 4:]).view("<f4")[:, 0]
    return bias, scale


def requantize(
    acc: np.ndarray, bias: np.ndarray, scale: np.ndarray, zp: int, lo: int, hi: int
) -> np.ndarray:
    """The rounding rule of `requant` on int32 accumulators [m, n] (see the module NOTE)."""
    total = _wrap32(acc.astype(np.int64) + bias.astype(np.int64))
    scaled = total.astype(F32) * scale.astype(F32)  # float32 product, nearest even
    with np.errstate(invalid="ignore"):
        rounded = np.rint(scaled).astype(np.float64) + zp  # rint: half to even
    return np.clip(rounded, lo, hi)


def exec_requant(view: View, ins: Requant) -> None:
    """dst[m, n] = requantized int32 src (bias and scale per column j from `params`)."""
    acc = view(ins.src, (ins.m, ins.n), (ins.n, 1))
    raw = view(ins.params, (REQUANT_BYTES * ins.n,), (1,), np.dtype(np.uint8))
    bias, scale = requant_records(raw)
    dst = view(ins.dst, (ins.m, ins.n), (ins.n, 1))
    dst[...] = requantize(acc, bias, scale, ins.zp, ins.lo, ins.hi).astype(dst.dtype)


def exec_vunary(view: View, ins: VUnary) -> None:
    """dst[i] = op(src[i], *scalars)."""
    src = _read(view(ins.src, ins.dims, ins.src_strides), ins.q, 0)
    with np.errstate(all="ignore"):
        result = UNARY[ins.op](src, *ins.scalars)
    _store(view(ins.dst, ins.dims, ins.dst_strides), result, ins.q)


def exec_vbinary(view: View, ins: VBinary) -> None:
    """dst[i] = a[i] op b[i], or dst[i] + a[i] * b[i] for mla (a zero stride broadcasts)."""
    a = _read(view(ins.a, ins.dims, ins.a_strides), ins.q, 0)
    b = _read(view(ins.b, ins.dims, ins.b_strides), ins.q, 1)
    dst = view(ins.dst, ins.dims, ins.dst_strides)
    with np.errstate(all="ignore"):
        result = _wide(dst) + a * b if ins.accumulates else BINARY[ins.op](a, b)
    _store(dst, result, ins.q)


def exec_vreduce(view: View, ins: VReduce) -> None:
    """dst[outer] = reduce(src[outer, reduced]) over the trailing `nred` dims."""
    src = _read(view(ins.src, ins.dims, ins.src_strides), ins.q, 0)
    outer = len(ins.dims) - ins.nred
    result = REDUCE[ins.op](src, axis=tuple(range(outer, len(ins.dims))))
    _store(view(ins.dst, ins.dims[:outer], ins.dst_strides), result, ins.q)


def exec_vsoftmax(view: View, ins: VSoftmax) -> None:
    """dst[r, :] = softmax(src[r, :]) in float32: exp(x - max) times 1 / their sum (as
    onnxruntime's kernel)."""
    x = _read(view(ins.src, (ins.rows, ins.cols), (ins.cols, 1)), ins.q, 0)
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        result = e * (F32(1) / e.sum(axis=1, keepdims=True, dtype=F32))
    _store(view(ins.dst, (ins.rows, ins.cols), (ins.cols, 1)), result, ins.q)


def exec_vfill(view: View, ins: VFill) -> None:
    """dst[i] = value."""
    _store(view(ins.dst, ins.dims, ins.dst_strides), F32(ins.value), ())


def gather_indices(view: View, ins: Gather) -> np.ndarray:
    """The n indices of a gather: int64 (little-endian) or values of the storage type."""
    if ins.index == INDEX_DTYPE:
        return view(ins.idx, (ins.n,), (1,), np.dtype("<i8"))
    return view(ins.idx, (ins.n,), (1,))


def gather_rows(indices: np.ndarray, rows: int) -> np.ndarray:
    """Table rows of gather indices: a negative index counts from the end (ONNX Gather)."""
    return np.where(indices < 0, indices + rows, indices)


def exec_gather(view: View, ins: Gather) -> None:
    """dst[i, :] = table[idx[i], :] (the machine has checked every index against `rows`)."""
    table = view(ins.table, (ins.rows, ins.row), (ins.row, 1))
    rows = gather_rows(gather_indices(view, ins).astype(np.int64), ins.rows)
    view(ins.dst, (ins.n, ins.row), (ins.row, 1))[...] = table[rows]


def exec_host(view: View, ins: Any) -> None:
    """A host record: its ONNX node run by onnxruntime (npucc.interp.host_exec, imported on
    first use: onnx and onnxruntime load only for streams that have host records)."""
    from npucc.interp.host_exec import exec_host as run

    run(view, ins)


# opcode -> executor of that opcode's Instr class (Any: each entry takes its own subclass, which
# the opcode key selects)
EXEC: dict[str, Callable[[View, Any], None]] = {
    "copy": exec_copy,
    "noc": exec_copy,
    "spill": exec_spill,
    "img2col": exec_img2col,
    "mmad": exec_mmad,
    "requant": exec_requant,
    "vunary": exec_vunary,
    "vbinary": exec_vbinary,
    "vreduce": exec_vreduce,
    "vsoftmax": exec_vsoftmax,
    "vfill": exec_vfill,
    "gather": exec_gather,
    "host": exec_host,
}
