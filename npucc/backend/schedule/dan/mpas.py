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
from itertools import chain

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


def pipe_cycles(nodes: Sequence[TileNode]) -> np.ndarray:
    """Per node its cycles on its pipe (0: pipe-less), what `tails` sums."""
    return np.fromiter((v.cycles if v.pipe is not None else 0 for v in nodes), np.int64, len(nodes))


def tails(
    order: Sequence[int], succ: tuple[np.ndarray, np.ndarray], cost: np.ndarray
) -> np.ndarray:
    """Per node, the longest path of pipe cycles `cost` (`pipe_cycles`) from it (itself
    included) over the successor lists `succ` (CSR, `csr`); `order` is a topological order of
    those edges (the rule's home is the kernel, `mpas_kernel.tails`)."""
    h = np.zeros(len(cost), np.int64)
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
    h = tails(topo_order(graph) if topo is None else topo, (succ_off, succ_idx), pipe_cycles(nodes))
    # NOTE: per node and per edge by arrays, each the sum or list the node-by-node rule gives
    ops = [node.op for node in nodes]
    events = [v for v, op in enumerate(ops) if op == "ALLOC" or op == "FREE"]
    ev = np.array(events, np.int64)
    ev_buf = np.fromiter((nodes[v].bufs[0] for v in events), np.int64, len(events))
    ev_alloc = np.fromiter((ops[v] == "ALLOC" for v in events), np.bool_, len(events))
    is_alloc = np.zeros(n, np.bool_)
    is_alloc[ev[ev_alloc]] = True
    is_free = np.zeros(n, np.bool_)
    is_free[ev[~ev_alloc]] = True
    nbuf = len(buffers)
    # per buffer: its L1+UB bytes, else its L0 tier's index (-1: neither)
    buf_pk = np.fromiter((b.size if b.tier in PEAK_TIERS else 0 for b in buffers), np.int64, nbuf)
    buf_l0 = np.fromiter(
        (-1 if b.tier in PEAK_TIERS or b.tier not in L0_TIERS else L0_TIERS.index(b.tier)
         for b in buffers), np.int64, nbuf,
    )  # fmt: skip
    size_pk = np.zeros(n, np.int64)  # L1+UB bytes of an ALLOC/FREE node
    size_pk[ev] = buf_pk[ev_buf]
    l0_tier = np.full(n, -1, np.int64)  # L0 tier index of an ALLOC node
    l0_tier[ev[ev_alloc]] = buf_l0[ev_buf[ev_alloc]]
    free_bufs = ev_buf[~ev_alloc].tolist()
    of_free = np.fromiter((alloc_of[b] for b in free_bufs), np.int64, len(free_bufs))
    free_l0 = np.full(n, -1, np.int64)
    free_l0[ev[~ev_alloc]] = l0_tier[of_free]
    # the edges u -> v as the succs (jit: L1+UB bytes and count of ALLOC predecessors) and as
    # the preds (enables: L1+UB bytes of FREE successors, the most a node's `enabled` reaches)
    s_src = np.repeat(np.arange(n, dtype=np.int64), np.diff(succ_off))
    from_alloc = is_alloc[s_src]
    jit = np.zeros(n, np.int64)
    np.add.at(jit, succ_idx[from_alloc], size_pk[s_src[from_alloc]])
    jit_count = np.bincount(succ_idx[from_alloc], minlength=n).astype(np.int64)
    p_dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(pred_off))
    to_free = is_free[p_dst]
    enables = np.zeros(n, np.int64)
    np.add.at(enables, pred_idx[to_free], size_pk[p_dst[to_free]])
    pending = np.diff(pred_off) - jit_count
    users: tuple[np.ndarray, np.ndarray] | None = None
    most_users = 0
    if single_l0:
        l0_allocs = ev[ev_alloc & (l0_tier[ev] >= 0)].tolist()
        sets: dict[int, set[int]] = {a: set() for a in l0_allocs}
        # the L0 buffers' uses by nodes other than ALLOC and FREE, by ALLOC node, in node
        # order: each set filled in the order the node-by-node loop adds to it
        used = [
            () if is_event else node.bufs
            for node, is_event in zip(nodes, (is_alloc | is_free).tolist(), strict=True)
        ]
        count = np.fromiter(map(len, used), np.int64, n)
        bufs = np.fromiter(chain.from_iterable(used), np.int64, int(count.sum()))
        allocs = np.full(nbuf, -1, np.int64)
        allocs[np.fromiter(alloc_of, np.int64, len(alloc_of))] = list(alloc_of.values())
        a_use = allocs[bufs]
        if (a_use < 0).any():
            raise KeyError(int(bufs[np.argmax(a_use < 0)]))  # NOTE: a buffer without ALLOC
        keep = l0_tier[a_use] >= 0
        a_use = a_use[keep]
        by_a = np.argsort(a_use, kind="stable")
        users_of = np.repeat(np.arange(n, dtype=np.int64), count)[keep][by_a]
        a_sorted = a_use[by_a]
        starts = np.flatnonzero(np.r_[True, a_sorted[1:] != a_sorted[:-1]])
        if a_sorted.size:
            flat, ends = users_of.tolist(), [*starts[1:].tolist(), len(users_of)]
            for a, lo, hi in zip(a_sorted[starts].tolist(), starts.tolist(), ends, strict=True):
                sets[a].update(flat[lo:hi])
        # NOTE: each set in its iteration order, the order needs_tier's search went in
        lists: list[Iterable[int]] = [()] * n
        for a, s in sets.items():
            lists[a] = s
        users = csr(lists)
        most_users = max(map(len, sets.values()), default=0)
    # per node: its L0 ALLOC predecessors, in preds order (as blocker and need walk them)
    l0_pred = l0_tier[pred_idx] >= 0
    l0p_idx = pred_idx[l0_pred]
    l0p_off = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(p_dst[l0_pred], minlength=n), out=l0p_off[1:])
    # NOTE: |Delta| of a FREE's key is its size, of another's jit - enabled, each term within
    # its bound here: D sizes the Delta field, which with lambda and the rank must fit 63 bits
    delta = int(max(jit.max(initial=0), enables.max(initial=0), size_pk.max(initial=0)))
    if 2 + (2 * delta).bit_length() + _vbits(n) > KEY_BITS:
        raise NpuccError(f"MPAS keys need more than {KEY_BITS} bits ({graph.name})")
    by_h = np.argsort(-h, kind="stable")
    indeg = int(np.diff(pred_off).max(initial=0))
    return Prep(
        pred_off,
        pred_idx,
        succ_off,
        succ_idx,
        is_alloc,
        is_free,
        size_pk,
        l0_tier,
        free_l0,
        pending,
        jit,
        jit_count,
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
