"""Stage 1, MPAS (paper 000, Alg. 1, eqs. 17-21): memory-pressure-aware list scheduling.

The ready node chosen next minimises the lexicographic key (eq. 21)
(lambda: FREE 0 < other 1 < ALLOC 2, Delta_pk: change of L1+UB residency, -h(v), input order).

How npucc reads the step of eq. 19 (documented in docs/dan.md): an ALLOC is never chosen on its
own, ahead of need; it is scheduled just in time, right before the first node that uses its
buffer, and that node's step carries lambda = 2 and the ALLOC's +size. Symmetrically a node's
step carries -size for every L1/UB FREE it makes ready (FREEs go first, so they follow at once).
A key only ever decreases (an ALLOC done by a sibling, a FREE's other users done); each change
re-pushes the node (lazy decrease-key), so the heap holds O(V + E) entries: O((V + E) log V).

Rule 7 (`single_l0`, the Stage-1 output on traces): each L0 tier holds at most one live buffer.
A node whose L0 ALLOC finds its tier occupied waits, and so does one whose new L0 buffer shares
no consumer with a live L0 buffer of another tier (two half-built tiles would otherwise wait for
each other's tiers). A node that would allocate L1/UB while every successor waits for an L0 tier
is futile (the load of a tile that cannot start); it waits too, and runs only when nothing else
can. Strict mode also refuses an L0 allocation while an unscheduled ancestor of one of the
buffer's consumers allocates the same tier (that buffer could never be released: docs/dan.md).
Waiting nodes are indexed by what they wait for (their own L0 tier, or "futile"); while an L0
tier is live only the companions of its buffer can run, so waking looks at those (local fan-out)
or, with no tier live, at each class's best node: no scan over all waiters.

The order loop is a kernel compiled ahead of time (`mpas_kernel`, Cython) over the arrays
`prepare` makes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from npucc.backend.schedule.dan import mpas_kernel
from npucc.backend.schedule.scan import topo_order
from npucc.backend.schedule.scan_kernel import csr
from npucc.errors import NpuccError
from npucc.ir.replay import L0_TIERS
from npucc.ir.residency import PEAK_TIERS
from npucc.ir.tiled import TileGraph, TileNode

KEY_BITS = 63  # a key is a non-negative int64
HEAP_ROOM = 2  # a run's heaps hold HEAP_ROOM * n + 1 keys each (full: stale keys dropped)


def tails(
    order: Sequence[int], succ: tuple[np.ndarray, np.ndarray], nodes: Sequence[TileNode]
) -> np.ndarray:
    """Per node, the longest path of pipe cycles from it (itself included) over the successor
    lists `succ` (CSR, `csr`); `order` is a topological order of those edges (the rule's home
    is the kernel, `mpas_kernel.tails`)."""
    cost = np.fromiter((v.cycles if v.pipe is not None else 0 for v in nodes), np.int64, len(nodes))
    h = np.zeros(len(nodes), np.int64)
    mpas_kernel.tails(np.asarray(order, np.int64), *succ, cost, h)
    return h


@dataclass(slots=True)
class Prep:
    """What MPAS derives from the graph alone, shared by the runs on one graph (int64 arrays;
    `*_off`/`*_idx`: per-node lists as offsets and entries)."""

    pred_off: np.ndarray
    pred_idx: np.ndarray
    succ_off: np.ndarray
    succ_idx: np.ndarray
    is_alloc: np.ndarray  # bool
    is_free: np.ndarray  # bool
    size_pk: np.ndarray  # L1+UB bytes of an ALLOC/FREE node
    l0_tier: np.ndarray  # L0 tier index of an ALLOC node, or -1
    free_l0: np.ndarray  # L0 tier index of a FREE node's buffer, or -1
    pending: np.ndarray  # non-ALLOC predecessors
    jit: np.ndarray  # L1+UB bytes of ALLOC predecessors
    jit_count: np.ndarray  # ALLOC predecessors
    users: tuple[np.ndarray, np.ndarray] | None  # L0 ALLOC node -> its buffer's consumers
    l0p_off: np.ndarray  # per node: its L0 ALLOC predecessors, in preds order
    l0p_idx: np.ndarray
    by_h: np.ndarray  # the nodes in (-h, id) order: the paper key's ranks
    delta: int  # D: every key's |Delta| is at most D
    stack: int  # needs_tier's stack: the most entries it holds, less CONE_LIMIT


def prepare(graph: TileGraph, single_l0: bool = True, topo: list[int] | None = None) -> Prep:
    """The graph-only part of `mpas` (`single_l0`: with the rule 7 consumer sets; `topo`:
    topo_order(graph), if the caller has it)."""
    nodes = graph.nodes
    buffers = graph.buffers
    n = len(nodes)
    preds = graph.preds
    alloc_of, succs = graph.alloc_of, graph.succs
    pred_off, pred_idx = csr(preds)
    succ_off, succ_idx = csr(succs)
    # h(v) of eq. 20: the node's cycles plus the largest h of its successors
    h = tails(topo_order(graph) if topo is None else topo, (succ_off, succ_idx), nodes)
    ops = [node.op for node in nodes]
    is_alloc = [op == "ALLOC" for op in ops]
    is_free = [op == "FREE" for op in ops]
    events = [v for v in range(n) if is_alloc[v] or is_free[v]]  # ALLOC and FREE nodes
    size_pk = [0] * n  # L1+UB bytes of an ALLOC/FREE node
    l0_tier = [-1] * n  # L0 tier index of an ALLOC node
    for v in events:
        buf = buffers[nodes[v].bufs[0]]
        if buf.tier in PEAK_TIERS:
            size_pk[v] = buf.size
        elif is_alloc[v] and buf.tier in L0_TIERS:
            l0_tier[v] = L0_TIERS.index(buf.tier)
    free_l0 = [-1] * n
    for v in events:
        if is_free[v]:
            free_l0[v] = l0_tier[alloc_of[nodes[v].bufs[0]]]
    jit = [0] * n
    jit_count = [0] * n
    enables = [0] * n  # L1+UB bytes of FREE successors: the most a node's `enabled` reaches
    l0_allocs: list[int] = []
    for a in events:  # NOTE: succs mirror preds, each edge once
        size = size_pk[a]
        if is_alloc[a]:
            for w in succs[a]:
                jit[w] += size
                jit_count[w] += 1
            if l0_tier[a] >= 0:
                l0_allocs.append(a)
        else:
            for p in preds[a]:
                enables[p] += size
    pending = [len(p) - c for p, c in zip(preds, jit_count, strict=True)]
    users: tuple[np.ndarray, np.ndarray] | None = None
    most_users = 0
    if single_l0:
        sets: dict[int, set[int]] = {a: set() for a in l0_allocs}
        for node in nodes:
            if not is_alloc[node.id] and not is_free[node.id]:
                for b in node.bufs:
                    a = alloc_of[b]
                    if l0_tier[a] >= 0:
                        sets[a].add(node.id)
        # NOTE: each set in its iteration order, the order needs_tier's search went in
        lists: list[Iterable[int]] = [()] * n
        for a, x in sets.items():
            lists[a] = x
        users = csr(lists)
        most_users = max(map(len, sets.values()), default=0)
    l0_preds: list[Sequence[int]] = [()] * n
    for a in l0_allocs:
        for w in succs[a]:
            if not l0_preds[w]:  # NOTE: in preds order, as blocker and need walk them
                l0_preds[w] = [u for u in preds[w] if l0_tier[u] >= 0]
    # NOTE: |Delta| of a FREE's key is its size, of another's jit - enabled, each term within
    # its bound here: D sizes the Delta field, which with lambda and the rank must fit 63 bits
    delta = max(max(jit, default=0), max(enables, default=0), max(size_pk, default=0))
    if 2 + (2 * delta).bit_length() + _vbits(n) > KEY_BITS:
        raise NpuccError(f"MPAS keys need more than {KEY_BITS} bits ({graph.name})")
    l0p_off, l0p_idx = csr(l0_preds)
    by_h = np.argsort(-h, kind="stable")
    indeg = int(np.diff(pred_off).max(initial=0))
    return Prep(
        pred_off,
        pred_idx,
        succ_off,
        succ_idx,
        np.array(is_alloc, np.bool_),
        np.array(is_free, np.bool_),
        np.array(size_pk, np.int64),
        np.array(l0_tier, np.int64),
        np.array(free_l0, np.int64),
        np.array(pending, np.int64),
        np.array(jit, np.int64),
        np.array(jit_count, np.int64),
        users,
        l0p_off,
        l0p_idx,
        by_h,
        delta,
        most_users + indeg,
    )


def _vbits(n: int) -> int:
    """The bits of a key's rank field for a graph of n nodes."""
    return max(n - 1, 1).bit_length()


