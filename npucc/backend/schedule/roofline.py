"""The roofline of a program: how far its makespan is from the least any program could take.

The one home of the bounds' composition; the formulas are `npucc.target.cost`'s
(`cube_bound`, `vector_bound`, `ddr_bound`). For a compiled program the work is the model's
(`TiledProgram.layers`: MACs without zero blocks, least vector elements, each weight once,
graph inputs and outputs) and the usage is its schedule's; for a bare command stream
(`npucc run`, `npucc report`) both come from the stream: its cube MACs and vector elements as
issued, its constants, inputs and outputs. See docs/roofline.md.

    compute    = max(cube MACs / (m0 n0 k0 x cores), vector elements / (lanes x cores))
    memory     = least DDR bytes over the DDR bandwidth (cost.ddr_bound: on a mesh, the
                 one DDR channel the cores share)
    noc        = the program's NoC bytes over every core's links (cost.noc_bound; 0 on one core)
    bound      = max(compute, memory, noc)       efficiency = bound / makespan
    pipe       = the busiest pipe of any core, as scheduled (this program's own floor)
    DRAM ratio = DDR bytes moved (reads + writes, spills included) / least DDR bytes
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from npucc.ir.isa import (
    DDR,
    PIPES,
    Copy,
    Gather,
    Instr,
    Mmad,
    Spill,
    vector_elements,
)
from npucc.ir.isa_cost import ddr_bytes, instr_cycles, noc_bytes
from npucc.ir.program import TiledProgram
from npucc.ir.replay import Replay
from npucc.ir.scheduled_program import ScheduledProgram
from npucc.ir.stream import Stream
from npucc.ir.tiled import TileNode
from npucc.target import Target
from npucc.target.cost import cube_bound, ddr_bound, noc_bound, vector_bound

# NOTE: a core's moving nodes (`node_traffic`): (id, DDR bytes, read?, NoC read, NoC written)
Traffic = list[tuple[int, int, bool, int, int]]


@dataclass(frozen=True, slots=True)
class Work:
    """The least work of a model: MACs, vector elements, DDR bytes to read and to write."""

    macs: int
    vector: int
    read: int  # bytes: each weight once, the graph inputs
    write: int  # bytes: the graph outputs


@dataclass(slots=True)
class Usage:
    """What a program spends: its makespan, busy cycles per pipe, DDR bytes it moves."""

    makespan: int
    busy: dict[str, int] = field(default_factory=dict)  # pipe -> the busiest core's cycles
    read: int = 0  # DDR bytes read
    write: int = 0  # DDR bytes written
    noc_read: int = 0  # bytes read from on-chip homes over the NoC
    noc_write: int = 0  # bytes written to them

    def count(self, nbytes: int, reads: bool, noc_read: int, noc_write: int) -> None:
        """Add a node's DDR bytes (`nbytes`, a read or not) and its NoC bytes."""
        if reads:
            self.read += nbytes
        else:
            self.write += nbytes
        self.noc_read += noc_read
        self.noc_write += noc_write


