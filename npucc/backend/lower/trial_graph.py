"""The graph of a trial lowering: of its nodes only what the trial's cost reads.

A lowering tried on a fresh context (`memo.fresh`: a depthwise conv's cube shares, a fused
expand and depthwise pair) reaches no output; what is read of it is its `flow` and each pipe's
busy cycles. Its builder (TrialBuilder: TileBuilder's edges, no ALLOC or FREE node) appends
to a TrialGraph, which times each node as it comes (`target.timing.in_order`'s rule: lowering
order, in-order pipes) and keeps its finish: no node objects, no edge lists (MobileNet v2 tries
~100 k nodes a compile).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from npucc.backend.lower.builder import Forms, TileBuilder
from npucc.ir.isa import BufRef, Instr
from npucc.ir.tiled import Buffer
from npucc.target import Target

_new_ref = tuple.__new__  # a BufRef from its fields (as builder.py's `alloc` makes them)


class TrialGraph:
    """TileGraph's building methods (`add_buffer`, `add`, `add_edge(s)`, `alloc_of`) keeping
    each node's finish in lowering order and each pipe's busy cycles; `new_buffer` for a
    TrialBuilder's buffers (no Buffer object).

    NOTE: an edge's head is the newest node (the builder adds a node's predecessors before the
    next node), so a node is timed once the next one comes: its start is its predecessors'
    latest finish, no earlier than its pipe is free (`in_order`; tests/lower/test_trial_graph
    checks `flow` against it on a TileGraph).
    """

    __slots__ = ("name", "made", "alloc_of", "finish", "_pipe", "_cycles", "_ready",
                 "_free", "_busy", "_flow")  # fmt: skip

    def __init__(self, name: str = "trial") -> None:
        self.name = name
        self.made = 0  # buffers made so far (none kept: no flow or busy cycles read them)
        self.alloc_of: dict[int, int] = {}  # buffer id -> its ALLOC node id
        self.finish: list[int] = []  # each node's finish (the newest's: 0 until the next comes)
        self._pipe: str | None = None  # the newest node's pipe and cycles
        self._cycles = 0
        self._ready = 0  # the latest finish among the newest node's predecessors so far
        self._free: dict[str, int] = {}  # each pipe's free time before the newest node
        self._busy: dict[str, int] = {}  # each pipe's busy cycles before the newest node
        self._flow = 0  # the latest finish before the newest node

    def add_buffer(self, size: int, tier: str, name: str = "") -> Buffer:
        """Create a buffer (TileGraph.add_buffer; not kept)."""
        bid = self.made
        self.made = bid + 1
        return Buffer(bid, size, tier, name)

    def new_buffer(self) -> int:
        """A new buffer's id, its ALLOC the graph's first node (`TrialBuilder`): no flow or
        busy cycles read a buffer's size, tier or name."""
        bid = self.made
        self.made = bid + 1
        self.alloc_of[bid] = 0
        return bid

    def add(
        self,
        op: str,
        pipe: str | None,
        cycles: int,
        bufs: tuple[int, ...],
        instr: Instr | None = None,
        layer: int = -1,
    ) -> int:
        """Append a node (TileGraph.add: an ALLOC registers as its buffer's); its id. The
        node before it is timed now."""
        finish = self.finish
        if finish:  # NOTE: `_end` inlined (this runs for every node tried)
            end, last = self._ready, self._pipe
            if last is not None:
                free = self._free.get(last, 0)
                end = (end if end > free else free) + self._cycles
                self._free[last] = end
                self._busy[last] = self._busy.get(last, 0) + self._cycles
            finish[-1] = end
            if end > self._flow:
                self._flow = end
        v = len(finish)
        finish.append(0)
        self._pipe, self._cycles, self._ready = pipe, cycles, 0
        if op == "ALLOC":
            self.alloc_of[bufs[0]] = v
        return v

    def wait(self, ready: int) -> None:
        """Make the newest node start no earlier than `ready` (`add_edges` from predecessors
        whose latest finish is `ready`, worked out by the caller: `TrialBuilder.emit_local`)."""
        if ready > self._ready:
            self._ready = ready

    def repeat(self, count: int) -> int:
        """Append `count` nodes of the newest one's pipe and cycles, each a successor of the
        one before (no other predecessor finishing later: `TrialBuilder.emit_run`); the
        last's id.

        NOTE: on a pipe, each node after the first of the run starts when the one before
        finishes (its one predecessor, the last on that pipe): the run's finishes step by its
        cycles, written at once (the node by node `add`s gave the same)."""
        finish, pipe, cycles = self.finish, self._pipe, self._cycles
        if count <= 0 or pipe is None or not finish:
            for _ in range(count):
                v = self.add("", pipe, cycles, ())
                self._ready = finish[v - 1]
            return len(finish) - 1
        self.add("", pipe, cycles, ())  # times the run's first node
        end = finish[-2]
        last = end + cycles * (count - 1)  # the finish of the newest node's predecessor
        finish[-1:] = range(end + cycles, last + 1, cycles) if cycles else [end] * (count - 1)
        finish.append(0)
        self._free[pipe] = last
        self._busy[pipe] += cycles * (count - 1)
        if last > self._flow:
            self._flow = last
        self._ready = last
        return len(finish) - 1

    def _end(self) -> int:
        """The newest node's finish (were no more predecessors added)."""
        t = self._ready
        if self._pipe is None:
            return t
        free = self._free.get(self._pipe, 0)
        return (t if t > free else free) + self._cycles

    def append(
        self,
        op: str,
        pipe: str | None,
        cycles: int,
        bufs: tuple[int, ...],
        instr: Instr | None,
        layer: int,
        preds: list[int],
        distinct: bool = False,
    ) -> int:
        """`add`, then `add_edges(preds, ...)` (TileGraph.append; a repeat changes nothing
        here, `distinct` or not); its id."""
        v = self.add(op, pipe, cycles, bufs, instr, layer)
        self.add_edges(preds, v)
        return v

    def add_alloc(self, size: int, tier: str, name: str, layer: int) -> int:
        """`add_buffer` and its ALLOC node (TileGraph.add_alloc); the buffer's id."""
        bid = self.add_buffer(size, tier, name).id
        self.add("ALLOC", None, 0, (bid,), None, layer)
        return bid

    def add_free(self, buf: int, layer: int, preds: list[int]) -> None:
        """`append` of buffer `buf`'s FREE node (TileGraph.add_free)."""
        self.append("FREE", None, 0, (buf,), None, layer, preds)

    def add_edge(self, src: int, dst: int) -> None:
        """Add precedence src -> dst (self-edges are ignored)."""
        self.add_edges((src,), dst)

    def add_edges(self, srcs: Iterable[int], dst: int) -> None:
        """Add precedence src -> dst from each of `srcs` (a self-edge or a repeat changes
        nothing: the newest node's finish is 0 until it is timed)."""
        finish = self.finish
        if dst != len(finish) - 1:
            raise AssertionError(f"an edge into node {dst}, not the newest of a trial graph")
        ready = self._ready
        for src in srcs:
            if finish[src] > ready:
                ready = finish[src]
        self._ready = ready

    def flow(self) -> int:
        """The makespan of the nodes run in lowering order on in-order pipes (`context.flow`)."""
        if not self.finish:
            return 0
        end = self._end()
        return end if end > self._flow else self._flow

    def busy(self) -> int:
        """The busiest pipe's cycles."""
        busy = dict(self._busy)
        if self.finish and self._pipe is not None:
            busy[self._pipe] = busy.get(self._pipe, 0) + self._cycles
        return max(busy.values(), default=0)