def mpas(
    graph: TileGraph,
    single_l0: bool = False,
    mode: str = "full",
    strict: bool = True,
    prep: Prep | None = None,
) -> list[int]:
    """The Stage-1 order (mode "memory"/"critical": the Fig. 7 ablations; `prep`: prepare(graph)).

    With `single_l0` and not `strict`, rule 7 is kept where it can be and broken (rather than
    raising) when L0 tiers would wait for each other, as before Stage 2 on compiled programs.
    """
    nodes = graph.nodes
    n = len(nodes)
    if prep is None or (single_l0 and prep.users is None):
        prep = prepare(graph, single_l0)
    ok, s = _run(prep, n, single_l0, mode, strict)
    if not ok:
        stuck = int(np.argmin(s.done))  # the first node not done
        what = nodes[stuck].op
        if nodes[stuck].bufs:
            buf = graph.buffers[nodes[stuck].bufs[0]]
            what += f" of {buf.tier} buffer b{buf.id} '{buf.name}'"
        raise NpuccError(f"no schedule: node {stuck} ({what}) waits forever ({graph.name})")
    return np.asarray(s.order).tolist()


def _run(
    prep: Prep, n: int, single_l0: bool, mode: str, strict: bool
) -> tuple[bool, mpas_kernel.State]:
    """Run the kernel: did it order every node, and its state (the order, or how far it got)."""
    vbits = _vbits(n)
    dbits = (2 * prep.delta).bit_length()
    levels = np.array([((lev << dbits) + prep.delta) << vbits for lev in range(3)], np.int64)
    inv = prep.by_h if mode != "memory" else np.arange(n, dtype=np.int64)
    low = np.empty(n, np.int64)
    low[inv] = np.arange(n, dtype=np.int64)
    if prep.users is None:
        users = (np.zeros(n + 1, np.int64), np.zeros(0, np.int64))
    else:
        users = prep.users
    g = mpas_kernel.Graph(  # type: ignore[call-arg]  # a Cython dataclass: mypy sees no __init__
        prep.pred_off,
        prep.pred_idx,
        prep.succ_off,
        prep.succ_idx,
        prep.is_alloc,
        prep.is_free,
        prep.size_pk,
        prep.l0_tier,
        prep.free_l0,
        users[0],
        users[1],
        prep.l0p_off,
        prep.l0p_idx,
        low,
        inv,
        levels,
        1 << vbits if mode != "critical" else 0,
        (1 << vbits) - 1,
        single_l0,
        strict,
    )
    s = _state(prep, n)
    return mpas_kernel.run(g, s), s


