# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""Codegen's flag planning (`emit.plan_flags`) as a kernel compiled ahead of time (Cython,
pure-Python mode): one flag per cross-queue edge of a replay that pipe order and earlier flags
do not already imply. This module is the one home of that rule.

Each node carries a vector of the latest position of every pipe known to have finished before
it (its `known` row); an edge from pipe q's k-th node is implied when that entry is already
>= k. A pipe node starts from its pipe predecessor's row, a ctrl node from zeros; each flag it
waits for merges the setter's row in (entrywise max). The module is valid Python too: built
(`cythonize -i -3` on this file, or the package's build, setup.py) Python imports the extension
module next to it; without one it runs as it is (slower, the same flags). The predecessors come
as CSR arrays: `pred_off`/`pred_idx` the sources of each node's edges, which `latest_first`
sorts (numpy: no node's many sources sorted one by one).
"""

import cython
import numpy as np

I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])


@cython.wraparound(True)  # numpy's slices below count from the end
def latest_first(position, pred_off, pred_idx) -> tuple:
    """The CSR sources of each node (`pred_off`/`pred_idx`) latest first by `position`, each
    once: (offsets, sources), sorted in O(E log E) whatever a node's number of sources.

    NOTE: positions are distinct (one per node of the order), so the order is the only one."""
    off = np.asarray(pred_off, np.int64)
    src = np.asarray(pred_idx, np.int64)
    owner = np.repeat(np.arange(len(off) - 1, dtype=np.int64), np.diff(off))
    ranked = np.lexsort((-np.asarray(position, np.int64)[src], owner))
    owner, src = owner[ranked], src[ranked]
    keep = np.ones(len(src), bool)
    keep[1:] = (src[1:] != src[:-1]) | (owner[1:] != owner[:-1])
    offsets = np.zeros(len(off), np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=len(off) - 1), out=offsets[1:])
    return offsets, np.ascontiguousarray(src[keep])


@cython.ccall
def flag_edges(
    order: I64s,
    queue: I64s,
    position: I64s,
    pred_off: I64s,
    pred_idx: I64s,
    width: Py,
    prefix: list,
    first_flag: Py,
) -> tuple:
    """The flags of nodes run in `order` on queues `queue` (a pipe's index 0 .. width-1, -1:
    ctrl), `position` each node's index in `order`: (waits, sets, count), node -> the flag
    texts it waits for / sets, `prefix[src queue][dst queue] + str(number)` (index -1: ctrl)
    numbered from `first_flag` + 1, and the last number used.

    NOTE: a node's sources are taken latest first (by `position`, each once, `latest_first`):
    the numbering follows that order.
    """
    total: Py = queue.shape[0]
    known_a = np.zeros(max(total, 1) * width, np.int64)
    known: I64s = known_a
    seq_a = np.zeros(max(total, 1), np.int64)
    seq: I64s = seq_a
    last_a = np.full(max(width, 1), -1, np.int64)
    last_on_pipe: I64s = last_a
    sorted_off, sorted_idx = latest_first(position, pred_off, pred_idx)
    sources_off: I64s = sorted_off
    sources: I64s = sorted_idx
    waits: dict = {}
    sets: dict = {}
    count: Py = first_flag
    i: Py
    j: Py
    k: Py
    v: Py
    u: Py
    q: Py
    uq: Py
    prev: Py
    row: Py
    urow: Py
    mine: I64 = 0
    for i in range(order.shape[0]):
        v = order[i]
        q = queue[v]
        row = v * width
        if q >= 0:
            prev = last_on_pipe[q]
            if prev >= 0:
                for k in range(width):
                    known[row + k] = known[prev * width + k]
            mine = known[row + q] + 1
            seq[v] = mine
        for j in range(sources_off[v], sources_off[v + 1]):
            u = sources[j]
            uq = queue[u]
            if uq >= 0 and known[row + uq] >= seq[u]:
                continue
            count += 1
            item = prefix[uq if uq >= 0 else width][q if q >= 0 else width] + str(count)
            if u in sets:
                sets[u].append(item)
            else:
                sets[u] = [item]
            if v in waits:
                waits[v].append(item)
            else:
                waits[v] = [item]
            urow = u * width
            for k in range(width):
                if known[urow + k] > known[row + k]:
                    known[row + k] = known[urow + k]
        if q >= 0:
            known[row + q] = mine
            last_on_pipe[q] = v
    return waits, sets, count
