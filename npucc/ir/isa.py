"""The NPU instruction set shared by the tiled IR, codegen and the interpreter.

An instruction's operands are either symbolic (`BufRef`: a buffer of the tiled IR plus an element
offset; `DdrRef`: a DDR tensor plus an element offset) or resolved (`MemRef`: a tier, or DDR,
plus a byte address). Lowering builds instructions on symbolic operands; codegen resolves them
to `MemRef`s once buffers and DDR tensors have addresses; the interpreter
parses `MemRef` instructions back from text. All strides, dims and offsets inside an instruction
are in elements of the target dtype; addresses are in bytes. The text form of an instruction
is `npucc.ir.instr_text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import ClassVar, NamedTuple

from npucc.target import TIERS

PIPES = ("MTE1", "MTE2", "MTE3", "CUBE", "VECTOR", "FIXP", "HOST")
# NOTE: HOST is the host processor's one in-order queue (host segments, `HostOp`); only core
# (0, 0)'s block holds it (docs/command-stream.md, "Host segments")
HOST = "HOST"
CTRL = "CTRL"  # pseudo-queue of pipe-less events (alloc, free, barrier): dataflow, not in order
DDR = "DDR"
NOC = "NOC"  # the mesh's distributed on-chip buffer: tensors kept on chip, reached over the NoC

UNARY_OPS = (
    "copy",
    "relu",
    "clip",  # scalars: lo, hi
    "exp",
    "neg",
    "sqrt",
    "recip",
    "square",
    "muls",  # scalar: s
    "adds",  # scalar: s
    "pows",  # scalar: p
    "tanh",
    "erf",
    "sigmoid",
    "abs",
    "log",
    "not",  # 1.0 where x == 0, else 0.0 (booleans are 1.0/0.0)
    "f16",  # round to the nearest float16 value (ties to even; beyond its range: +-inf)
    "bf16",  # round to the nearest bfloat16 value (ties to even)
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "floor",
    "ceil",
    "round",  # to the nearest integer, ties to even
    "sign",  # -1.0, 0.0 or 1.0 (NaN stays NaN)
)
COMPARE_OPS = ("lt", "gt", "le", "ge", "eq", "ne")  # 1.0 where `a OP b` holds, else 0.0
BINARY_OPS = (
    "add",
    "sub",
    "mul",
    "div",
    "max",
    "min",
    "pow",
    *COMPARE_OPS,
    "mask",  # a where b != 0, else +0.0
    "maskn",  # a where b == 0, else +0.0
    "mod",  # a - b * floor(a / b), exactly: the sign of b (Python's %)
    "fmod",  # a - b * trunc(a / b), exactly: the sign of a (C's fmod)
    "mla",  # dst + a * b: multiply-accumulate (dst is read too; see ACCUMULATING_OPS)
)
ACCUMULATING_OPS = ("mla",)  # vbinary ops that read their dst as well as a and b
REDUCE_OPS = ("sum", "max", "min", "prod", "mean")  # mean: the float32 sum / the count
# vector cost multiplier per element beyond the basic one
VECTOR_OP_WEIGHT = {
    "exp": 4,
    "sqrt": 4,
    "recip": 4,
    "div": 4,
    "pows": 8,
    "pow": 8,
    "tanh": 8,
    "erf": 8,
    "sigmoid": 8,
    "log": 8,
    "mod": 4,
    "fmod": 4,
    **dict.fromkeys(
        ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"), 8
    ),
}
SOFTMAX_WEIGHT = 10  # a vsoftmax element: max (1), exp (4), sum (1), divide (4)


class BufRef(NamedTuple):
    """Symbolic operand: element `off` of tiled-IR buffer `buf` (which lives in `tier`).

    NOTE: a named tuple, not a frozen dataclass: as immutable, and made several times faster
    (a lowering makes one for every operand view of every instruction it emits or tries)."""

    buf: int  # buffer id in its core's TileGraph
    tier: str  # home tier of the buffer
    off: int = 0  # element offset from the buffer start
    core: int = 0  # index of the core whose TileGraph owns the buffer

    def at(self, off: int) -> BufRef:
        """The same buffer, `off` more elements in."""
        buf, tier, at, core = self
        return _make(BufRef, (buf, tier, at + off, core))


class DdrRef(NamedTuple):
    """Symbolic operand: element `off` of DDR tensor `key` (laid out by codegen; a named tuple
    as `BufRef`)."""

    key: str  # DdrTensor key in the TiledProgram
    off: int = 0  # element offset from the tensor start

    @property
    def tier(self) -> str:
        """Always DDR."""
        return DDR

    def at(self, off: int) -> DdrRef:
        """The same tensor, `off` more elements in."""
        return _make(DdrRef, (self[0], self[1] + off))


_make = tuple.__new__  # a named tuple from its values, without its __new__'s argument handling


@dataclass(frozen=True, slots=True)
class MemRef:
    """Resolved operand: byte address `addr` in `tier` (a TIERS name or DDR)."""

    tier: str
    addr: int  # byte address of element 0 of the access pattern

    def at(self, off: int, elem_bytes: int = 4) -> MemRef:
        """The address `off` elements further on."""
        return MemRef(self.tier, self.addr + off * elem_bytes)


Operand = BufRef | DdrRef | MemRef


def pattern_extent(dims: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Number of elements from the first to one past the last element a pattern touches."""
    if 0 in dims:
        return 0
    extent = 1  # NOTE: a loop, not sum() over a generator: codegen and the interpreter call
    for d, s in zip(dims, strides, strict=True):  # this for every operand of every instruction
        extent += (d - 1) * s
    return extent


