"""What a command stream's records must satisfy beyond their syntax, checked as they are parsed.

Bounds (every operand inside its tier, DDR or the on-chip tensors, and within its declared
bytes), pipes (each instruction on the pipe its tiers or kind imply), alloc/free regions,
on-chip tensors (homes inside the mesh, within each core's on-chip buffer, no overlap) and
NoC routes (`hops` is the distance to the farthest home a copy reaches), host records (on
core 0,0's HOST queue, whole DDR operands of their declared types).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import cast

from npucc.ir.dtypes import INDEX_DTYPE, IR_INTS
from npucc.ir.instr_text import format_ref
from npucc.ir.isa import (
    BINARY_OPS,
    DDR,
    INT8_FIELDS,
    NOC,
    QUANT_ARITY,
    REDUCE_OPS,
    UNARY_OPS,
    Copy,
    Gather,
    HostOp,
    Img2Col,
    Instr,
    MemRef,
    Mmad,
    NocCopy,
    Requant,
    Spill,
    VBinary,
    VReduce,
    VUnary,
    copy_pipe,
    field_names,
)
from npucc.ir.isa_cost import operand_bytes, operand_nbytes
from npucc.ir.onchip import CHUNK_ALIGN, OnChip, chunk_bytes
from npucc.ir.stream import Event, StreamError, StreamTensor
from npucc.target import TIERS, Target

UNARY_ARITY = {"clip": 2, "muls": 1, "adds": 1, "pows": 1}
VECTOR_TIERS = ("UB", "L0C")
_MAX_FIELD = 1 << 32  # no count, stride or padding reaches this many elements (int64-safe)
_POSITIVE = frozenset(("dims", "size", "c", "h", "w", "kh", "kw", "sh", "sw", "dh", "dw", "oh",
                       "ow", "m", "n", "k", "row", "rows"))  # fmt: skip
# img2col's pads may be negative: an output band whose window starts inside the image (a conv
# reading a resident whole image from the band's first input row)
_SIGNED = frozenset(("pt", "pl"))


class StreamChecks:
    """The checks of a stream being parsed, with what they need: target, sizes, on-chip tensors.

    Failures are `StreamError`s at the current line (`lineno`), which the parser advances.
    """

    __slots__ = ("path", "target", "ddr_size", "lineno", "extent", "onchip")

    def __init__(self, path: str) -> None:
        self.path = path
        self.lineno = 0
        self.ddr_size = 0
        self.target: Target
        self.extent: dict[str, tuple[int, int]] = {}  # as Stream.extent
        self.onchip: list[StreamTensor] = []  # onchip tensors by NOC address

    def fail(self, message: str, lineno: int | None = None) -> StreamError:
        """The error of the current line (or of `lineno`)."""
        return StreamError(f"{self.path}:{self.lineno if lineno is None else lineno}: {message}")

    def reach(self, tier: str, end: int) -> None:
        """Record that the stream addresses `tier` up to byte `end`."""
        if end > self.extent.get(tier, (0, 0))[0]:
            self.extent[tier] = (end, self.lineno)

    # ------------------------------------------------------------------------ on-chip tensors

    def check_onchip(self, name: str, addr: int, nbytes: int, shape: tuple[int, ...],
                     where: OnChip) -> None:  # fmt: skip
        """An onchip tensor: its bytes hold its shape in its homes' on-chip buffers."""
        elems, eb = math.prod(shape), self.target.elem_bytes
        if elems * eb != nbytes or addr % 4:
            raise self.fail(f"tensor {json.dumps(name)}: {nbytes} bytes at 0x{addr:x} do not "
                            f"hold shape {shape}")  # fmt: skip
        if len(where.homes) != -(-elems // where.chunk):
            raise self.fail(f"onchip tensor {json.dumps(name)}: {len(where.homes)} homes do not "
                            f"hold {elems} elements in chunks of {where.chunk}")  # fmt: skip
        rows, cols = self.target.mesh.rows, self.target.mesh.cols
        budget = self.target.mesh.onchip_budget
        need = chunk_bytes(where.chunk, eb)
        for r, c in where.homes:
            if r >= rows or c >= cols:
                raise self.fail(f"onchip tensor {json.dumps(name)}: home {r},{c} outside the mesh")
        if where.at % CHUNK_ALIGN or where.at + need > budget:
            r, c = where.homes[0]
            raise self.fail(f"onchip tensor {json.dumps(name)} at {where.at}: more than the "
                            f"on-chip buffer ({budget} bytes) of core {r},{c}")  # fmt: skip
        for t in self.onchip:
            if addr < t.addr + t.nbytes and t.addr < addr + nbytes:
                raise self.fail(f"onchip tensor {json.dumps(name)} overlaps {json.dumps(t.name)}")
            assert t.onchip is not None
            if where.clashes(t.onchip, eb):
                raise self.fail(f"onchip tensor {json.dumps(name)} shares on-chip bytes with "
                                f"{json.dumps(t.name)} while both live")  # fmt: skip

    def _noc_hops(self, ref: MemRef, nbytes: int, core: tuple[int, int]) -> int:
        """Hops from `core` to the farthest home of the on-chip bytes [ref.addr, +nbytes)."""
        for t in self.onchip:
            if t.addr <= ref.addr and ref.addr + nbytes <= t.addr + t.nbytes:
                assert t.onchip is not None
                eb = self.target.elem_bytes
                lo = (ref.addr - t.addr) // eb
                return t.onchip.hops(core, lo, lo + nbytes // eb)
        raise self.fail(f"noc: {format_ref(NOC, ref.addr, nbytes)} is not inside one onchip tensor")

    def check_noc(self, instr: NocCopy, declared: dict[str, int], core: tuple[int, int]) -> None:
        """A noc copy: one side a core tier, the other NOC; `hops` must be the route's."""
        far = "src" if instr.src.tier == NOC else "dst"
        near = instr.dst if far == "src" else instr.src
        if near.tier not in TIERS:
            raise self.fail("noc: one side must be NOC and the other a core tier")
        ref = cast(MemRef, getattr(instr, far))
        hops = self._noc_hops(ref, declared[far], core)
        if instr.hops != hops:
            raise self.fail(f"noc: hops={instr.hops}, but core {core[0]},{core[1]} is {hops} hops "
                            "from the farthest home it reaches")  # fmt: skip

    # ------------------------------------------------------------------------ events

    def check_event(self, ev: Event) -> None:
        """An alloc/free region: on chip, aligned, non-empty, within its tier."""
        kind, tier, addr, size = ev.kind, ev.tier, ev.addr, ev.size
        if tier not in TIERS:
            raise self.fail(f"{kind}: {tier} is not an on-chip tier")
        if addr % self.target.memory.alignment or size == 0:
            raise self.fail(
                f"{kind}: {format_ref(tier, addr, size)} is empty or not aligned to "
                f"{self.target.memory.alignment}"
            )
        if addr + size > self.target.memory.capacity(tier):
            raise self.fail(
                f"{kind}: {format_ref(tier, addr, size)} exceeds {tier} capacity "
                f"{self.target.memory.capacity(tier)}"
            )
        self.reach(tier, addr + size)

    # ------------------------------------------------------------------------ instructions

    def check_instr(self, queue: str, instr: Instr, declared: dict[str, int]) -> None:
        """Fields in range, operands inside their memories and declared bytes, the right pipe."""
        op = instr.opcode
        if isinstance(instr, Gather) and instr.index not in (INDEX_DTYPE, self.target.dtype):
            raise self.fail(f"gather: bad index={clip(instr.index)} ({INDEX_DTYPE} or "
                            f"{self.target.dtype})")  # fmt: skip
        try:
            extents = instr.extents()
        except ValueError:
            raise self.fail(f"{op}: dims and strides differ in length") from None
        for name, values in _ints(instr):
            low = -_MAX_FIELD if name in _SIGNED else 0
            if name in INT8_FIELDS:
                low, high, zero = -128, 127, False
            else:
                high, zero = _MAX_FIELD, name in _POSITIVE
            # NOTE: a field's values are checked at once; the first bad one is sought only then
            if values and (min(values) < low or max(values) > high or (zero and 0 in values)):
                value = next(v for v in values if v < low or v > high or (zero and v == 0))
                if name in INT8_FIELDS:
                    raise self.fail(f"{op}: bad {name}={value} (an int8 value)")
                raise self.fail(f"{op}: bad {name}={clip(str(value))}")
        for name, ref in instr.operands().items():
            assert isinstance(ref, MemRef)
            nbytes, eb = declared[name], operand_bytes(self.target, instr, name)
            tier, addr = ref.tier, ref.addr
            if tier == NOC:
                cap = self.extent.get(NOC, (0, 0))[0]
            else:
                cap = self.ddr_size if tier == DDR else self.target.memory.capacity(tier)
            if addr % eb:
                raise self.fail(f"{op}: operand {name} address 0x{addr:x} not aligned to {eb}")
            end = addr + nbytes
            if end > cap:
                raise self.fail(
                    f"{op}: operand {name}={format_ref(tier, addr, nbytes)} "
                    f"exceeds {tier} size {cap}"
                )
            self.reach(tier, end)
            span = extents[name] * eb
            if span > nbytes:
                raise self.fail(
                    f"{op}: operand {name} pattern spans {span} bytes, more than its declared "
                    f"{nbytes}"
                )
        pipe = self._pipe_and_kind(instr)
        if pipe != queue:
            raise self.fail(f"{op} must run on {pipe}, not {queue}")

    def check_host(self, instr: HostOp, declared: dict[str, int], core: tuple[int, int]) -> None:
        """A host record: on core 0,0 (the host queue's block), its operands whole DDR regions of
        their declared types, as many inputs as its node's input list names."""
        if core != (0, 0):
            raise self.fail("host: the HOST queue is core 0 0's")
        inputs = [i for i in json.loads(instr.node)["inputs"] if i]
        if len(inputs) != len(instr.ins) or not instr.outs:
            raise self.fail(f"host: {len(instr.ins)} inputs for a node of {len(inputs)}, "
                            f"{len(instr.outs)} outputs")  # fmt: skip
        spans = operand_nbytes(self.target, instr)
        for (name, ref), (dtype, _) in zip(
            ((n, getattr(instr, n)) for n in (*instr.reads, *instr.writes)),
            (*instr.in_types, *instr.out_types),
            strict=True,
        ):
            nbytes = declared[name]
            if dtype not in ("f32", *IR_INTS):
                raise self.fail(f"host: {name}_type {clip(dtype)} is not f32 or an integer type")
            if ref.tier != DDR or ref.addr % 4 or ref.addr + nbytes > self.ddr_size:
                where = format_ref(ref.tier, ref.addr, nbytes)
                raise self.fail(f"host: operand {name}={where} must be aligned and inside DDR "
                                f"(size {self.ddr_size})")  # fmt: skip
            if spans[name] != nbytes:
                raise self.fail(f"host: operand {name} declares {nbytes} bytes, its type "
                                f"{spans[name]}")  # fmt: skip
            self.reach(DDR, ref.addr + nbytes)

    def _pipe_and_kind(self, instr: Instr) -> str:
        op = instr.opcode
        if isinstance(instr, (Copy, Spill)):
            try:
                pipe = copy_pipe(instr.src.tier, instr.dst.tier)
            except ValueError as exc:
                raise self.fail(f"{op}: {exc}") from None
            if isinstance(instr, Spill) and DDR not in (instr.src.tier, instr.dst.tier):
                raise self.fail("spill: one side must be DDR")
            if (NOC in (instr.src.tier, instr.dst.tier)) != isinstance(instr, NocCopy):
                raise self.fail(f"{op}: only a noc copy reaches NOC, and it must")
            return pipe
        if isinstance(instr, Gather):
            if instr.table.tier != DDR or instr.idx.tier != DDR or instr.dst.tier not in TIERS:
                raise self.fail("gather: table and idx must be in DDR and dst on chip")
            return "MTE2"
        if isinstance(instr, Img2Col):
            if instr.src.tier != "L1" or instr.dst.tier not in ("L0A", "L0B"):
                raise self.fail("img2col: src must be in L1 and dst in L0A or L0B")
            return "MTE1"
        if isinstance(instr, Mmad):
            tiers = (instr.a.tier, instr.b.tier, instr.dst.tier)
            if tiers != ("L0A", "L0B", "L0C"):
                raise self.fail("mmad: a, b, dst must be in L0A, L0B, L0C")
            if instr.acc not in (0, 1):
                raise self.fail(f"mmad: acc must be 0 or 1, got {instr.acc}")
            return "CUBE"
        if isinstance(instr, Requant):
            tiers = (instr.src.tier, instr.params.tier, instr.dst.tier)
            if self.target.dtype != "i8" or tiers != ("L0C", "UB", "UB") or instr.lo > instr.hi:
                raise self.fail("requant: an int8 stream's src in L0C, params and dst in UB, "
                                "lo <= hi")  # fmt: skip
        for name, ref in instr.operands().items():
            if ref.tier not in VECTOR_TIERS:
                raise self.fail(f"{op}: operand {name} must be in UB or L0C, not {ref.tier}")
        if isinstance(instr, VUnary):
            if instr.op not in UNARY_OPS:
                raise self.fail(f"vunary: unknown op '{instr.op}'")
            if len(instr.scalars) != UNARY_ARITY.get(instr.op, 0):
                raise self.fail(
                    f"vunary {instr.op}: expects {UNARY_ARITY.get(instr.op, 0)} "
                    f"scalars, got {len(instr.scalars)}"
                )
        elif isinstance(instr, VBinary) and instr.op not in BINARY_OPS:
            raise self.fail(f"vbinary: unknown op '{instr.op}'")
        elif isinstance(instr, VReduce):
            if instr.op not in REDUCE_OPS:
                raise self.fail(f"vreduce: unknown op '{instr.op}'")
            if instr.nred > len(instr.dims) or len(instr.src_strides) != len(instr.dims):
                raise self.fail("vreduce: nred, dims and strides are inconsistent")
        q = getattr(instr, "q", ())
        if q and (self.target.dtype != "i8" or len(q) != QUANT_ARITY[op] or not all(
            s > 0 for s in q[::2]
        )):  # fmt: skip
            raise self.fail(f"{op}: q needs an int8 stream and {QUANT_ARITY[op]} values "
                            "(positive scales)")  # fmt: skip
        return "VECTOR"


def _ints(instr: Instr) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Each integer field's values (one for an int, a list's for a list but scalars and q)."""
    for name in field_names(type(instr)):
        value = getattr(instr, name)
        if isinstance(value, int):
            yield name, (value,)
        elif isinstance(value, tuple) and name not in ("scalars", "q"):
            yield name, value


def clip(text: str, limit: int = 40) -> str:
    """`text` cut to `limit` characters for an error message."""
    return text if len(text) <= limit else text[:limit] + "..."
