"""Stage 3's L1+UB budget for an order that runs ahead of the plan (CPE's overlapped order).

The plan's order, with each ALLOC sunk to its first user, is a sequence of L1+UB memory events
(a buffer starts at its first user and ends at its FREE) whose live bytes never exceed the
plan's peak. An order built in another sequence (CPE's list order with no memory order kept)
stays within a budget `cap` by this invariant: from the events done so far, running the rest of
the plan's order (its nodes not run yet) completes within `cap`. In that completion, once it has
done the plan's first s events, the live bytes are at most live(s) + ahead(s) - gone(s): live(s)
the plan's own, ahead(s) the buffers started out of the plan's sequence, still live, whose start
is not among the first s events, gone(s) the buffers the plan holds at s that are freed already.
So buffers may start now when they fit the live bytes now and, for every later state s up to
their own start events, slack(s) = cap - live(s) - ahead(s) + gone(s) covers those of them that
start at or after s. The plan's next node always fits (its events come next), so an order that
runs it when nothing else fits never stalls, and it ends within `cap`. That rule's home is the
kernel (`cpe_kernel.Room`, made by `room`); this module works out the plan's events.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from npucc.backend.schedule.dan import cpe_kernel
from npucc.backend.schedule.scan_kernel import csr
from npucc.ir.residency import PEAK_TIERS
from npucc.ir.tiled import TileGraph, TileNode


def room(
    graph: TileGraph,
    nodes: Sequence[TileNode],
    preds: Sequence[Sequence[int]],
    plan: Sequence[int],
    cap: int,
    events: Events | None = None,
) -> cpe_kernel.Room:
    """The plan's L1+UB events and the slack an order running ahead of them still has, within
    `cap` (the rule's home is the kernel: `cpe_kernel.Room`; `events`: `plan_events` of `plan`,
    given when the caller has them)."""
    if events is None:
        events = plan_events(graph, nodes, preds, plan)
    size, alloc_of, event, live = events
    return cpe_kernel.Room(size, alloc_of, event, live, cap)  # type: ignore[call-arg]


def alloc_sizes(graph: TileGraph, total: int) -> np.ndarray:
    """Per node of `total`: an ALLOC's L1+UB bytes (0: not an ALLOC, an L0 tier's or empty)."""
    nbuf = len(graph.buffers)
    size = np.zeros(total, np.int64)
    size[np.fromiter(map(graph.alloc_of.__getitem__, range(nbuf)), np.int64, nbuf)] = _bytes(graph)
    return size


def _bytes(graph: TileGraph) -> np.ndarray:
    """Per buffer its L1+UB bytes (0: an L0 tier's)."""
    buffers = graph.buffers
    return np.fromiter(
        (buf.size if buf.tier in PEAK_TIERS else 0 for buf in buffers), np.int64, len(buffers)
    )


# G2's preds in CSR form (`scan_kernel.csr`: offsets, entries) and per node whether an ALLOC
G2 = tuple[np.ndarray, np.ndarray, np.ndarray]


def g2_arrays(nodes: Sequence[TileNode], preds: Sequence[Sequence[int]]) -> G2:
    """`preds` (G2's, per node of `nodes`) in CSR form and per node whether an ALLOC."""
    return (*csr(list(preds)), np.array([n.op == "ALLOC" for n in nodes], np.bool_))


# per node: an ALLOC's L1+UB bytes, a FREE's ALLOC (or -1), a counted ALLOC's start event and
# its FREE's end event (or -1); the live bytes per state
Events = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def plan_events(
    graph: TileGraph,
    nodes: Sequence[TileNode],
    preds: Sequence[Sequence[int]],
    plan: Sequence[int],
    g2: G2 | None = None,
    arrays: tuple[np.ndarray, np.ndarray] | None = None,
) -> Events:
    """The plan's L1+UB events, each ALLOC sunk to its first user: per ALLOC node its bytes,
    per FREE its ALLOC, per counted ALLOC its start event and per its FREE its end, and the
    live bytes after each event (from 0). `g2`: `preds` in CSR form and per node whether an
    ALLOC (`scan_kernel.csr`), `arrays`: `event_arrays(graph, len(nodes))`, when the caller
    has them; the rule's home is the kernel."""
    total = len(nodes)
    if g2 is None:
        g2 = g2_arrays(nodes, preds)
    size, alloc_of = event_arrays(graph, total) if arrays is None else arrays
    event = np.full(total, -1, np.int64)
    live = np.zeros(2 * total + 1, np.int64)  # NOTE: at most two events per ALLOC node
    plan_array = np.asarray(plan, np.int64)
    started = np.zeros(total, np.bool_)
    n = cpe_kernel.plan_events(*g2, size, alloc_of, plan_array, started, event, live)
    return size, alloc_of, event, live[:n]


def event_arrays(graph: TileGraph, total: int) -> tuple[np.ndarray, np.ndarray]:
    """What `plan_events` reads of the graph, per node of `total`: an ALLOC's L1+UB bytes
    (`alloc_sizes`) and a FREE's ALLOC (-1: not a FREE). NOTE: read only (every plan's
    `Events` holds them)."""
    alloc_of = np.full(total, -1, np.int64)
    bufs = list(graph.alloc_of)
    alloc_of[[graph.free_of[b] for b in bufs]] = [graph.alloc_of[b] for b in bufs]
    return alloc_sizes(graph, total), alloc_of


def sunk_peak(
    graph: TileGraph,
    nodes: Sequence[TileNode],
    preds: Sequence[Sequence[int]],
    plan: Sequence[int],
) -> int:
    """The plan's L1+UB peak with each ALLOC sunk to its first user (at most its own peak)."""
    return int(plan_events(graph, nodes, preds, plan)[3].max())


def peak_steps(graph: TileGraph, total: int) -> np.ndarray:
    """Per node of `total`: what it adds to the live L1+UB bytes (an ALLOC its size, a FREE
    minus it; as `alloc_sizes`, the graph's ALLOC and FREE nodes are its `alloc_of`'s and
    `free_of`'s)."""
    size = _bytes(graph)
    steps = np.zeros(total, dtype=np.int64)
    for events, sign in ((graph.alloc_of, 1), (graph.free_of, -1)):
        bufs = np.fromiter(events.keys(), np.int64, len(events))
        steps[np.fromiter(events.values(), np.int64, len(events))] = sign * size[bufs]
    return steps


def order_peak(steps: np.ndarray, order: Sequence[int] | np.ndarray) -> int:
    """The L1+UB peak of `order` (npucc.ir.residency's: ALLOC and FREE events alone count;
    `steps`: `peak_steps`; an int64 array is read as it is)."""
    # NOTE: the live bytes change only at those events, so the highest prefix sum is theirs
    if not len(order):
        return 0
    return max(0, int(np.cumsum(steps[np.asarray(order, dtype=np.int64)]).max()))