def _state(prep: Prep, n: int) -> mpas_kernel.State:
    """A run's fresh arrays."""
    pairs = len(prep.l0p_idx)
    # NOTE: a node has one live key per heap, so HEAP_ROOM >= 1 leaves a full heap room
    heaps = np.empty((6, HEAP_ROOM * n + 2), np.int64)  # touched as far as used
    heaps[:, 0] = 0
    return mpas_kernel.State(  # type: ignore[call-arg]  # the same
        np.zeros(mpas_kernel.SCALARS, np.int64),
        np.zeros(n, np.bool_),
        prep.pending.copy(),
        prep.jit.copy(),
        prep.jit_count.copy(),
        np.zeros(n, np.int64),
        np.full(n, -1, np.int64),
        np.zeros(n, np.bool_),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int64),
        np.zeros(n, np.bool_),
        np.zeros(pairs, np.bool_),
        np.full(pairs, -1, np.int64),
        np.full(3, -1, np.int64),
        np.zeros(3, np.int64),
        np.zeros(4, np.int64),
        np.full(4, -1, np.int64),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int64),
        np.full(n, -1, np.int64),
        np.zeros(n, np.int64),
        np.full(n, -1, np.int64),
        np.zeros(prep.stack + mpas_kernel.CONE_LIMIT, np.int64),
        np.full(n, -1, np.int64),
        np.zeros(n, np.int64),
        np.empty(n, np.int64),
        heaps,
    )
