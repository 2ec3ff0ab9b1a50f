# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""The estimate's per-core loops as kernels compiled ahead of time (Cython, pure-Python mode):
the per-core replay (`share_timing.piped_timing`) over a `TimedShape`'s arrays, the longest paths to
and from each node of a core's nodes on in-order pipes; the contraction of a core's pipe-less
nodes (`share_timing.contracted`, `contract`); and a profile's DDR copies made NoC
transfers (`profile.noc_priced`) over its `CopyRows`; and the plan estimate's list schedule
(`list_schedule.schedule`) over its layer runs.

The rules (share_timing.core_timing's docstring, `contract`'s, `noc_cycles`') have their one
home here. The module is valid Python too: built (`cythonize -i -3` on this file, or the
package's build, setup.py) Python imports the extension module next to it; without one it runs
as it is (slower, the same timings). The shape's lists are CSR arrays: `wait_off`/`wait_idx`
the nodes each node waits for (its earlier predecessors and its pipe's previous node),
`bit_off`/`bit_idx` the release classes each node belongs to (the set bits of its classes).
"""

from array import array

import cython

I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])
I64s2 = cython.typedef(cython.longlong[:, ::1])
F64s = cython.typedef(cython.double[:])
F64s2 = cython.typedef(cython.double[:, ::1])

# NOTE: what proves the C longs do not overflow: a node's cycles are below CYCLES_LIMIT and a
# core has fewer than NODES_LIMIT nodes, so every path (a sum of cycles of distinct nodes) is
# below 2**62; `longest_paths` refuses anything else
CYCLES_LIMIT = 1 << 40
NODES_LIMIT = 1 << 22
# NOTE: below every run's end (at least -1: `schedule_runs`), so never one of them
UNSET = -(1 << 63)


@cython.ccall
def longest_paths(
    cycles: I64s,
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
    n: Py = cycles.shape[0]
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


@cython.ccall
def noc_cycles(
    rows: I64s2,
    spent: F64s,
    slot: I64s,
    kept: I64s2,
    home_yx: I64s2,
    used_yx: I64s2,
    cycles_by_hops: I64s2,
    energy_by_hops: F64s2,
    out: I64s,
    start: Py,
    energy: cython.double,
) -> tuple:
    """From copy `start` on, in order (`rows`: per copy i its operand `rows[0, i]`, core
    `rows[1, i]`, first element `rows[2, i]` and one past its last `rows[3, i]`, shape
    `rows[4, i]` and place in `out` `rows[5, i]`): a copy of an operand kept on chip
    (`slot[operand]`, its number s among the kept, else -1) is a NoC transfer from its core
    (`used_yx[core]`: row, col) to the farthest of the homes its elements lie in (the kept
    operand's `kept[s, 1]` homes from row `kept[s, 0]` of `home_yx`; `kept[s, 2]` elements a
    home, its slice starting `kept[s, 3]` into the tensor; an empty copy: 0 hops);
    `out[rows[5, i]]` takes its cycles by its shape and hops (-1 for a copy not kept), `energy`
    its energy by hops less what it spent (`spent[i]`), copy by copy (a float sum in order).
    Returns (copies done, energy, hops): done < the copies when copy `done`'s price over `hops`
    is not known yet (-1 in `cycles_by_hops`: the caller fills it and goes on from there)."""
    m: Py = rows.shape[1]
    i: Py
    j: Py
    s: Py
    k: Py
    first: I64
    last: I64
    hops: I64
    h: I64
    c: I64
    for i in range(start, m):
        s = slot[rows[0, i]]
        if s < 0:
            out[rows[5, i]] = -1
            continue
        hops = 0
        if rows[3, i] > rows[2, i]:
            first = (rows[2, i] + kept[s, 3]) // kept[s, 2]
            last = (rows[3, i] + kept[s, 3] - 1) // kept[s, 2]
            if first < 0 or last >= kept[s, 1]:
                raise ValueError(f"a copy of elements {rows[2, i]} .. {rows[3, i]} past its homes")
            k = rows[1, i]
            for j in range(kept[s, 0] + first, kept[s, 0] + last + 1):
                h = abs(home_yx[j, 0] - used_yx[k, 0]) + abs(home_yx[j, 1] - used_yx[k, 1])
                if h > hops:
                    hops = h
        if hops >= cycles_by_hops.shape[1]:
            raise ValueError(f"a copy over {hops} hops: the table holds fewer")
        c = cycles_by_hops[rows[4, i], hops]
        if c < 0:
            return i, energy, hops
        out[rows[5, i]] = c
        energy += energy_by_hops[rows[4, i], hops] - spent[i]
    return m, energy, 0


@cython.ccall
def contract(pipe: I64s, pred_off: I64s, pred_idx: I64s, classes: list) -> tuple:
    """`share_timing.contracted`'s rule on nodes 0.. (`pipe`: each one's, -1 none; their
    predecessors, CSR; their classes): the pipe-less nodes joining no two distinct
    predecessors to two nodes are contracted from the last, each node's successors then being
    the kept nodes it reaches through contracted ones. Returns the kept nodes (in order), their
    predecessors among them (renumbered, sorted), their classes with those of the contracted
    nodes reaching them, and the classes of the contracted nodes reaching none; () when a
    predecessor is not earlier than its node (nothing is contracted then)."""
    n: Py = pipe.shape[0]
    v: Py
    j: Py
    k: Py
    u: Py
    w: Py
    x: Py
    i: Py
    lo: Py
    c: Py
    for v in range(n):
        for j in range(pred_off[v], pred_off[v + 1]):
            if pred_idx[j] >= v:
                return ()
    m: Py = pred_off[n]
    succ_off: I64s = array("q", bytes(8 * (n + 1)))
    succ: I64s = array("q", bytes(8 * m))
    fill: I64s = array("q", bytes(8 * n))
    for j in range(m):
        succ_off[pred_idx[j] + 1] += 1
    for v in range(n):
        succ_off[v + 1] += succ_off[v]
        fill[v] = succ_off[v]
    for v in range(n):  # each node's successors in order (a repeated predecessor: repeated)
        for j in range(pred_off[v], pred_off[v + 1]):
            u = pred_idx[j]
            succ[fill[u]] = v
            fill[u] += 1
    # per node: the kept nodes it reaches (directly or through contracted ones) are
    # reach[reach_lo[v]:reach_hi[v]], each once (`seen` marks them by the node walked)
    reach: list = []
    reach_lo: I64s = array("q", bytes(8 * n))
    reach_hi: I64s = array("q", bytes(8 * n))
    alive: I64s = array("q", [1]) * n
    seen: I64s = array("q", [-1]) * n
    mark: I64s = array("q", [-1]) * n
    mask: list = list(classes)
    zero: object = 0
    for v in range(n - 1, -1, -1):
        lo = len(reach)
        for j in range(succ_off[v], succ_off[v + 1]):
            w = succ[j]
            if alive[w]:
                if seen[w] != v:
                    seen[w] = v
                    reach.append(w)
            else:
                for k in range(reach_lo[w], reach_hi[w]):
                    x = reach[k]
                    if seen[x] != v:
                        seen[x] = v
                        reach.append(x)
        reach_lo[v] = lo
        reach_hi[v] = len(reach)
        if pipe[v] >= 0:
            continue
        if reach_hi[v] - lo >= 2:
            c = 0  # its distinct predecessors
            for j in range(pred_off[v], pred_off[v + 1]):
                u = pred_idx[j]
                if mark[u] != v:
                    mark[u] = v
                    c += 1
            if c >= 2:
                continue
        alive[v] = 0
        if reach_hi[v] == lo:
            zero |= classes[v]
        for k in range(lo, reach_hi[v]):
            x = reach[k]
            mask[x] |= classes[v]
    keep: list = []
    kept: list = []
    pos: I64s = array("q", bytes(8 * n))
    for v in range(n):
        if alive[v]:
            pos[v] = len(keep)
            keep.append(v)
            kept.append(mask[v])
    preds: list = [[] for _ in keep]
    for i in range(len(keep)):  # in order: each node's predecessors come sorted
        v = keep[i]
        for k in range(reach_lo[v], reach_hi[v]):
            x = reach[k]
            preds[pos[x]].append(i)
    return keep, [tuple(p) for p in preds], kept, zero


@cython.ccall
@cython.overflowcheck(True)
def schedule_runs(
    runs: list,
    start: Py,
    ends: I64s,
    loads: I64s,
    channels: I64s,
    core_free: I64s,
    mte2_free: I64s,
    shared: cython.bint,
) -> I64:
    """One list schedule of the layer runs `runs` (`list_schedule.LayerRun`s) in order, going on
    from the first `start` runs: `ends`, `loads` and `channels` hold at 0 the start's (0) and at
    1 + i run i's end, when its cores finished its DDR loads and when the shared DDR channel takes
    the next bytes after it (used only when `shared`), set here from `start` + 1 on (room for
    them: the caller's); `core_free`/`mte2_free` per core after its last barrier and its last
    DDR load, which it extends. Returns the latency: the latest of `ends` up to the last run's.

    A run's input classes are released at the latest of its cores' barrier and its writers'
    ends plus their flags (class 0: its cores' last DDR load); a timing ends at the latest of
    (release + tail) over its classes and (earliest release + cold); the run at the latest of
    its timings' ends (the first of the latest gives its MTE2 tail) and, with a shared channel,
    of its bytes' passage plus the cycles it runs after its last load.

    NOTE: compiled, C long longs with overflow checks (an overflow raises, never wraps); as
    plain Python, Python ints stored in the caller's C long long arrays (storing one past a
    C long raises): the same values either way."""
    spans: tuple
    span: tuple
    writers: tuple
    srcs: tuple
    timings: tuple
    tails: tuple
    pair: tuple
    data: tuple
    a: Py
    b: Py
    c: Py
    k: Py
    at: Py = start
    first: cython.bint
    barrier: I64 = 0
    loaded: I64 = 0
    release: I64
    t: I64
    r: I64
    end: I64
    tail: I64
    begin: I64
    t_end: I64
    ready: I64
    lead_held: I64
    rest_held: I64
    after: I64
    channel: I64 = channels[start]
    latest: I64 = 0
    classes: Py
    i: Py
    size: Py = 8
    releases: I64s = array("q", bytes(8 * size))  # by release class: grown for a run with more
    row: tuple
    cost: tuple
    for run in runs:
        # NOTE: a tuple subclass's items are a tuple's: each read as one once checked a tuple
        if not isinstance(run, tuple):
            raise TypeError("a run is a tuple (LayerRun)")
        row = cython.cast(tuple, run)
        if not isinstance(row[0], tuple):
            raise TypeError("a run's cost is a tuple (RunCost)")
        cost = cython.cast(tuple, row[0])
        spans = row[1]
        data = row[3]
        srcs = row[4]
        timings = cost[0]
        lead_held = cost[3]
        rest_held = cost[4]
        after = cost[5]
        first = True
        for span in spans:
            a = span[0]
            b = span[1]
            for c in range(a, b):
                t = core_free[c]
                if first or t > barrier:
                    barrier = t
                t = mte2_free[c]
                if first or t > loaded:
                    loaded = t
                first = False
        if first:
            raise ValueError("a run on no cores")
        classes = len(srcs) + 1
        if classes > size:
            size = classes
            releases = array("q", bytes(8 * size))
        releases[0] = loaded
        i = 1
        for writers in srcs:
            release = barrier
            for pair in writers:
                k = pair[0]
                t = ends[k]
                t += pair[1]
                if t > release:
                    release = t
            releases[i] = release
            i += 1
        end = -1
        tail = 0
        for timing in timings:
            begin = -1  # the earliest release of its classes (barrier if it has none)
            t_end = 0  # the latest release + tail
            tails = timing.tails
            for pair in tails:
                c = pair[0]
                if c < 0 or c >= classes:
                    raise IndexError("a release class past the run's inputs")
                r = releases[c]
                if begin < 0 or r < begin:
                    begin = r
                t = pair[1]
                t += r
                if t > t_end:
                    t_end = t
            t = timing.cold
            t += barrier if begin < 0 else begin
            if t > t_end:
                t_end = t
            if t_end > end:
                end = t_end
                tail = timing.mte2_tail
        if shared:
            if lead_held:
                channel = max(channel, loaded) + lead_held
            if rest_held:
                ready = loaded  # the earliest release of its data classes, if any
                first = True
                for c in data:
                    if c < 0 or c >= classes:
                        raise IndexError("a release class past the run's inputs")
                    r = releases[c]
                    if first or r < ready:
                        ready = r
                    first = False
                channel = max(channel, ready) + rest_held
            t = channel + after
            if t > end:  # its bytes came late through the channel
                end = t
                tail = after
        t = end - tail
        for span in spans:
            for c in range(span[0], span[1]):
                core_free[c] = end
                mte2_free[c] = t
        at += 1
        ends[at] = end
        loads[at] = t
        channels[at] = channel
    for k in range(at + 1):
        if ends[k] > latest:
            latest = ends[k]
    return latest


@cython.ccall
def cores_after(runs: list, k: Py, ends: I64s, loads: I64s, core_free: I64s, mte2_free: I64s):
    """Set `core_free`/`mte2_free` (per core) to where `schedule_runs` left them after the first
    k of `runs`, from those runs' `ends` and `loads` (as it sets them): each core's from the
    last of them on it (0: none)."""
    spans: tuple
    span: tuple
    c: Py
    i: Py
    cores: Py = len(core_free)
    left: Py = cores
    unset: I64 = UNSET
    for c in range(cores):
        core_free[c] = unset
    i = k
    while left > 0 and i > 0:
        i -= 1
        spans = runs[i][1]
        for span in spans:
            for c in range(span[0], span[1]):
                if core_free[c] == unset:
                    core_free[c] = ends[i + 1]
                    mte2_free[c] = loads[i + 1]
                    left -= 1
    if left > 0:
        for c in range(cores):
            if core_free[c] == unset:
                core_free[c] = 0
                mte2_free[c] = 0