class Instr:
    """Base of all instructions: declares the operand fields and how they are accessed.

    NOTE: an instruction is a value, built once and never assigned to (equal and hashed by its
    fields). The concrete classes are slotted dataclasses that are not declared frozen: a frozen
    class's __init__ sets each slot through a descriptor call, ~3x the machine instructions of
    storing it (a lowering builds one for every node it emits or tries: MobileNet v2 ~167 k a
    compile).
    """

    __slots__ = ()
    opcode: ClassVar[str]
    reads: ClassVar[tuple[str, ...]]  # operand fields read
    writes: ClassVar[tuple[str, ...]]  # operand fields written

    def operands(self) -> dict[str, Operand]:
        """Operand fields by name, reads then writes."""
        return {n: getattr(self, n) for n in (*self.writes, *self.reads)}

    def extents(self) -> dict[str, int]:
        """Elements spanned by each operand's access pattern."""
        raise NotImplementedError

    def with_operands(self, **ops: Operand) -> Instr:
        """A copy with some operands replaced (codegen resolves BufRef -> MemRef this way)."""
        values = {name: getattr(self, name) for name in field_names(type(self))}
        values.update(ops)
        return type(self)(**values)


@dataclass(slots=True, unsafe_hash=True)
class Copy(Instr):
    """Strided N-d copy dst[i] = src[i] (a DMA on MTE1/2/3, or a VECTOR move)."""

    opcode: ClassVar[str] = "copy"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    src: Operand
    dims: tuple[int, ...]
    dst_strides: tuple[int, ...]
    src_strides: tuple[int, ...]

    def extents(self) -> dict[str, int]:
        return {
            "dst": pattern_extent(self.dims, self.dst_strides),
            "src": pattern_extent(self.dims, self.src_strides),
        }


@dataclass(slots=True, unsafe_hash=True)
class NocCopy(Copy):
    """A copy between a core tier and an on-chip tensor (NOC), `hops` mesh hops away."""

    opcode: ClassVar[str] = "noc"
    hops: int  # Manhattan hops between this core and the farthest home the access touches


@dataclass(slots=True, unsafe_hash=True)
class Spill(Instr):
    """Contiguous copy of a whole buffer to/from DDR that moves its residency (SPILL_OUT/IN)."""

    opcode: ClassVar[str] = "spill"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    src: Operand
    size: int  # elements

    def extents(self) -> dict[str, int]:
        return {"dst": self.size, "src": self.size}


@dataclass(slots=True, unsafe_hash=True)
class Img2Col(Instr):
    """MTE1 load3d: dst[M=oh*ow, K=c*kh*kw] from an input tile src[c, h, w]; out of range -> pad.

    Output pixel (i, j), tap (ki, kj) of channel ch reads src[ch, i*sh + ki*dh - pt,
    j*sw + kj*dw - pl]; rows/cols outside [0,h) x [0,w) read as `pad` (0; an int8 conv pads
    with its input's zero point, the quantized 0.0).
    """

    opcode: ClassVar[str] = "img2col"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    src: Operand
    c: int
    h: int
    w: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    oh: int
    ow: int
    pad: int = 0  # NOTE: an optional field (OPTIONAL_FIELDS): the text omits it when 0

    def extents(self) -> dict[str, int]:
        return {
            "dst": self.oh * self.ow * self.c * self.kh * self.kw,
            "src": self.c * self.h * self.w,
        }