@dataclass(frozen=True, slots=True)
class Roofline:
    """A program's bounds, efficiency and DRAM traffic against its model's least work."""

    makespan: int
    bound: int  # max(compute, memory, noc)
    bound_by: str  # compute | memory | noc
    efficiency: float  # bound / makespan (1.0 for an empty program)
    compute: int  # max(cube, vector)
    cube: int
    vector: int
    memory: int
    noc: int  # the program's NoC floor (its NoC bytes over every core's links)
    pipe: int  # busy cycles of the busiest pipe of any core, as scheduled
    pipe_name: str
    macs: int
    min_ddr_bytes: int
    ddr_bytes: int  # moved, reads and writes
    ddr_read: int  # of which read
    ddr_write: int  # of which written
    ddr_ratio: float | None  # ddr_bytes / min_ddr_bytes (None when the minimum is 0)
    noc_bytes: int  # moved over the NoC, reads and writes
    busy: dict[str, int]  # pipe -> busy cycles of its busiest core

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (Program.stats["roofline"])."""
        return asdict(self)

    def summary(self) -> str:
        """One line: efficiency, bound and DRAM traffic against the minimum."""
        ratio = "n/a" if self.ddr_ratio is None else f"{self.ddr_ratio:.2f}x"
        noc = f", noc {self.noc}" if self.noc_bytes else ""
        return (
            f"roofline efficiency {self.efficiency:.3f} at makespan {self.makespan} (bound"
            f" {self.bound} cycles by {self.bound_by}: compute {self.compute}, memory"
            f" {self.memory}{noc}; busiest pipe {self.pipe_name} {self.pipe}), DRAM bytes"
            f" {self.ddr_bytes} = {ratio} the minimum {self.min_ddr_bytes}"
        )


def roofline(target: Target, work: Work, usage: Usage) -> Roofline:
    """The bounds of `work` on `target` and how `usage` compares with them."""
    cube = cube_bound(target, work.macs)
    vector = vector_bound(target, work.vector)
    compute = max(cube, vector)
    memory = ddr_bound(target, work.read, work.write)
    noc = noc_bound(target, usage.noc_read, usage.noc_write)
    bound = max(compute, memory, noc)
    pipe_name, pipe = max(usage.busy.items(), key=lambda kv: kv[1], default=("-", 0))
    least = work.read + work.write
    moved = usage.read + usage.write
    return Roofline(
        makespan=usage.makespan,
        bound=bound,
        bound_by="compute" if compute >= max(memory, noc) else "memory" if memory >= noc else "noc",
        efficiency=bound / usage.makespan if usage.makespan else 1.0,
        compute=compute,
        cube=cube,
        vector=vector,
        memory=memory,
        noc=noc,
        pipe=pipe,
        pipe_name=pipe_name,
        macs=work.macs,
        min_ddr_bytes=least,
        ddr_bytes=moved,
        ddr_read=usage.read,
        ddr_write=usage.write,
        ddr_ratio=moved / least if least else None,
        noc_bytes=usage.noc_read + usage.noc_write,
        busy={p: usage.busy[p] for p in PIPES if p in usage.busy},
    )


def at_makespan(stats: dict[str, Any], makespan: int) -> Roofline:
    """A compiled program's roofline (`Program.stats["roofline"]`) timed by another makespan
    (the interpreter's)."""
    line = Roofline(**stats)
    eff = line.bound / makespan if makespan else 1.0
    return replace(line, makespan=makespan, efficiency=eff)


def program_work(program: TiledProgram) -> Work:
    """The least work of a lowered model: its layers' work, its graph inputs and outputs."""
    eb = program.target.elem_bytes
    layers = program.layers
    inputs = [program.tensors[io.key] for io in program.io if io.kind == "input"]
    outputs = {io.key for io in program.io if io.kind == "output"}
    written = [program.tensors[k] for k in outputs if program.tensors[k].role == "temp"]
    return Work(
        macs=sum(w.macs for w in layers),
        vector=sum(w.vector for w in layers),
        read=sum(w.weights for w in layers) * eb + sum(t.nbytes(eb) for t in inputs),
        write=sum(t.nbytes(eb) for t in written),
    )


def scheduled_usage(
    scheduled: ScheduledProgram, traffic: Sequence[Traffic], makespan: int | None = None
) -> Usage:
    """The predicted makespan (`makespan`, if the caller has it), per-pipe busy cycles and DDR
    traffic of a scheduled program (`traffic`: each core's `node_traffic`)."""
    usage = Usage(scheduled.makespan if makespan is None else makespan)
    for (_, rep), moves in zip(scheduled.schedules, traffic, strict=True):
        busy = dict.fromkeys(PIPES, 0)
        for pipe, cycles in zip(rep.pipes, rep.cycles, strict=True):
            if pipe is not None:
                busy[pipe] += cycles
        for _, nbytes, reads, noc_read, noc_write in moves:
            usage.count(nbytes, reads, noc_read, noc_write)
        _keep_max(usage.busy, busy)
    return usage


def scheduled_roofline(
    scheduled: ScheduledProgram, traffic: Sequence[Traffic], makespan: int | None = None
) -> Roofline:
    """The roofline of a compiled program (`traffic`: each core's `node_traffic`), timed by its
    predicted makespan (`makespan`, if the caller has it: a mesh's is a replay of every core)."""
    program = scheduled.program
    usage = scheduled_usage(scheduled, traffic, makespan)
    return roofline(program.target, program_work(program), usage)


def stream_roofline(stream: Stream, makespan: int) -> Roofline:
    """The roofline of a bare command stream, timed by `makespan` (the interpreter's): the
    work is what the stream issues (its cube MACs, vector elements, constants, inputs and
    outputs), since it names no model."""
    target = stream.target
    usage = Usage(makespan)
    macs = vector = 0
    for core in stream.cores:
        busy = dict.fromkeys(PIPES, 0)
        for line in core.lines:
            ins = line.instr
            if not isinstance(ins, Instr):
                continue
            busy[line.queue] += instr_cycles(target, ins)
            if isinstance(ins, Mmad):
                macs += ins.m * ins.n * ins.k
            else:
                vector += vector_elements(ins)
            usage.count(ddr_bytes(target, ins), _instr_reads_ddr(ins), *noc_bytes(target, ins))
        _keep_max(usage.busy, busy)
    tensors = stream.tensors.values()
    read = sum(t.nbytes for t in tensors if t.kind in ("const", "input") and t.onchip is None)
    write = sum(t.nbytes for t in tensors if t.kind == "output")
    return roofline(target, Work(macs, vector, read, write), usage)


def _keep_max(into: dict[str, int], busy: dict[str, int]) -> None:
    for pipe, cycles in busy.items():
        if cycles:
            into[pipe] = max(into.get(pipe, 0), cycles)


def _instr_reads_ddr(ins: Instr) -> bool:
    return isinstance(ins, Gather) or (isinstance(ins, (Copy, Spill)) and ins.src.tier == DDR)


def reads_ddr(node: TileNode) -> bool:
    """Whether a node's DDR traffic (if any) is a read."""
    if node.instr is not None:
        return _instr_reads_ddr(node.instr)
    return node.op == "SPILL_IN"


def node_traffic(target: Target, rep: Replay, nbytes: Sequence[int]) -> Traffic:
    """Per node of `rep` that moves DDR or NoC bytes (`nbytes`: its nodes' `core_ddr_bytes`;
    `noc_bytes`), in id order: (its id, its DDR bytes, whether they are read, NoC bytes read,
    NoC bytes written)."""
    out = []
    for v, node in enumerate(rep.nodes):
        ins = node.instr
        noc_read, noc_write = (0, 0) if ins is None else noc_bytes(target, ins)
        if nbytes[v] or noc_read or noc_write:
            out.append((v, nbytes[v], reads_ddr(node), noc_read, noc_write))
    return out


def node_layers(rep: Replay) -> list[int]:
    """The graph layer of every node of a replay, spill nodes (their buffer's) included."""
    graph = rep.graph
    layers = [node.layer for node in graph.nodes]
    for node in rep.nodes[len(graph.nodes) :]:
        layers.append(graph.nodes[graph.alloc_of[node.bufs[0]]].layer)
    return layers