class TrialBuilder(TileBuilder[TrialGraph]):
    """A TileBuilder of a trial lowering's graph (`memo.fresh`): no ALLOC or FREE nodes, every
    buffer's first reader or writer waiting for the graph's first node instead (a pipe-less
    node of no predecessors, added here: its finish is 0, as an ALLOC's).

    NOTE: the same `flow` and busiest pipe as TileBuilder's nodes give: an ALLOC's finish is 0
    (no pipe, no predecessors); a FREE is no node's predecessor (no id of it is kept) and
    finishes with its latest predecessor, which the flow already counts; neither has a pipe."""

    __slots__ = ()

    def __init__(self, graph: TrialGraph, target: Target, forms: Forms | None = None) -> None:
        super().__init__(graph, target, forms=forms)
        if graph.finish:
            raise AssertionError("a trial builder starts on an empty trial graph")
        graph.add("START", None, 0, ())  # node 0: what a buffer's ALLOC would be

    def alloc(self, tier: str, elems: int, name: str = "") -> BufRef:
        """`TileBuilder.alloc` without its ALLOC node, nor a Buffer (`TrialGraph.new_buffer`:
        no size, tier or name, which no flow or busy cycles read)."""
        bid = self.graph.new_buffer()
        self._readers[bid] = []
        return _new_ref(BufRef, (bid, tier, 0, self.core))

    def free(self, ref: BufRef) -> None:
        """`TileBuilder.free` without its FREE node."""
        self._own(ref)
        del self._readers[ref.buf]

    def emit_local(self, instr: Instr, form: tuple[str, str, int] | None = None) -> int:
        """`TileBuilder.emit_local` on a trial graph: the same node, its predecessors' latest
        finish passed to it (`TrialGraph.wait`) instead of their list.

        NOTE: every buffer's ALLOC is node 0 here, whose finish is 0: a buffer not yet written
        adds nothing to the node's start (tests/lower/test_trial_graph checks the finishes
        against a TileGraph's)."""
        refs = self._local(instr)
        if refs is None:
            return self.emit(instr)
        if len(refs) > 3:
            return super().emit_local(instr, form)
        if form is None:
            form = self.form(instr)
        readers, graph = self._readers, self.graph
        node_id = graph.add(form[0], form[1], form[2], ())
        finish, last_write = graph.finish, self._last_write
        written = refs[0].buf
        ready = 0
        before = readers[written]
        if before:
            for p in before:
                if finish[p] > ready:
                    ready = finish[p]
            readers[written] = []
        else:
            last = last_write.get(written)
            if last is not None:
                ready = finish[last]
        last_write[written] = node_id
        seen = written
        for ref in refs[1:]:
            b = ref.buf
            if b == written or b == seen:  # NOTE: each buffer once (`emit_local`'s `bufs`)
                continue
            seen = b
            last = last_write.get(b)
            if last is not None and finish[last] > ready:
                ready = finish[last]
            readers[b].append(node_id)
        graph.wait(ready)
        return node_id

    def emit_run(self, make: Callable[[int], Instr], count: int) -> None:
        """`TileBuilder.emit_run` on a trial graph: of a run whose instructions write a buffer
        none of them reads, only the first is made; each later one waits for the one before
        alone (the last writer of the buffer it writes; the buffers it reads were last
        written before the run began), on the same pipe (`TrialGraph.repeat`).

        NOTE: the readers of a buffer the run reads are kept as the first and the last of the
        run: a later write waits for their latest finish, the last's (a chain)."""
        if count <= 0:
            return
        instr = make(0)
        self.emit_local(instr)
        run = self._run_buffers(instr)
        if run is None:
            for i in range(1, count):
                self.emit_local(make(i))
            return
        written, reads = run[0], dict.fromkeys(run[1:])
        last = self.graph.repeat(count - 1)
        self._last_write[written] = last
        for b in reads:
            self._readers[b].append(last)
