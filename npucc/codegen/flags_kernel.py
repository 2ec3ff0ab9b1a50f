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
    words: tuple,
    first_flag: Py,
    remote: tuple,
) -> tuple:
    """The flags of nodes run in `order` on queues `queue` (a pipe's index 0 .. width-1, -1:
    ctrl), `position` each node's index in `order`, numbered from `first_flag` + 1: (tails,
    count), by node id its line's tail of the flags it waits for and sets ("": none), and the
    last number used.

    `words` is (wait, set, sep, bar): a flag's word on the line that waits for it is
    `wait[src queue * (width + 1) + dst queue] + str(number)` (queue `width`: ctrl), on the one
    that sets it the same of `set`; a tail is `bar` and the node's words joined by `sep`, its
    waits first, each group in number order, then `remote` = (waits, sets), node -> words
    of flags to or from other cores, after the node's own of each group.

    NOTE: a node's sources are taken latest first (by `position`, each once, `latest_first`):
    the numbering follows that order. Each flag is kept as numbers in arrays and the words are
    made node by node at the end, no Python list per node kept (dicts of lists of flag texts
    took ~3/4 of the kernel's time, their objects' allocation).
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
    most: Py = max(sources.shape[0], 1)  # NOTE: at most one flag an edge
    setter_a = np.zeros(most, np.int64)
    setter: I64s = setter_a
    pair_a = np.zeros(most, np.int64)
    pair: I64s = pair_a
    wait_start_a = np.zeros(max(total, 1), np.int64)  # node v waits for flags start .. end - 1
    wait_start: I64s = wait_start_a
    wait_end_a = np.zeros(max(total, 1), np.int64)
    wait_end: I64s = wait_end_a
    count: Py = 0  # flags so far (flag f: number first_flag + f + 1)
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
        wait_start[v] = count
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
            setter[count] = u
            pair[count] = (uq if uq >= 0 else width) * (width + 1) + (q if q >= 0 else width)
            count += 1
            urow = u * width
            for k in range(width):
                if known[urow + k] > known[row + k]:
                    known[row + k] = known[urow + k]
        wait_end[v] = count
        if q >= 0:
            known[row + q] = mine
            last_on_pipe[q] = v
    return _tails(total, count, setter_a, pair_a, wait_start_a, wait_end_a, words, first_flag,
                  remote), first_flag + count  # fmt: skip


@cython.cfunc
def _tails(
    total: Py,
    count: Py,
    setter: I64s,
    pair: I64s,
    wait_start: I64s,
    wait_end: I64s,
    words: tuple,
    first_flag: Py,
    remote: tuple,
) -> list:
    """Each node's line tail (`flag_edges`) from its flags: those it waits for, numbered
    `wait_start[v]` .. `wait_end[v]` - 1 (from 0), and those it sets (`setter`)."""
    wait_words: list = words[0]
    set_words: list = words[1]
    sep: str = words[2]
    bar: str = words[3]
    remote_waits: dict = remote[0]
    remote_sets: dict = remote[1]
    # the flags each node sets, in number order (counting sort by setter)
    set_off_a = np.zeros(total + 1, np.int64)
    set_off: I64s = set_off_a
    set_flag_a = np.zeros(max(count, 1), np.int64)
    set_flag: I64s = set_flag_a
    f: Py
    v: Py
    for f in range(count):
        set_off[setter[f] + 1] += 1
    for v in range(total):
        set_off[v + 1] += set_off[v]
    fill_a = set_off_a[:total].copy()
    fill: I64s = fill_a
    for f in range(count):
        v = setter[f]
        set_flag[fill[v]] = f
        fill[v] += 1
    nums: list = [str(first_flag + f + 1) for f in range(count)]
    every_a = np.arange(max(count, 1), dtype=np.int64)  # a node's waits: flags start .. end - 1
    every: I64s = every_a
    far_a = np.zeros(max(total, 1), np.int8)  # nodes with flags to or from other cores
    far: cython.char[:] = far_a
    for v in remote_waits:
        far[v] = 1
    for v in remote_sets:
        far[v] = 1
    tails: list = [""] * total
    for v in range(total):
        if wait_start[v] == wait_end[v] and set_off[v] == set_off[v + 1] and not far[v]:
            continue
        # NOTE: `bar` and the words joined by `sep`, as pieces joined once (no string a word)
        parts: list = [bar]
        _words(parts, wait_words, pair, nums, every, wait_start[v], wait_end[v], sep)
        if far[v] and v in remote_waits:
            _far_words(parts, remote_waits[v], sep)
        _words(parts, set_words, pair, nums, set_flag, set_off[v], set_off[v + 1], sep)
        if far[v] and v in remote_sets:
            _far_words(parts, remote_sets[v], sep)
        if len(parts) > 1:
            parts.pop()  # the last sep
            tails[v] = "".join(parts)
    return tails


@cython.cfunc
def _words(
    parts: list, words: list, pair: I64s, nums: list, flags: I64s, lo: Py, hi: Py, sep: str
) -> None:
    """Append the words of flags `flags[lo:hi]` (`words` by queue pair), each then `sep`."""
    k: Py
    f: Py
    for k in range(lo, hi):
        f = flags[k]
        parts.append(words[pair[f]])
        parts.append(nums[f])
        parts.append(sep)


@cython.cfunc
def _far_words(parts: list, words: list, sep: str) -> None:
    """Append the words of flags to or from other cores, each then `sep`."""
    for word in words:
        parts.append(word)
        parts.append(sep)
