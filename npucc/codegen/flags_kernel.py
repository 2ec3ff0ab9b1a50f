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
as CSR arrays: `pred_off`/`pred_idx` the sources of each node's edges.
"""

import cython
import numpy as np

I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])


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

    NOTE: a node's sources are taken latest first (by `position`, each once): the numbering
    follows that order.
    """
    total: Py = queue.shape[0]
    known_a = np.zeros(max(total, 1) * width, np.int64)
    known: I64s = known_a
    seq_a = np.zeros(max(total, 1), np.int64)
    seq: I64s = seq_a
    last_a = np.full(max(width, 1), -1, np.int64)
    last_on_pipe: I64s = last_a
    most = 0
    for v in range(total):
        if pred_off[v + 1] - pred_off[v] > most:
            most = pred_off[v + 1] - pred_off[v]
    near_a = np.zeros(max(most, 1), np.int64)
    near: I64s = near_a
    waits: dict = {}
    sets: dict = {}
    count: Py = first_flag
    i: Py
    j: Py
    k: Py
    m: Py
    n: Py
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
        # the sources, latest first, each once (insertion sort: a node has a few)
        n = 0
        for j in range(pred_off[v], pred_off[v + 1]):
            u = pred_idx[j]
            m = n
            while m > 0 and position[near[m - 1]] < position[u]:
                m -= 1
            if m > 0 and near[m - 1] == u:
                continue
            for k in range(n, m, -1):
                near[k] = near[k - 1]
            near[m] = u
            n += 1
        for j in range(n):
            u = near[j]
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
