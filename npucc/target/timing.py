"""The one timing rule: in-order pipes, a node starts at its latest predecessor's finish.

Every predicted or executed time is this list timer: a node runs on a pipe (after the node
before it on that pipe) or is a pipe-less event (0 cycles: ALLOC, FREE, BARRIER); it starts
once every predecessor finished plus the edge's latency (a flag's hops: `cost.sync_cycles`);
on a mesh its DDR bytes pass the one shared DDR channel (`cost.ddr_channel`) in the order
transfers become ready. The per-core replay (`ir.replay`), the mesh timing
(`ir.scheduled_program`), the execution-faithful plan estimator and the interpreter's clock
use these pieces, so a predicted makespan equals an interpreted one.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from npucc.target import Target
from npucc.target.cost import ddr_channel, shared_ddr_bandwidth

PipeKey = tuple[int, int]  # (core, pipe index) of a pipe on a mesh


@dataclass(slots=True)
class DdrChannel:
    """The mesh's shared DDR channel: transfers take it one at a time, in the order offered."""

    target: Target
    free: int = 0  # when the channel takes the next bytes

    @property
    def shared(self) -> bool:
        """Is there a shared channel (a mesh), or has each DMA path its own bandwidth?"""
        return shared_ddr_bandwidth(self.target) is not None

    def transfer(self, nbytes: int, cycles: int, start: int) -> int:
        """Finish of a transfer of nbytes taking `cycles` cycles, ready at `start`."""
        finish, self.free = ddr_channel(self.target, nbytes, cycles, start, self.free)
        return finish


def in_order(
    order: Iterable[int],
    cycles: Sequence[int],
    pipes: Sequence[Hashable | None],
    preds: Sequence[Iterable[int]],
    release: Sequence[int] | None = None,
    timed: tuple[list[int], list[int], dict[Hashable, int]] | None = None,
) -> tuple[list[int], list[int]]:
    """Start and finish of each node run in `order` (predecessors first) on in-order pipes.

    A node starts at the latest finish among `preds[v]`, no earlier than `release[v]` and, on a
    pipe (`pipes[v]` not None), no earlier than the pipe's previous node finished; a pipe-less
    node takes no time. Nodes outside `order` keep 0. No DDR channel: one core's view.
    `timed`: (start, finish, each pipe's free time) of the nodes run before `order`, continued
    in place (the order in pieces).
    """
    if timed is None:
        timed = ([0] * len(cycles), [0] * len(cycles), {})
    start, finish, pipe_free = timed
    for v in order:
        t = 0 if release is None else release[v]
        for u in preds[v]:
            if finish[u] > t:
                t = finish[u]
        pipe = pipes[v]
        if pipe is None:
            start[v] = finish[v] = t
            continue
        free = pipe_free.get(pipe, 0)
        if free > t:
            t = free
        start[v] = t
        finish[v] = pipe_free[pipe] = t + cycles[v]
    return start, finish


@dataclass(slots=True)
class TimingDag:
    """Nodes on in-order pipes or pipe-less, edges with latencies, DDR bytes per node.

    `times` runs the nodes in the order they become ready (start time; at equal starts
    pipe-less events by id, then pipes by key), so DDR transfers take the shared channel in
    the interpreter's order.
    """

    cycles: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    pipes: list[PipeKey | None] = field(default_factory=list)
    succs: list[list[int]] = field(default_factory=list)  # the edges without latency
    indegree: list[int] = field(default_factory=list)
    later: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # u -> [(v, latency)]

    def node(self, cycles: int, pipe: PipeKey | None = None, nbytes: int = 0) -> int:
        """Add a node on `pipe` (None: a pipe-less event); return its id."""
        return self.nodes([cycles], [pipe], [nbytes])

    def nodes(
        self, cycles: Sequence[int], pipes: Sequence[PipeKey | None], nbytes: Sequence[int]
    ) -> int:
        """Add one node per item (as `node`, without edges); return the first one's id."""
        first = len(self.cycles)
        self.cycles += [0 if p is None else c for c, p in zip(cycles, pipes, strict=True)]
        self.nbytes += nbytes
        self.pipes += pipes
        self.succs += [[] for _ in pipes]
        self.indegree += [0] * len(pipes)
        return first

    def edge(self, u: int, v: int, latency: int = 0) -> None:
        """Node v starts no earlier than `latency` cycles after u finishes."""
        if latency:
            self.later.setdefault(u, []).append((v, latency))
        else:
            self.succs[u].append(v)
        self.indegree[v] += 1

    def block(self, first: int, succs: Sequence[Sequence[int]], counts: Sequence[int]) -> None:
        """Edges without latency among the nodes from `first` on: node first + u precedes
        first + v for each v in succs[u]; counts[v] is how many of them enter v."""
        mine = self.succs
        for u, outs in enumerate(succs, first):
            if outs:
                mine[u] += [first + v for v in outs]
        indegree = self.indegree
        for v, k in enumerate(counts, first):
            indegree[v] += k

    def in_pipe_order(self, nodes: Iterable[int]) -> None:
        """Nodes of one pipe run in this order: each waits for the one before it."""
        last: dict[PipeKey, int] = {}
        pipes, succs, indegree = self.pipes, self.succs, self.indegree
        for v in nodes:
            pipe = pipes[v]
            if pipe is not None:
                u = last.get(pipe)
                if u is not None:
                    succs[u].append(v)
                    indegree[v] += 1
                last[pipe] = v

    def times(self, target: Target) -> tuple[list[int], list[int]]:
        """Start and finish of every node; ValueError if the edges form a cycle."""
        total = len(self.cycles)
        keys = sorted({p for p in self.pipes if p is not None})
        rank_of = {key: total + i for i, key in enumerate(keys)}
        # NOTE: a ready node's heap entry is one int, (start, rank, node) in mixed radix: the
        # same order as the tuple, as rank < total + len(keys) and node < total
        radix = (total + len(keys)) * total
        key = [(v if p is None else rank_of[p]) * total + v for v, p in enumerate(self.pipes)]
        indegree = list(self.indegree)
        start = [0] * total
        finish = [0] * total
        ready = [key[v] for v in range(total) if indegree[v] == 0]
        heapq.heapify(ready)
        pop, push = heapq.heappop, heapq.heappush
        channel = DdrChannel(target)
        cycles, nbytes, succs, later = self.cycles, self.nbytes, self.succs, self.later
        done = 0
        while ready:
            u = pop(ready) % total
            done += 1
            # NOTE: a transfer without bytes never takes the channel (`ddr_channel`)
            b = nbytes[u]
            f = finish[u] = channel.transfer(b, cycles[u], start[u]) if b else start[u] + cycles[u]
            for v in succs[u]:
                if f > start[v]:
                    start[v] = f
                d = indegree[v] = indegree[v] - 1
                if not d:
                    push(ready, start[v] * radix + key[v])
            for v, latency in later.get(u, ()):
                if f + latency > start[v]:
                    start[v] = f + latency
                indegree[v] -= 1
                if indegree[v] == 0:
                    push(ready, start[v] * radix + key[v])
        if done != total:
            raise ValueError("the timing edges form a cycle")
        return start, finish