@dataclass(slots=True, unsafe_hash=True)
class Mmad(Instr):
    """CUBE matrix multiply: dst[m,n] (+)= a[m,k] @ b[k,n], all row-major and contiguous."""

    opcode: ClassVar[str] = "mmad"
    reads: ClassVar[tuple[str, ...]] = ("a", "b")
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    a: Operand
    b: Operand
    m: int
    n: int
    k: int
    acc: int  # 1: accumulate into dst (dst is read too); 0: overwrite

    def extents(self) -> dict[str, int]:
        return {"dst": self.m * self.n, "a": self.m * self.k, "b": self.k * self.n}


REQUANT_BYTES = 8  # bytes of a requant parameter record: int32 bias, float32 scale (per column)


@dataclass(slots=True, unsafe_hash=True)
class Requant(Instr):
    """VECTOR fix-pipe step out of L0C: int32 accumulators to int8 (docs/precision.md, int8).

    dst[i, j] = clamp(rne(f32(src[i, j] + bias[j]) * scale[j]) + zp, lo, hi), with (bias,
    scale) the little-endian int32 and float32 of record j (REQUANT_BYTES) of `params`; src and
    dst are row-major m x n and contiguous, the int32 sum wraps and rne rounds half to even.
    """

    opcode: ClassVar[str] = "requant"
    reads: ClassVar[tuple[str, ...]] = ("src", "params")
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    src: Operand
    params: Operand
    m: int
    n: int
    zp: int
    lo: int
    hi: int

    def extents(self) -> dict[str, int]:
        return {"dst": self.m * self.n, "src": self.m * self.n, "params": REQUANT_BYTES * self.n}


@dataclass(slots=True, unsafe_hash=True)
class VUnary(Instr):
    """VECTOR element-wise dst[i] = op(src[i], *scalars) over a strided pattern."""

    opcode: ClassVar[str] = "vunary"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    op: str
    dst: Operand
    src: Operand
    dims: tuple[int, ...]
    dst_strides: tuple[int, ...]
    src_strides: tuple[int, ...]
    scalars: tuple[float, ...] = ()
    q: tuple[float, ...] = ()  # int8: quantization (QUANT_ARITY; an OPTIONAL_FIELDS field)

    def extents(self) -> dict[str, int]:
        return {
            "dst": pattern_extent(self.dims, self.dst_strides),
            "src": pattern_extent(self.dims, self.src_strides),
        }


@dataclass(slots=True, unsafe_hash=True)
class VBinary(Instr):
    """VECTOR element-wise dst[i] = a[i] op b[i] (mla: dst[i] + a[i] * b[i]); stride 0
    broadcasts."""

    opcode: ClassVar[str] = "vbinary"
    reads: ClassVar[tuple[str, ...]] = ("a", "b")
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    op: str
    dst: Operand
    a: Operand
    b: Operand
    dims: tuple[int, ...]
    dst_strides: tuple[int, ...]
    a_strides: tuple[int, ...]
    b_strides: tuple[int, ...]
    q: tuple[float, ...] = ()  # int8: quantization (QUANT_ARITY; an OPTIONAL_FIELDS field)

    @property
    def accumulates(self) -> bool:
        """True when the op reads dst too (a multiply-accumulate)."""
        return self.op in ACCUMULATING_OPS

    def extents(self) -> dict[str, int]:
        return {
            "dst": pattern_extent(self.dims, self.dst_strides),
            "a": pattern_extent(self.dims, self.a_strides),
            "b": pattern_extent(self.dims, self.b_strides),
        }


@dataclass(slots=True, unsafe_hash=True)
class VReduce(Instr):
    """VECTOR reduction over the last `nred` dims of src's pattern into dst's (outer) pattern."""

    opcode: ClassVar[str] = "vreduce"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    op: str
    dst: Operand
    src: Operand
    dims: tuple[int, ...]  # outer dims then reduced dims
    dst_strides: tuple[int, ...]  # one per outer dim
    src_strides: tuple[int, ...]  # one per dim
    nred: int
    q: tuple[float, ...] = ()  # int8: quantization (QUANT_ARITY; an OPTIONAL_FIELDS field)

    def extents(self) -> dict[str, int]:
        outer = self.dims[: len(self.dims) - self.nred]
        return {
            "dst": pattern_extent(outer, self.dst_strides),
            "src": pattern_extent(self.dims, self.src_strides),
        }


