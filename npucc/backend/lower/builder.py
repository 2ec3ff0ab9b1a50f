"""TileBuilder: appends instructions to a core's TileGraph and derives the precedence edges.

Lowering code only says what to compute (alloc, emit, free); the builder adds the edges a
correct schedule needs: ALLOC before first use, read-after-write, write-after-read and
write-after-write on every buffer, every use before FREE, and for DDR tensors a BARRIER after
all tiles of a tensor are written, which every later reader waits for; on a one-core target a
copy from DDR waits instead for exactly the writes it overlaps (npucc.backend.lower.ddr_deps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from npucc.backend.lower.band_view import BandView
from npucc.backend.lower.ddr_deps import Runs, Written, by_channels, pattern_runs
from npucc.ir.instr_form import fields_getter, instr_fields
from npucc.ir.isa import (
    BufRef,
    Copy,
    DdrRef,
    Gather,
    HostOp,
    Img2Col,
    Instr,
    MemRef,
    Mmad,
    NocCopy,
    Spill,
    VBinary,
    instr_pipe,
    pattern_extent,
)
from npucc.ir.isa_cost import instr_cycles
from npucc.ir.onchip import OnChip
from npucc.ir.tiled import TileGraph
from npucc.target import Target

if TYPE_CHECKING:  # NOTE: trial_graph's TrialBuilder is a TileBuilder (imports this module)
    from npucc.backend.lower.trial_graph import TrialGraph


def node_op_name(instr: Instr) -> str:
    """Trace-style op name: COPY_IN, COPY_OUT, MOVE, IMG2COL, MMAD, GATHER or VEC_*."""
    if isinstance(instr, (Copy, Spill)):
        if instr.src.tier == "DDR":
            return "COPY_IN"
        if instr.dst.tier == "DDR":
            return "COPY_OUT"
        return "MOVE"
    if isinstance(instr, Img2Col):
        return "IMG2COL"
    if isinstance(instr, Mmad):
        return "MMAD"
    if isinstance(instr, Gather):
        return "GATHER"
    if isinstance(instr, HostOp):
        return "HOST"
    op = getattr(instr, "op", instr.opcode.removeprefix("v"))
    return f"VEC_{op.upper()}"


Forms = dict[tuple[Any, ...], tuple[str, str, int]]  # form_key -> (op name, pipe, cycles)
Pattern = tuple[int, tuple[int, ...], tuple[int, ...]]  # a copy's DDR offset, dims, strides
EVERYTHING = 1 << 62  # one past the last element of any tensor


_OWN_KEYS: dict[type[Instr], Callable[[Instr], tuple[Any, ...]]] = {}  # class -> its own_key
_new_ref = tuple.__new__  # a BufRef from its fields, without its __new__'s argument handling
# class -> its operands, written then read (`emit_local`)
_OPERANDS: dict[type[Instr], Callable[[Instr], tuple[Any, ...]]] = {}


def _read_span(instr: Instr, ref: DdrRef) -> tuple[str, int, int, Copy | None]:
    """The DDR tensor and element range an instruction reads through `ref`, and the copy
    whose pattern it is (a copy: its pattern; anything else, e.g. a gather's table: the
    whole tensor, no copy)."""
    if isinstance(instr, Copy) and instr.src is ref:
        return ref.key, ref.off, ref.off + pattern_extent(instr.dims, instr.src_strides), instr
    return ref.key, 0, EVERYTHING, None


@dataclass(slots=True)
class DdrTracker:
    """Program-wide record of which cores closed the writes of each DDR tensor.

    NOTE: a cross-core edge (src core, src node, dst core, dst node) orders a BARRIER that closed
    one core's writes before the import BARRIER of a core that reads the tensor. Writes are
    closed per element range (a layer's output, or a sub-batch slice of it): a read waits for
    the closes whose range it overlaps.
    """

    # key -> (core, node, first element, one past the last) of each close
    ready: dict[str, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    # (core, close node) -> the runs its writes cover, when every one is known (one core)
    written: dict[tuple[int, int], Written] = field(default_factory=dict)
    cross_edges: list[tuple[int, int, int, int]] = field(default_factory=list)
    onchip: dict[str, OnChip] = field(default_factory=dict)  # keys kept on chip (NoC handoff)


G = TypeVar("G", TileGraph, "TrialGraph")  # what a builder appends to: a trial's graph or a core's


class TileBuilder(Generic[G]):
    """Builds one core's TileGraph (or a trial's, `TrialGraph`) in lowering order with automatic
    dependency edges."""

    __slots__ = (
        "graph",
        "target",
        "core",
        "tracker",
        "layer",
        "_last_write",
        "_readers",
        "_imports",
        "_ddr_writers",
        "_gates",
        "_resident",
        "_views",
        "_forms",
        "_sizes",
    )

    def __init__(
        self,
        graph: G,
        target: Target,
        core: int = 0,
        tracker: DdrTracker | None = None,
        forms: Forms | None = None,
    ) -> None:
        self.graph: G = graph
        self.target = target
        self.core = core  # index of this core in the program
        self.tracker = tracker if tracker is not None else DdrTracker()
        self.layer = -1  # graph layer index stamped on every node added (TileNode.layer)
        self._last_write: dict[int, int] = {}  # buffer -> last node that wrote it
        self._readers: dict[int, list[int]] = {}  # buffer -> readers since the last write
        # (DDR tensor key, the closes it waits for) -> node its readers here wait for
        self._imports: dict[tuple[str, tuple[int, ...]], int] = {}
        # DDR tensor key -> (node, the runs it writes) of each write until closed; the runs
        # only on a one-core target (exact read deps: npucc.backend.lower.ddr_deps), None
        # elsewhere and for a write that is not a copy
        # DDR tensor -> its open writes: the writer node and, for a one-core copy, the pattern
        # it writes (its runs are worked out at the close: a trial's last writes never are)
        self._ddr_writers: dict[str, list[tuple[int, Pattern | None]]] = {}
        self._gates: dict[str, int] = {}  # key -> BARRIER its writes wait for (until closed)
        self._resident: dict[str, BufRef] = {}  # DDR tensor key -> L1 buffer holding it
        self._views: dict[str, BandView] = {}  # band key -> the rows of a DDR tensor it is
        # form_key -> `form`'s, on `target`: shared by the builders of one compile (`forms`)
        self._forms: Forms = {} if forms is None else forms
        self._sizes: dict[str, tuple[int, int]] = {}  # tier -> (bytes an element, alignment)

    def view(self, key: str, band: BandView) -> None:
        """Make copies through DDR key `key` reach the rows `band` of another DDR tensor."""
        self._views[key] = band

    def hold(self, key: str, elems: int) -> None:
        """Keep DDR tensor `key` (`elems` elements) in a new L1 buffer until `release`: its
        copies to and from DDR become copies to and from the buffer."""
        self._resident[key] = self.alloc("L1", elems, f"{key}.resident")

    def keep(self, key: str, ref: BufRef) -> None:
        """Hold DDR tensor `key` in L1 buffer `ref` (filled by the caller) until `release`."""
        self._resident[key] = ref

    def release(self, key: str) -> None:
        """Free the L1 buffer of resident tensor `key` after its last use."""
        self.free(self._resident.pop(key))

    def resident(self, key: str) -> BufRef | None:
        """The L1 buffer holding DDR tensor `key`, if it is resident."""
        return self._resident.get(key)

    def alloc(self, tier: str, elems: int, name: str = "") -> BufRef:
        """Allocate a buffer of `elems` elements in `tier` (size rounded up to the alignment)."""
        found = self._sizes.get(tier)
        if found is None:  # NOTE: the target is fixed: its figures are read once per tier
            found = self._sizes[tier] = self.target.tier_bytes(tier), self.target.memory.alignment
        per, align = found
        size = max(align, math.ceil(elems * per / align) * align)
        bid = self.graph.add_alloc(size, tier, name, self.layer)
        self._readers[bid] = []
        return _new_ref(BufRef, (bid, tier, 0, self.core))

    def free(self, ref: BufRef) -> None:
        """Free a buffer after every node that used it."""
        buf = ref.buf
        if ref.core != self.core or buf not in self._readers:
            self._own(ref)
        # NOTE: readers since the last write depend on it, so they alone imply it; each is
        # there once (a node joins a buffer's readers once, as it is added: ascending ids)
        self.graph.add_free(buf, self.layer, self._readers.pop(buf) or [self._last(buf)])

    def emit(self, instr: Instr) -> int:
        """Append an instruction (symbolic operands) and its dependency edges; returns its id.

        A read of a DDR tensor waits for the BARRIER that closed the tensor's writes. A copy
        through a band view is remapped to its tensor (one or more copies; the last one's id).
        """
        if type(instr) is not Copy and self._local(instr) is not None:
            # NOTE: every operand a buffer of this core: `emit_local`'s node and edges are
            # these (a vector fill, most of the vector ops that come here)
            return self.emit_local(instr)
        if type(instr) is Copy:
            if self._views:
                pieces = self._in_band(instr)
                if pieces is not None:
                    return [self.emit(piece) for piece in pieces][-1]
            # NOTE: residency first: a tensor this core holds in L1 is read there, even when the
            # mesh plan keeps it on chip (a staged constant the lowering holds, `stage_consts`)
            if self._resident:
                instr = self._in_l1(instr)
            if self.tracker.onchip:
                instr = self._over_noc(instr)
            if type(instr) is Copy:  # NOTE: the same node and edges as below, less per copy
                src, dst = instr.src, instr.dst
                if type(src) is DdrRef and type(dst) is BufRef:
                    return self._ddr_copy(instr, src, dst)
                if type(src) is BufRef and type(dst) is DdrRef:
                    return self._ddr_copy(instr, dst, src)
        # NOTE: one pass over the operands (not a comprehension per list: this runs for every
        # instruction of every lowering tried)
        readers, core = self._readers, self.core
        ddr: list[DdrRef] = []
        ddr_writes: list[DdrRef] = []
        read_bufs: list[int] = []
        write_bufs: list[int] = []
        foreign: list[BufRef] = []  # buffers of another core, or freed
        for name in instr.reads:
            ref = getattr(instr, name)
            if type(ref) is BufRef:
                read_bufs.append(ref.buf)
                if ref.core != core or ref.buf not in readers:
                    foreign.append(ref)
            elif type(ref) is DdrRef:
                ddr.append(ref)
        if (type(instr) is Mmad and instr.acc) or (type(instr) is VBinary and instr.accumulates):
            ref = instr.dst  # an accumulator is read too (a buffer)
            if type(ref) is BufRef:
                read_bufs.append(ref.buf)
                if ref.core != core or ref.buf not in readers:
                    foreign.append(ref)
        for name in instr.writes:
            ref = getattr(instr, name)
            if type(ref) is BufRef:
                write_bufs.append(ref.buf)
                if ref.core != core or ref.buf not in readers:
                    foreign.append(ref)
            elif type(ref) is DdrRef:
                ddr_writes.append(ref)
        if self._resident and (ddr or ddr_writes):
            for r in (*ddr, *ddr_writes):
                self._in_ddr(instr, r)
        for ref in foreign:
            self._own(ref)
        preds: list[int] = []
        for r in ddr:
            ready = self._ready(instr, r)
            if ready is not None:
                preds.append(ready)
        if len(write_bufs) == 1 and len(read_bufs) == 1:  # most instructions
            wb, rb = write_bufs[0], read_bufs[0]
            bufs: tuple[int, ...] = (wb,) if rb == wb else (wb, rb)
        else:  # each once, in first-seen order (a few: a list, not a dict)
            seen: list[int] = []
            for b in (*write_bufs, *read_bufs):
                if b not in seen:
                    seen.append(b)
            bufs = tuple(seen)
        graph = self.graph
        own = _OWN_KEYS.get(type(instr))  # NOTE: `form` inlined where it knows the form
        found = None if own is None else self._forms.get(own(instr))
        op, pipe, cycles = self.form(instr) if found is None else found
        last_write, alloc_of = self._last_write, graph.alloc_of
        for b in bufs:
            if b in write_bufs and readers[b]:
                preds.extend(readers[b])
            else:
                last = last_write.get(b)  # NOTE: node ids are >= 0: None is no write yet
                preds.append(alloc_of[b] if last is None else last)
        # NOTE: a TileGraph drops the repeats (and keeps `preds`, the node's own list)
        node_id = graph.append(op, pipe, cycles, bufs, instr, self.layer, preds)
        for b in bufs:
            if b in write_bufs:
                last_write[b] = node_id
                readers[b] = []
            else:
                readers[b].append(node_id)
        for ref in ddr_writes:
            self._wrote(instr, ref, node_id, preds)
        return node_id

    def _ddr_copy(self, instr: Copy, ddr: DdrRef, ref: BufRef) -> int:
        """`emit` of a copy between DDR (`ddr`) and a buffer of this core (`ref`), a load
        (writes the buffer) or a store (reads it): its node and edges."""
        readers = self._readers
        if self._resident:
            self._in_ddr(instr, ddr)
        buf = ref.buf
        if ref.core != self.core or buf not in readers:
            self._own(ref)
        load = ddr is instr.src
        ready = self._ready(instr, ddr) if load else None
        own = _OWN_KEYS.get(Copy)  # NOTE: `form` inlined, as `emit`'s
        found = None if own is None else self._forms.get(own(instr))
        op, pipe, cycles = self.form(instr) if found is None else found
        before: list[int] = readers[buf]
        if load and before:
            preds = before if ready is None else [ready, *before]
        else:
            last = self._last_write.get(buf)
            preds = [self.graph.alloc_of[buf] if last is None else last]
            if ready is not None:
                preds.insert(0, ready)
        # NOTE: a TileGraph drops the repeats (a load's import node may have read `buf`)
        node_id = self.graph.append(op, pipe, cycles, (buf,), instr, self.layer, preds)
        if load:
            self._last_write[buf] = node_id
            readers[buf] = []
        else:
            before.append(node_id)
            self._wrote(instr, ddr, node_id, preds)
        return node_id

    def _in_ddr(self, instr: Instr, ref: DdrRef) -> None:
        """Check that `instr` reaches no tensor this core holds in L1 (`hold`) in DDR."""
        if ref.key in self._resident:
            raise AssertionError(f"{instr.opcode} reaches a resident tensor in DDR")

    def _ready(self, instr: Instr, ref: DdrRef) -> int | None:
        """The node `instr`'s read of DDR through `ref` waits for (`_import`), None: none."""
        key, lo, hi, copy = _read_span(instr, ref)
        if key in self._ddr_writers:
            raise ValueError(f"DDR tensor {key!r} read before its writes were closed")
        return self._import(key, lo, hi, copy)

    def _wrote(self, instr: Instr, ref: DdrRef, node: int, preds: list[int]) -> None:
        """Record node `node` (of `instr`, its predecessors `preds`) as a write of DDR through
        `ref`, open until `close_ddr`; a gate of the tensor comes before it."""
        key = ref.key
        self._ddr_writers.setdefault(key, []).append((node, self._written(instr, ref)))
        gate = self._gates.get(key)
        if gate is not None and gate not in preds:
            self.graph.add_edge(gate, node)

    def emit_local(self, instr: Instr, form: tuple[str, str, int] | None = None) -> int:
        """`emit` of an instruction that writes one buffer of this core and reads buffers of
        this core only, if any (an img2col, an L1 -> L0 copy, an mmad, a fill); `emit` itself
        for any other.
        `form`: its `form`, when the caller has it (a loop of instructions apart only in their
        operands' buffers and offsets, which no form reads: `instr_form.form_key`).

        NOTE: the same node and edges as `emit` (no DDR side: no band view, NoC copy, resident
        tensor, import or DDR write; an accumulator read is its write's buffer, which `emit`
        lists once, as written): the cube lowerings' inner loops, most of their nodes."""
        refs = self._local(instr)
        if refs is None:
            return self.emit(instr)
        readers = self._readers
        written = refs[0].buf
        if len(refs) == 2:
            read = refs[1].buf
            bufs: tuple[int, ...] = (written,) if read == written else (written, read)
        elif len(refs) == 3:  # NOTE: `dict.fromkeys`' order, spelled out (a vector op, an mmad)
            a, b = refs[1].buf, refs[2].buf
            if a == written:
                bufs = (written,) if b == written else (written, b)
            else:
                bufs = (written, a) if b == written or b == a else (written, a, b)
        else:
            bufs = tuple(dict.fromkeys(ref.buf for ref in refs))
        if form is None:
            own = _OWN_KEYS.get(type(instr))
            found = None if own is None else self._forms.get(own(instr))
            form = self.form(instr) if found is None else found
        op, pipe, cycles = form
        graph = self.graph
        last_write, alloc_of = self._last_write, graph.alloc_of
        preds = readers[written]  # NOTE: the readers' list itself: `written`'s gets a new one
        if not preds:
            last = last_write.get(written)
            preds = [alloc_of[written] if last is None else last]
        # NOTE: `append`'s list, each node once in first-seen order: the readers are distinct
        # (`free`), so only a read buffer's last writer can repeat one
        for b in bufs[1:]:
            last = last_write.get(b)
            if last is None:
                last = alloc_of[b]
            if last not in preds:
                preds.append(last)
        node_id = graph.append(op, pipe, cycles, bufs, instr, self.layer, preds, True)
        last_write[written] = node_id
        readers[written] = []
        for b in bufs[1:]:
            readers[b].append(node_id)
        return node_id

    def _local(self, instr: Instr) -> tuple[Any, ...] | None:
        """The operands of an instruction that writes one buffer and reads any others, the
        written one first, when each is a buffer of this core (checked: not freed); None:
        `emit`'s."""
        cls = type(instr)
        get = _OPERANDS.get(cls)
        if get is None:
            names = (*instr.writes, *instr.reads)
            if len(instr.writes) != 1 or cls is HostOp:  # NOTE: a host op's names are its own
                return None
            get = _OPERANDS[cls] = fields_getter(names)
        refs = get(instr)
        readers, core = self._readers, self.core
        for ref in refs:
            if type(ref) is not BufRef:
                return None
            if ref.core != core or ref.buf not in readers:
                self._own(ref)
        return refs

    def emit_run(self, make: Callable[[int], Instr], count: int) -> None:
        """`emit_local` of `make(0)`, ..., `make(count - 1)`: a run of instructions of one form
        (apart in their operands' offsets only: taps accumulating into one buffer).

        NOTE: where they write a buffer none of them reads, each after the first has the same
        predecessors but the one before (the reads' last writers): worked out once, and each
        instruction's buffers checked to be the first's."""
        if count <= 0:
            return
        instr = make(0)
        form = self.form(instr)
        node = self.emit_local(instr, form)
        run = self._run_buffers(instr)
        if run is None:
            for i in range(1, count):
                self.emit_local(make(i), form)
            return
        get, graph, layer, readers = _OPERANDS[type(instr)], self.graph, self.layer, self._readers
        written = run[0]
        reads: list[int] = list(dict.fromkeys(run[1:]))
        bufs = (written, *reads)  # `emit_local`'s node's
        last_write, alloc_of = self._last_write, graph.alloc_of
        # NOTE: each once (`append`'s order), none the run's node before: they were last
        # written before its first node (which writes `written` alone, no read buffer)
        last = [alloc_of[b] if last_write.get(b) is None else last_write[b] for b in reads]
        tail: list[int] = list(dict.fromkeys(last))
        op, pipe, cycles = form
        first = node
        append = graph.append
        for i in range(1, count):
            instr = make(i)
            if [ref.buf for ref in get(instr)] != run:
                raise AssertionError(f"a run's instruction {i} on other buffers than its first")
            node = append(op, pipe, cycles, bufs, instr, layer, [node, *tail], True)
        last_write[written] = node
        for b in reads:
            readers[b].extend(range(first + 1, node + 1))

    @staticmethod
    def _run_buffers(instr: Instr) -> list[int] | None:
        """The buffers of an instruction `emit_local` emitted, the one it writes first (each
        operand's); None if it went through `emit`, or if it reads the buffer it writes."""
        get = _OPERANDS.get(type(instr))
        refs = None if get is None else get(instr)
        if refs is None or any(type(r) is not BufRef for r in refs):
            return None
        bufs = [r.buf for r in refs]
        return None if bufs[0] in bufs[1:] else bufs

    def form(self, instr: Instr) -> tuple[str, str, int]:
        """The trace op name, pipe and cycles of `instr`, worked out once per form."""
        cls = type(instr)
        if cls is HostOp:
            return node_op_name(instr), instr_pipe(instr), instr_cycles(self.target, instr)
        own = _OWN_KEYS.get(cls)
        if own is None:
            own = _OWN_KEYS[cls] = instr_fields(cls).own_key
        key = own(instr)
        found = self._forms.get(key)
        if found is None:
            found = node_op_name(instr), instr_pipe(instr), instr_cycles(self.target, instr)
            self._forms[key] = found
        return found

    def _in_band(self, instr: Copy) -> list[Copy] | None:
        """The copies of `instr` on whole tensors when a side is a band view (None: neither)."""
        src, dst = instr.src, instr.dst
        src_view = self._views.get(src.key) if isinstance(src, DdrRef) else None
        dst_view = self._views.get(dst.key) if isinstance(dst, DdrRef) else None
        if src_view is None and dst_view is None:
            return None
        if isinstance(src, MemRef) or isinstance(dst, MemRef) or (src_view and dst_view):
            raise AssertionError("a band view copied from or into another band view or memory")
        if src_view is not None:
            pieces = src_view.remap(src.off, instr.dims, instr.src_strides, 0, instr.dst_strides)
            return [Copy(dst.at(o), DdrRef(src_view.key, w), dims, ost, st)
                    for w, dims, st, o, ost in pieces]  # fmt: skip
        assert dst_view is not None
        pieces = dst_view.remap(dst.off, instr.dims, instr.dst_strides, 0, instr.src_strides)
        return [Copy(DdrRef(dst_view.key, w), src.at(o), dims, st, ost)
                for w, dims, st, o, ost in pieces]  # fmt: skip

    def _over_noc(self, instr: Copy) -> Copy:
        """The copy as a NoC transfer when its DDR side is a tensor kept on chip."""
        side = instr.src if isinstance(instr.src, DdrRef) else instr.dst
        if not isinstance(side, DdrRef) or side.key not in self.tracker.onchip:
            return instr
        strides = instr.src_strides if side is instr.src else instr.dst_strides
        lo = side.off
        hi = lo + pattern_extent(instr.dims, strides)
        cols = self.target.mesh.cols
        here = (self.core // cols, self.core % cols)
        hops = self.tracker.onchip[side.key].hops(here, lo, hi)
        return NocCopy(instr.dst, instr.src, instr.dims, instr.dst_strides, instr.src_strides, hops)

    def _in_l1(self, instr: Copy) -> Copy:
        """The copy with its resident DDR side replaced by that tensor's L1 buffer.

        NOTE: L1 -> L1 has no data path: a lowering that stages a resident tensor in L1 reads
        it in place instead (and does not list that input in `lowering(onchip=...)`)."""
        src, dst = instr.src, instr.dst
        if isinstance(src, DdrRef) and src.key in self._resident:
            src = self._resident[src.key].at(src.off)
        if isinstance(dst, DdrRef) and dst.key in self._resident:
            dst = self._resident[dst.key].at(dst.off)
        if src is instr.src and dst is instr.dst:
            return instr
        if src.tier == dst.tier == "L1":
            raise AssertionError("a copy of a resident tensor from or into L1")
        return Copy(dst, src, instr.dims, instr.dst_strides, instr.src_strides)

    def _own(self, ref: BufRef) -> None:
        if ref.core != self.core or ref.buf not in self._readers:
            raise ValueError(
                f"buffer b{ref.buf} of core {ref.core} used on core {self.core} or after its FREE"
            )

    def _last(self, buf: int) -> int:
        """The node that last wrote `buf`, or its ALLOC."""
        return self._last_write.get(buf, self.graph.alloc_of[buf])

    def _written(self, instr: Instr, ref: DdrRef) -> Pattern | None:
        """The pattern (offset, dims, strides) `instr` writes through `ref` on a one-core
        target, whose runs are kept (None: on a mesh, or not a copy)."""
        if self.target.cores == 1 and isinstance(instr, Copy) and instr.dst is ref:
            return ref.off, instr.dims, instr.dst_strides
        return None

    def _import(self, key: str, lo: int, hi: int, copy: Copy | None = None) -> int | None:
        """The node after which this core may read elements [lo, hi) of DDR tensor `key`
        (through `copy`'s source pattern, if a copy; None: ready at start)."""
        closes = self.tracker.ready.get(key, ())
        producers = [(core, node) for core, node, a, b in closes if a < hi and lo < b]
        if not producers:
            return None
        written = self.tracker.written
        if copy is not None and all((c, n) in written for c, n in producers):
            runs = pattern_runs(lo, copy.dims, copy.src_strides)
            return self._after_writers(key, runs, [written[p] for p in producers])
        memo = (key, tuple(node for _, node in producers))
        if memo in self._imports:
            return self._imports[memo]
        if producers == [(self.core, producers[0][1])]:
            node = producers[0][1]
        else:
            node = self._after(producers)
        self._imports[memo] = node
        return node

    def by_channels(self, ref: DdrRef, channels: int, plane: int) -> bool:
        """Whether this core wrote the `channels` planes of `plane` elements at `ref` channel
        group after channel group (ddr_deps.by_channels; False unless every write is known)."""
        closes = [
            self.tracker.written.get((core, node))
            for core, node, _, _ in self.tracker.ready.get(ref.key, ())
            if core == self.core
        ]
        known = [w for w in closes if w is not None]
        if not closes or len(known) < len(closes):
            return False
        return by_channels(known, ref.off, channels, plane)

    def _after_writers(self, key: str, runs: Runs, closes: list[Written]) -> int | None:
        """The node after the writes (of this core) that a read of `runs` of `key` overlaps:
        the one writer, or a BARRIER after several (one per distinct set); None: no write."""
        if len(closes) == 1:  # NOTE: `writers` gives them ascending, each once
            nodes = closes[0].writers(runs)
        else:
            nodes = sorted({n for w in closes for n in w.writers(runs)})
        if len(nodes) <= 1:
            return nodes[0] if nodes else None
        memo = (key, tuple(nodes))
        if memo not in self._imports:
            barrier = self.graph.add("BARRIER", None, 0, (), layer=self.layer)
            for n in nodes:
                self.graph.add_edge(n, barrier)
            self._imports[memo] = barrier
        return self._imports[memo]

    def _after(self, closes: list[tuple[int, int]]) -> int:
        """A BARRIER here after the BARRIERs `closes` (core, node) of this or other cores.

        NOTE: of another core's closes only its latest gets an edge: a core's BARRIERs are
        chained in lowering order (`sync_points.order_sync_points`), so that one finishes
        after the rest.
        A mesh sub-batch's gate waits for the reads of every earlier sub-batch on each core
        (SqueezeNet b16 on mesh8x8: 6.33 M cross-core edges, 350 k of them needed).
        """
        node = self.graph.add("BARRIER", None, 0, (), layer=self.layer)
        latest: dict[int, int] = {}
        for core, barrier in closes:
            if core == self.core:
                self.graph.add_edge(barrier, node)
            elif latest.get(core, -1) < barrier:
                latest[core] = barrier
        self.tracker.cross_edges += [(core, b, self.core, node) for core, b in latest.items()]
        return node

    def gate(self, key: str, closes: list[tuple[int, int]]) -> None:
        """Make this core's writes of `key`, until closed, wait for the BARRIERs `closes`
        (core, node): the reads of the slot they overwrite are done."""
        self._gates[key] = self._after(closes)

    def close_ddr(self, key: str, lo: int = 0, hi: int = EVERYTHING) -> tuple[int, int] | None:
        """Mark this core's writes of elements [lo, hi) of DDR tensor `key` complete: readers
        of them wait for a BARRIER; (core, that BARRIER), None without writes."""
        self._gates.pop(key, None)
        writers = self._ddr_writers.pop(key, [])
        if not writers:
            return None
        barrier = self.graph.add("BARRIER", None, 0, (), layer=self.layer)
        for w, _ in writers:
            self.graph.add_edge(w, barrier)
        self.tracker.ready.setdefault(key, []).append((self.core, barrier, lo, hi))
        known = [(w, p) for w, p in writers if p is not None]
        if len(known) == len(writers):
            runs = [(w, pattern_runs(*p)) for w, p in known]
            self.tracker.written[self.core, barrier] = Written.of(runs)
        return self.core, barrier

    def open_buffers(self) -> list[int]:
        """Buffers allocated and not yet freed (must be empty when lowering ends)."""
        return sorted(self._readers)

    def state(self) -> tuple[dict[Any, Any], ...]:
        """Copies of what the builder keeps between instructions (for `resumed`; the last
        writers of the buffers not yet freed: a freed one's is never read again)."""
        readers, last_write = self._readers, self._last_write
        return (
            {b: last_write[b] for b in readers if b in last_write},
            {b: list(r) for b, r in readers.items()},
            dict(self._imports),
            {k: list(w) for k, w in self._ddr_writers.items()},
            dict(self._gates),
            dict(self._resident),
            dict(self._views),
            self._forms,  # NOTE: a cache of pure results, shared
        )

    @classmethod
    def resumed(
        cls,
        graph: TileGraph,
        target: Target,
        core: int,
        tracker: DdrTracker,
        state: tuple[dict[Any, Any], ...],
    ) -> TileBuilder[TileGraph]:
        """A builder of `graph` continuing from `state` (of `state()`, copied again: one state
        may start several builders)."""
        last_write, readers, imports, writers, gates, resident, views, forms = state
        out: TileBuilder[TileGraph] = TileBuilder(graph, target, core, tracker, forms)
        out._last_write = dict(last_write)
        out._readers = {b: list(r) for b, r in readers.items()}
        out._imports = dict(imports)
        out._ddr_writers = {k: list(w) for k, w in writers.items()}
        out._gates = dict(gates)
        out._resident = dict(resident)
        out._views = dict(views)
        return out


class MeshBuilder:
    """TileBuilder's API over several cores: each call goes to the current core's builder.

    A layer's lowering marks each independent output tile with `LowerContext.tile()`, which
    moves to the next core of the layer's group; buffers never cross cores (checked).
    """

    __slots__ = ("builders", "_current", "alloc", "free", "emit", "emit_local", "emit_run", "form")

    def __init__(self, builders: list[TileBuilder]) -> None:
        self.builders = builders  # one per core, in program order
        # NOTE: the current core's `alloc`, `free` and `emit` are its builder's own bound
        # methods, rebound as `current` moves: no call through this one per instruction
        self.alloc: Callable[..., BufRef]  # alloc(tier, elems, name=""): on the current core
        self.free: Callable[[BufRef], None]  # free a buffer of the current core
        self.emit: Callable[[Instr], int]  # append an instruction to the current core
        # ... of its buffers only (TileBuilder's; with the instruction's `form`, if known)
        self.emit_local: Callable[..., int]
        self.emit_run: Callable[[Callable[[int], Instr], int], None]  # a run: TileBuilder's
        self.form: Callable[[Instr], tuple[str, str, int]]  # an instruction's (TileBuilder's)
        self._current = -1
        self.current = 0  # index into builders

    @property
    def current(self) -> int:
        """The index of the core the calls go to."""
        return self._current

    @current.setter
    def current(self, index: int) -> None:
        if index != self._current:  # NOTE: a layer's every tile sets it (one core: the same)
            builder = self.builders[index]
            self._current = index
            self.alloc, self.free, self.emit = builder.alloc, builder.free, builder.emit
            self.emit_local, self.emit_run = builder.emit_local, builder.emit_run
            self.form = builder.form

    @property
    def target(self) -> Target:
        """The target of every core."""
        return self.builders[0].target

    def set_layer(self, index: int) -> None:
        """Stamp the nodes added from now on, on every core, with graph layer `index`."""
        for builder in self.builders:
            builder.layer = index

    def hold(self, key: str, elems: int) -> None:
        """Keep DDR tensor `key` in an L1 buffer of the current core (TileBuilder.hold)."""
        self.builders[self.current].hold(key, elems)

    def keep(self, key: str, ref: BufRef) -> None:
        """Hold `key` in L1 buffer `ref` of the current core (TileBuilder.keep)."""
        self.builders[self.current].keep(key, ref)

    def release(self, key: str) -> None:
        """Free the current core's L1 buffer of resident tensor `key`."""
        self.builders[self.current].release(key)

    def resident(self, key: str) -> BufRef | None:
        """The current core's L1 buffer holding `key`, if resident."""
        return self.builders[self.current].resident(key)

    def by_channels(self, ref: DdrRef, channels: int, plane: int) -> bool:
        """Whether the current core wrote `ref`'s planes by channel groups (TileBuilder's)."""
        return self.builders[self.current].by_channels(ref, channels, plane)

    def view(self, key: str, band: BandView) -> None:
        """Make the current core's copies through `key` reach `band` (TileBuilder.view)."""
        self.builders[self.current].view(key, band)

    def gate(self, key: str, closes: list[tuple[int, int]], cores: tuple[int, ...]) -> None:
        """Make the writes of `key` on `cores`, until closed, wait for the BARRIERs `closes`."""
        for core in cores:
            self.builders[core].gate(key, closes)

    def close_ddr(self, key: str, lo: int = 0, hi: int = EVERYTHING) -> list[tuple[int, int]]:
        """Close the writes of elements [lo, hi) of `key` on every core that wrote them; the
        (core, BARRIER) closes."""
        closes = (builder.close_ddr(key, lo, hi) for builder in self.builders)
        return [c for c in closes if c is not None]

    def open_buffers(self) -> list[int]:
        """Buffers left open on any core."""
        return [b for builder in self.builders for b in builder.open_buffers()]
