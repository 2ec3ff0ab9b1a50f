# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""The estimate's per-core replay (`profile.piped_timing`) as a kernel compiled ahead of time
(Cython, pure-Python mode) over a `TimedShape`'s arrays: the longest paths to and from each node
of a core's nodes on in-order pipes.

The rule (profile.core_timing's docstring) has its one home here. The module is valid Python too:
built (`cythonize -i -3` on this file, or the package's build, setup.py) Python imports the
extension module next to it; without one it runs as it is (slower, the same timings). The shape's
lists are CSR arrays: `wait_off`/`wait_idx` the nodes each node waits for (its earlier
predecessors and its pipe's previous node), `bit_off`/`bit_idx` the release classes each node
belongs to (the set bits of its classes).
"""

import cython

I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])

# NOTE: what proves the C longs do not overflow: a node's cycles are below CYCLES_LIMIT and a
# core has fewer than NODES_LIMIT nodes, so every path (a sum of cycles of distinct nodes) is
# below 2**62; `longest_paths` refuses anything else
CYCLES_LIMIT = 1 << 40
NODES_LIMIT = 1 << 22


@cython.ccall
def longest_paths(
    cycles: list,
    wait_off: I64s,
    wait_idx: I64s,
    bit_off: I64s,
    bit_idx: I64s,
    last_mte2: Py,
    dur: I64s,
    finish: I64s,
    path: I64s,
    tail: I64s,
) -> tuple:
    """Of nodes 0.. in order taking `cycles` each (0 on a pipe-less node): their cold makespan
    and the finish of node `last_mte2` (0 when it is -1); `tail[k]` is set to the longest path
    from a node of class k to the end (-1: no node of it). `dur`, `finish`, `path`: scratch of
    the nodes' number each (overwritten)."""
    n: Py = len(cycles)
    if n >= NODES_LIMIT:
        raise ValueError(f"{n} nodes on one core: at most {NODES_LIMIT - 1} are timed")
    v: Py
    j: Py
    u: Py
    d: I64
    t: I64
    f: I64
    b: I64
    cold: I64 = 0
    for v in range(n):
        d = cycles[v]
        if d < 0 or d >= CYCLES_LIMIT:
            raise ValueError(f"a node of {d} cycles: only 0 .. {CYCLES_LIMIT - 1} are timed")
        dur[v] = d
        t = 0
        for j in range(wait_off[v], wait_off[v + 1]):
            f = finish[wait_idx[j]]
            if f > t:
                t = f
        t += d
        finish[v] = t
        path[v] = 0
        if t > cold:
            cold = t
    mte2: I64 = finish[last_mte2] if last_mte2 >= 0 else 0
    # the longest path from each node to the end: from its successors' (final when it is
    # reached, walking back) plus its cycles
    for v in range(n - 1, -1, -1):
        b = path[v] + dur[v]
        path[v] = b
        for j in range(wait_off[v], wait_off[v + 1]):
            u = wait_idx[j]
            if path[u] < b:
                path[u] = b
    for j in range(tail.shape[0]):
        tail[j] = -1
    for v in range(n):
        b = path[v]
        for j in range(bit_off[v], bit_off[v + 1]):
            u = bit_idx[j]
            if b > tail[u]:
                tail[u] = b
    return cold, mte2