@dataclass(slots=True, unsafe_hash=True)
class VSoftmax(Instr):
    """VECTOR softmax of each row of a dense [rows, cols] src into dst: in float32, the row's
    max, exp(x - max), their sum and each exp divided by it (int8: `q` as a vunary's)."""

    opcode: ClassVar[str] = "vsoftmax"
    reads: ClassVar[tuple[str, ...]] = ("src",)
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    src: Operand
    rows: int
    cols: int
    q: tuple[float, ...] = ()

    def extents(self) -> dict[str, int]:
        return {"dst": self.rows * self.cols, "src": self.rows * self.cols}


@dataclass(slots=True, unsafe_hash=True)
class VFill(Instr):
    """VECTOR fill dst[i] = value over a strided pattern."""

    opcode: ClassVar[str] = "vfill"
    reads: ClassVar[tuple[str, ...]] = ()
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    dims: tuple[int, ...]
    dst_strides: tuple[int, ...]
    value: float

    def extents(self) -> dict[str, int]:
        return {"dst": pattern_extent(self.dims, self.dst_strides)}


# index element types of a gather -> idx elements per index: i64 two 4-byte words, a float
# (computed indices, the target's storage type) one value
GATHER_INDEX = {"i64": 2, "f32": 1, "f16": 1}


@dataclass(slots=True, unsafe_hash=True)
class Gather(Instr):
    """MTE2 indirect copy (embedding lookup): dst[i, :] = table[idx[i], :] for i < n.

    `table` is a DDR f32 matrix of `rows` rows of `row` elements; `idx` holds n indices in DDR
    of type `index`: i64, little-endian, each two 4-byte words (idx offsets and its extent count
    words: the operand declares 8*n bytes), or the target's storage type (f32 or f16), integral
    values (computed indices). dst is dense [n, row] in an on-chip tier. Every index must lie
    in [-rows, rows); a negative one counts from the end (ONNX Gather). The table operand
    declares the whole table.
    """

    opcode: ClassVar[str] = "gather"
    reads: ClassVar[tuple[str, ...]] = ("table", "idx")
    writes: ClassVar[tuple[str, ...]] = ("dst",)
    dst: Operand
    table: Operand
    idx: Operand
    n: int  # indices (rows gathered)
    row: int  # elements per row
    rows: int  # rows of the table (the bound of every index)
    index: str = "i64"  # element type of the indices: i64 or f32 (GATHER_INDEX)

    def extents(self) -> dict[str, int]:
        words = self.n * GATHER_INDEX[self.index]
        return {"dst": self.n * self.row, "table": self.rows * self.row, "idx": words}


@dataclass(slots=True, unsafe_hash=True)
class HostOp(Instr):
    """A host segment: one ONNX node the host runs (with onnxruntime) on DDR operands.

    `node` is the node as canonical JSON (op, domain, version, opset, typed attributes, and
    `inputs`: the node's input list, "" for an absent optional input); `ins` are its present
    inputs and `outs` its outputs, each a whole DDR tensor of `in_types`/`out_types` (the ONNX
    element type, held as float32 in DDR like every integer, and the shape). Operand names are
    `in0, in1, ...` and `out0, ...` (`reads`, `writes`).
    """

    opcode: ClassVar[str] = "host"
    node: str
    ins: tuple[Operand, ...]
    outs: tuple[Operand, ...]
    in_types: tuple[tuple[str, tuple[int, ...]], ...]
    out_types: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def reads(self) -> tuple[str, ...]:  # type: ignore[override]
        """The input operand names, in0 ... (a host node's arity varies)."""
        return tuple(f"in{i}" for i in range(len(self.ins)))

    @property
    def writes(self) -> tuple[str, ...]:  # type: ignore[override]
        """The output operand names, out0 ..."""
        return tuple(f"out{i}" for i in range(len(self.outs)))

    def __getattr__(self, name: str) -> Operand:
        for prefix, refs in (("in", self.ins), ("out", self.outs)):
            index = name[len(prefix) :]
            if name.startswith(prefix) and index.isdigit() and int(index) < len(refs):
                return refs[int(index)]
        raise AttributeError(name)

    def extents(self) -> dict[str, int]:
        sizes = [math.prod(shape) for _, shape in (*self.in_types, *self.out_types)]
        return dict(zip((*self.reads, *self.writes), sizes, strict=True))

    def with_operands(self, **ops: Operand) -> Instr:
        ins = tuple(ops.get(n, r) for n, r in zip(self.reads, self.ins, strict=True))
        outs = tuple(ops.get(n, r) for n, r in zip(self.writes, self.outs, strict=True))
        return HostOp(self.node, ins, outs, self.in_types, self.out_types)


_FIELD_NAMES: dict[type[Instr], tuple[str, ...]] = {}


def field_names(cls: type[Instr]) -> tuple[str, ...]:
    """Names of an instruction class's fields, in declaration order (memoised per class).

    A dict rather than functools.cache: mypy rejects class objects as cache keys (it checks the
    instances' __hash__ against Hashable).
    """
    names = _FIELD_NAMES.get(cls)
    if names is None:
        # every concrete Instr class is a dataclass (only the abstract base is not)
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return names


INSTRUCTIONS: dict[str, type[Instr]] = {
    cls.opcode: cls
    for cls in (
        Copy, NocCopy, Spill, Img2Col, Mmad, Requant, VUnary, VBinary, VReduce, VSoftmax,
        VFill, Gather,
    )
}  # fmt: skip
# fields the text omits at their default (so that streams without them read as before)
OPTIONAL_FIELDS: dict[str, object] = {"pad": 0, "q": ()}
# NOTE: a vector instruction's `q` (int8, docs/precision.md): each operand read is dequantized,
# (x - zero point) * scale in float32, the op computes in float32 and its result is quantized,
# rne(r / scale) + zero point saturated to [-128, 127]: (scale, zero point) of each read operand
# in field order, then of dst. Without `q` an int8 value widens as itself and a result rounds
# half to even and saturates.
QUANT_ARITY = {"vunary": 4, "vbinary": 6, "vreduce": 4, "vsoftmax": 4}
# NOTE: int fields holding an int8 value (a zero point, a saturation bound, a pad value): the
# one signed fields, in [-128, 127]; every other int field is a count, stride or offset >= 0
INT8_FIELDS = frozenset(("pad", "zp", "lo", "hi"))


def vector_elements(instr: Instr) -> int:
    """Elements a vector-pipe instruction computes (0 for any other instruction)."""
    if isinstance(instr, (VUnary, VBinary, VReduce, VFill)):
        return math.prod(instr.dims)
    if isinstance(instr, Requant):
        return instr.m * instr.n
    if isinstance(instr, VSoftmax):
        return instr.rows * instr.cols
    return 0


def copy_pipe(src_tier: str, dst_tier: str) -> str:
    """The pipe that moves data from src_tier to dst_tier (NpuccError-free: ValueError if none)."""
    if src_tier in (DDR, NOC) and dst_tier in TIERS:
        return "MTE2"
    if dst_tier in (DDR, NOC) and src_tier in TIERS:
        return "MTE3"
    if src_tier == "L1" and dst_tier in ("L0A", "L0B", "UB"):
        return "MTE1"
    if src_tier in ("L0C", "UB") and dst_tier in ("UB", "L1"):
        return "VECTOR"
    raise ValueError(f"no data path from {src_tier} to {dst_tier}")


def dma_path(src_tier: str, dst_tier: str) -> str:
    """The target's [dma] table entry that times a copy from src_tier to dst_tier."""
    if src_tier == DDR:
        return "DDR_L1" if dst_tier == "L1" else "DDR_UB" if dst_tier == "UB" else "DDR_L0"
    if dst_tier == DDR:
        return "TIER_DDR"
    if src_tier == "L1":
        return "L1_UB" if dst_tier == "UB" else "L1_L0"
    if src_tier == "L0C":
        return "L0C_UB"
    if dst_tier == "L1":
        return "UB_L1"
    return "UB_UB"


def instr_pipe(instr: Instr) -> str:
    """The pipe an instruction runs on (copies by their tiers; compute by kind)."""
    if isinstance(instr, (Copy, Spill)):
        return copy_pipe(instr.src.tier, instr.dst.tier)
    if isinstance(instr, Img2Col):
        return "MTE1"
    if isinstance(instr, Gather):
        return "MTE2"
    if isinstance(instr, Mmad):
        return "CUBE"
    if isinstance(instr, HostOp):
        return HOST
    return "VECTOR"
