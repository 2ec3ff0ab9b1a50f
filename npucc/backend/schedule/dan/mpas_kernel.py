# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""MPAS's order loop as a kernel compiled ahead of time (Cython, pure-Python mode) over the
struct-of-arrays of `mpas.Prep`.

The rules are mpas.py's docstring's; this module is their one home. It is valid Python too: built
(`cythonize -i -3` on this file, or the package's build, setup.py) Python imports the extension
module next to it; without one it runs as it is (slow, the same orders). `Graph` holds the graph's
arrays (CSR lists: `*_off` offsets, `*_idx` entries) and the run's constants, `State` the run's
arrays; the scalars a run changes live in `State.sc` at the indices below. A key is one int64
that orders as eq. 21's tuple (lambda, Delta, -h, id): ((lambda << dbits) + D + Delta) << vbits |
rank, rank the node's place in (-h, id) order (mode "memory": its id), so `inv[key & vmask]` is
its node; `mpas.prepare` proves the bits fit. A heap is a row of `State.heaps`: its size at [0],
a 1-based binary min-heap after it (a sorted run is a valid heap).
"""

import cython

# NOTE: the kernel allocates nothing (mpas.py makes every array) and raises nothing: no bounds
# checks (mpas.py sizes every array for its indices), no exceptions from its C functions
I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])
I64s2 = cython.typedef(cython.longlong[:, ::1])
Bools = cython.typedef(cython.uchar[:])  # numpy bool_ arrays

CONE_LIMIT = 256  # unscheduled ancestors searched per L0 admission (rule 7 deadlock check)
SCALARS = 9  # State.sc's length
# State.sc: the run's scalars
EPOCH = cython.declare(Py, 0)  # L0 allocations and releases so far
FIRST_LIVE = cython.declare(Py, 1)  # the live ALLOC node of the first tier holding one, or -1
NEAR_EPOCH = cython.declare(Py, 2)  # the epoch near_live was last confirmed at, or -1 (emit drops)
NEAR_OF = cython.declare(Py, 3)  # the first live buffer near_live was made for
NEAR_GEN = cython.declare(Py, 4)  # near_live's rebuilds: `found`/`prod` marks equal to it are its
SEEN_GEN = cython.declare(Py, 5)  # needs_tier's searches: `seen` marks equal to it are the search's
MARK_GEN = cython.declare(Py, 6)  # disjointness tests: `mark` marks equal to it: the first set's
NORD = cython.declare(Py, 7)  # nodes ordered so far
NPK = cython.declare(Py, 8)  # size of near_parked (the parked nodes of near_live's set)
CONE = cython.declare(Py, CONE_LIMIT)
READY = cython.declare(Py, 0)  # State.heaps: the ready heap
FREES = cython.declare(Py, 1)  # the ready FREEs; 2 + c: parked class c


@cython.dataclasses.dataclass(eq=False)
@cython.cclass
class Graph:
    """The graph's arrays and the run's constants (read only)."""

    pred_off: I64s
    pred_idx: I64s
    succ_off: I64s
    succ_idx: I64s
    is_alloc: Bools
    is_free: Bools
    size_pk: I64s
    l0_tier: I64s
    free_l0: I64s
    users_off: I64s  # L0 ALLOC node -> consumers of its buffer (rule 7), Python set order
    users_idx: I64s
    l0p_off: I64s  # per node: its L0 ALLOC predecessors, in preds order (pairs j)
    l0p_idx: I64s
    low: I64s  # per node: its key's low field (rank)
    inv: I64s  # rank -> node
    levels: I64s  # per lambda: ((lambda << dbits) + D) << vbits
    scale: I64  # 1 << vbits, or 0 without Delta
    vmask: I64
    single_l0: cython.bint
    strict: cython.bint


@cython.dataclasses.dataclass(eq=False)
@cython.cclass
class State:
    """A run's arrays."""

    sc: I64s
    done: Bools
    pending: I64s  # unfinished non-ALLOC predecessors
    jit: I64s  # L1+UB bytes of not-yet-done ALLOC predecessors
    jit_count: I64s
    enabled: I64s  # L1+UB bytes of FREEs whose last pending predecessor is v
    key: I64s
    in_ready: Bools
    parked: I64s  # the class of a parked node, or -1
    park_key: I64s  # its key, or -1
    woken_at: I64s  # the epoch a node was woken in, or -1
    sure: Bools  # passes in every state with no tier live (mpas.py: sure)
    cleared: Bools  # per pair j: needs_tier's no is final
    witness: I64s  # per pair j: the ancestor needs_tier last found, or -1
    live_l0: I64s  # per L0 tier: its live ALLOC node, or -1
    live_count: I64s
    n_parked: I64s  # per class
    idle: I64s  # per class: the epoch in which it had no node able to run, or -1
    found: I64s  # near_live's set: marks
    prod: I64s  # near_live's unscheduled producers: marks
    npk_pos: I64s  # near_parked: a node's place in npk, or -1
    npk: I64s
    seen: I64s  # needs_tier's marks
    stack: I64s  # needs_tier's stack
    mark: I64s  # disjointness marks
    order: I64s
    keys: I64s  # _near_keys's
    heaps: I64s2  # per heap a row: its size at [0], a 1-based binary min-heap after it


@cython.cfunc
@cython.exceptval(check=False)
def _push(g: Graph, s: State, i: Py, k: I64) -> cython.void:
    """Push k on heap i (its stale entries dropped first when it is full)."""
    h = s.heaps[i]
    if h[0] + 1 == len(h):
        _compact(g, s, i)
    m = h[0] + 1
    j = m
    while j > 1:
        p = j >> 1
        if h[p] <= k:
            break
        h[j] = h[p]
        j = p
    h[j] = k
    h[0] = m


@cython.cfunc
@cython.exceptval(check=False)
def _pop(h: I64s) -> I64:
    """Pop the least key."""
    m = h[0]
    top = h[1]
    k = h[m]
    m -= 1
    h[0] = m
    i = 1
    while True:
        c = 2 * i
        if c > m:
            break
        if c < m and h[c + 1] < h[c]:
            c += 1
        if k <= h[c]:
            break
        h[i] = h[c]
        i = c
    if m:
        h[i] = k
    return top


@cython.cfunc
@cython.exceptval(check=False)
def _sift(a: I64s, i: Py, m: Py) -> cython.void:
    """Sift a[i] down the max-heap a[:m]."""
    x = a[i]
    while True:
        c = 2 * i + 1
        if c >= m:
            break
        if c + 1 < m and a[c + 1] > a[c]:
            c += 1
        if x >= a[c]:
            break
        a[i] = a[c]
        i = c
    a[i] = x


@cython.ccall
@cython.exceptval(check=False)
def _sort(a: I64s) -> cython.void:
    """Sort a in place (heapsort: the kernel allocates nothing)."""
    m = len(a)
    for i in range(m // 2 - 1, -1, -1):
        _sift(a, i, m)
    for end in range(m - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        _sift(a, 0, end)


@cython.cfunc
@cython.exceptval(check=False)
def _live(g: Graph, s: State, i: Py, k: I64) -> cython.bint:
    """Is k a live entry of heap i: the key its node is ready with (i < 2) or parked with in
    class i - 2? (A stale entry is skipped wherever it is met: dropping it changes nothing.)"""
    x = g.inv[k & g.vmask]
    if i < 2:
        return s.in_ready[x] and not s.done[x] and s.key[x] == k
    return s.parked[x] == i - 2 and s.park_key[x] == k


@cython.cfunc
@cython.exceptval(check=False)
def _compact(g: Graph, s: State, i: Py) -> cython.void:
    """Keep heap i's live entries, once each, sorted (a valid heap)."""
    # NOTE: a node has one live key per heap, so at most n entries stay (heaps hold 2n + 1)
    h = s.heaps[i]
    m = 0
    for j in range(1, h[0] + 1):
        if _live(g, s, i, h[j]):
            m += 1
            h[m] = h[j]
    _sort(h[1 : m + 1])
    u = min(m, 1)
    for j in range(2, m + 1):
        if h[j] != h[u]:
            u += 1
            h[u] = h[j]
    h[0] = u


@cython.cfunc
@cython.exceptval(check=False)
def _first_live(s: State) -> cython.void:
    """Recompute FIRST_LIVE from live_l0."""
    a0, a1, a2 = s.live_l0[0], s.live_l0[1], s.live_l0[2]
    s.sc[FIRST_LIVE] = a0 if a0 >= 0 else a1 if a1 >= 0 else a2


@cython.cfunc
@cython.exceptval(check=False)
def _ready_key(g: Graph, s: State, v: Py) -> I64:
    """v's key now (eq. 21)."""
    if g.is_free[v]:
        return g.levels[0] - g.size_pk[v] * g.scale + g.low[v]
    top = g.levels[2] if s.jit_count[v] else g.levels[1]
    return top + (s.jit[v] - s.enabled[v]) * g.scale + g.low[v]


@cython.cfunc
@cython.exceptval(check=False)
def _make_ready(g: Graph, s: State, v: Py) -> cython.void:
    """Make v ready (FREEs apart: their level is below every other key)."""
    s.in_ready[v] = True
    k = s.key[v] = _ready_key(g, s, v)
    if g.is_free[v]:
        _push(g, s, FREES, k)
    else:
        _push(g, s, READY, k)


@cython.cfunc
@cython.exceptval(check=False)
def _refresh(g: Graph, s: State, v: Py) -> cython.void:
    """Re-push a ready v whose key changed (lazy decrease-key)."""
    if s.in_ready[v]:
        k = _ready_key(g, s, v)
        if k != s.key[v]:
            s.key[v] = k
            _push(g, s, READY, k)


@cython.cfunc
@cython.exceptval(check=False)
def _free_progress(g: Graph, s: State, f: Py) -> cython.void:
    """FREE f lost a pending predecessor: credit its last one, or make f ready."""
    if s.pending[f] == 1:
        p = -1
        for i in range(g.pred_off[f], g.pred_off[f + 1]):
            p = g.pred_idx[i]
            if not s.done[p] and not g.is_alloc[p]:
                break
        s.enabled[p] += g.size_pk[f]
        _refresh(g, s, p)
    elif s.pending[f] == 0:
        _make_ready(g, s, f)


@cython.cfunc
@cython.exceptval(check=False)
def _needs_tier(g: Graph, s: State, u: Py, v: Py, t: I64, j: Py) -> cython.bint:
    """Does an unscheduled ancestor of a consumer of u's buffer (not v) allocate tier t?
    (Pair j = (u, v), not cleared.)"""
    w = s.witness[j]
    if w >= 0 and not s.done[w]:  # still unscheduled: the answer stands
        return True
    gen = s.sc[SEEN_GEN] = s.sc[SEEN_GEN] + 1
    seen = s.seen
    seen[u] = gen
    seen[v] = gen
    count = 2
    stack = s.stack
    top = 0
    for i in range(g.users_off[u], g.users_off[u + 1]):
        c = g.users_idx[i]
        if c != v:
            stack[top] = c
            top += 1
    while top and count < CONE:
        top -= 1
        x = stack[top]
        for i in range(g.pred_off[x], g.pred_off[x + 1]):
            y = g.pred_idx[i]
            if seen[y] != gen and not s.done[y]:
                if g.l0_tier[y] == t:
                    s.witness[j] = y
                    return True
                seen[y] = gen
                count += 1
                stack[top] = y
                top += 1
    if not top:
        s.cleared[j] = True
    return False


@cython.cfunc
@cython.exceptval(check=False)
def _disjoint(g: Graph, s: State, a: Py, u: Py) -> cython.bint:
    """Do the L0 buffers of a and u share no consumer?"""
    gen = s.sc[MARK_GEN] = s.sc[MARK_GEN] + 1
    for i in range(g.users_off[a], g.users_off[a + 1]):
        s.mark[g.users_idx[i]] = gen
    for i in range(g.users_off[u], g.users_off[u + 1]):
        if s.mark[g.users_idx[i]] == gen:
            return False
    return True


@cython.cfunc
@cython.exceptval(check=False)
def _blocker(g: Graph, s: State, v: Py) -> I64:
    """The L0 tier v must wait for (rule 7), or -1."""
    for j in range(g.l0p_off[v], g.l0p_off[v + 1]):
        u = g.l0p_idx[j]
        if not s.done[u]:
            t = g.l0_tier[u]
            if s.live_count[t] or (g.strict and not s.cleared[j] and _needs_tier(g, s, u, v, t, j)):
                return t
            if s.sc[FIRST_LIVE] >= 0:  # some tier is live
                for i in range(len(s.live_l0)):  # NOTE: tier t holds none (live_count[t] == 0)
                    a = s.live_l0[i]
                    if a >= 0 and _disjoint(g, s, a, u):
                        return g.l0_tier[a]
    return -1


@cython.cfunc
@cython.exceptval(check=False)
def _futile(g: Graph, s: State, v: Py) -> I64:
    """The L0 tier blocking every successor of v, when v would allocate L1/UB for nothing."""
    tier = -1
    for i in range(g.succ_off[v], g.succ_off[v + 1]):
        w = g.succ_idx[i]
        if g.is_free[w]:
            continue
        b = _blocker(g, s, w)
        if b < 0:
            return -1
        if tier < 0:
            tier = b
    return tier


@cython.cfunc
@cython.exceptval(check=False)
def _passes(g: Graph, s: State, v: Py) -> cython.bint:
    """Would v run now (no tier to wait for, no allocation for nothing)?"""
    return _test(g, s, v, s.jit[v] != 0)


@cython.cfunc
@cython.exceptval(check=False)
def _settled(g: Graph, s: State, v: Py) -> cython.bint:
    """Is every pending L0 admission of v a cleared pair (without strict: checked by none)?"""
    if not g.strict:
        return True
    for j in range(g.l0p_off[v], g.l0p_off[v + 1]):
        if not s.cleared[j] and not s.done[g.l0p_idx[j]]:
            return False
    return True


@cython.cfunc
@cython.exceptval(check=False)
def _passes_unheld(g: Graph, s: State, v: Py) -> cython.bint:
    """passes(v) while no L0 tier is live (sure[v] kept)."""
    if s.sure[v]:
        return True
    if not _passes(g, s, v):
        return False
    if _settled(g, s, v):
        w = -1
        if s.jit[v]:
            for i in range(g.succ_off[v], g.succ_off[v + 1]):
                if not g.is_free[g.succ_idx[i]]:
                    w = g.succ_idx[i]
                    break
        s.sure[v] = w < 0 or _settled(g, s, w)
    return True


@cython.cfunc
@cython.exceptval(check=False)
def _test(g: Graph, s: State, v: Py, useful: cython.bint) -> cython.bint:
    """fallback's tests: unblocked, and (`useful`) not allocating for nothing."""
    return _blocker(g, s, v) < 0 and not (useful and _futile(g, s, v) >= 0)


@cython.cfunc
@cython.exceptval(check=False)
def _need(g: Graph, s: State, v: Py) -> I64:
    """The L0 tier of v's first unscheduled L0 allocation."""
    u = -1
    for j in range(g.l0p_off[v], g.l0p_off[v + 1]):
        u = g.l0p_idx[j]
        if not s.done[u]:
            break
    return g.l0_tier[u]


@cython.cfunc
@cython.exceptval(check=False)
def _npk_add(s: State, v: Py) -> cython.void:
    """Add v to near_parked."""
    if s.npk_pos[v] < 0:
        m = s.sc[NPK]
        s.npk[m] = v
        s.npk_pos[v] = m
        s.sc[NPK] = m + 1


@cython.cfunc
@cython.exceptval(check=False)
def _npk_discard(s: State, v: Py) -> cython.void:
    """Take v out of near_parked, if there."""
    i = s.npk_pos[v]
    if i >= 0:
        m = s.sc[NPK] - 1
        last = s.npk[m]
        s.npk[i] = last
        s.npk_pos[last] = i
        s.npk_pos[v] = -1
        s.sc[NPK] = m


@cython.cfunc
@cython.exceptval(check=False)
def _park(g: Graph, s: State, k: I64, c: Py) -> cython.void:
    """Park the node of key k in class c."""
    v = g.inv[k & g.vmask]
    s.parked[v] = c
    s.park_key[v] = k
    if s.sc[NEAR_EPOCH] >= 0 and s.found[v] == s.sc[NEAR_GEN]:
        _npk_add(s, v)
    s.n_parked[c] += 1
    s.idle[c] = -1
    _push(g, s, 2 + c, k)


@cython.cfunc
@cython.exceptval(check=False)
def _unpark(s: State, v: Py) -> cython.void:
    """Take v out of its class (its heap entry goes stale)."""
    s.n_parked[s.parked[v]] -= 1
    s.parked[v] = -1
    s.park_key[v] = -1
    _npk_discard(s, v)


@cython.cfunc
@cython.exceptval(check=False)
def _head(g: Graph, s: State, c: Py) -> I64:
    """The best key parked in class c (stale heap entries dropped), or -1."""
    h = s.heaps[2 + c]
    while h[0]:
        k = h[1]
        if _live(g, s, 2 + c, k):
            return k
        _pop(h)
    return -1


@cython.cfunc
@cython.exceptval(check=False)
def _near_current(s: State) -> cython.bint:
    """Is near_live() of the current state the one kept? (An L0 change since that leaves the
    same first live buffer leaves it so: it depends on that buffer and what is done.)"""
    sc = s.sc
    if sc[NEAR_EPOCH] == sc[EPOCH]:
        return True
    if sc[NEAR_EPOCH] < 0 or sc[FIRST_LIVE] != sc[NEAR_OF]:
        return False
    sc[NEAR_EPOCH] = sc[EPOCH]
    return True


@cython.cfunc
@cython.exceptval(check=False)
def _no_wake(g: Graph, s: State) -> cython.bint:
    """wake's first test: with strict and near_live current, no parked node near it can pass."""
    sc = s.sc
    return g.strict and (sc[NEAR_EPOCH] == sc[EPOCH] or _near_current(s)) and not sc[NPK]


@cython.cfunc
@cython.exceptval(check=False)
def _found(s: State, x: Py, gen: I64) -> cython.void:
    """Put x in near_live's set (and near_parked if parked)."""
    s.found[x] = gen
    if s.parked[x] >= 0:
        _npk_add(s, x)


@cython.cfunc
@cython.exceptval(check=False)
def _near_live(g: Graph, s: State) -> cython.void:
    """Keep the set of nodes sharing a consumer with the first live L0 buffer, and its parked
    ones (near_parked)."""
    # while an L0 tier is live only these can pass (any other would start a tile that cannot
    # finish), so waking costs the local fan-out, not a scan of every waiter
    sc = s.sc
    if sc[NEAR_EPOCH] == sc[EPOCH] or _near_current(s):
        return
    a = sc[FIRST_LIVE]
    gen = sc[NEAR_GEN] = sc[NEAR_GEN] + 1
    while sc[NPK]:
        _npk_discard(s, s.npk[sc[NPK] - 1])
    pred_off, pred_idx = g.pred_off, g.pred_idx
    for i in range(g.users_off[a], g.users_off[a + 1]):  # consumers, producers, their loads
        w = g.users_idx[i]
        _found(s, w, gen)
        for p in range(pred_off[w], pred_off[w + 1]):
            x = pred_idx[p]
            if not s.done[x]:
                _found(s, x, gen)
                s.prod[x] = gen
                for q in range(pred_off[x], pred_off[x + 1]):
                    _found(s, pred_idx[q], gen)
    sc[NEAR_EPOCH] = sc[EPOCH]
    sc[NEAR_OF] = a


@cython.cfunc
@cython.exceptval(check=False)
def _near_keys(s: State, c: Py) -> Py:
    """Put the keys of class c's nodes in near_parked in s.keys, best first; their number."""
    m = 0
    for i in range(s.sc[NPK]):
        x = s.npk[i]
        if s.parked[x] == c:
            s.keys[m] = s.park_key[x]
            m += 1
    _sort(s.keys[:m])
    return m


@cython.cfunc
@cython.exceptval(check=False)
def _wake(g: Graph, s: State, tested: cython.bint) -> cython.void:
    """Make ready the best node of each class that can run, if any (`tested`: the caller has
    made its first test)."""
    # a class with none idles until the next L0 change (without `strict`, nothing else
    # changes what can run)
    # NOTE: waking makes nodes ready and schedules none, so what is done, which L0 tiers are
    # live and near_live stay the same for the four classes, and waking a node of one class
    # changes no other class's parked nodes
    sc = s.sc
    e = sc[EPOCH]
    if not tested and _no_wake(g, s):
        return  # (near_live is current, so a tier is live) no parked node can pass
    any_live = sc[FIRST_LIVE] >= 0
    if any_live and g.strict:
        _near_live(g, s)
        if not sc[NPK]:  # no parked node can pass
            return
    for c in range(4):
        if not s.n_parked[c] or s.idle[c] == e:
            continue
        k = -1
        if c < 3 and s.live_count[c]:
            pass  # its own tier is held: nothing in it can run
        elif any_live:  # only the nodes near the live buffer can pass
            _near_live(g, s)
            for i in range(_near_keys(s, c)):
                if _passes(g, s, g.inv[s.keys[i] & g.vmask]):
                    k = s.keys[i]
                    break
        else:  # no tier live: only strict's ancestor check or futility can hold it back
            k = _head(g, s, c)
            if k >= 0:
                v = g.inv[k & g.vmask]
                if not (s.sure[v] or _passes_unheld(g, s, v)):
                    k = -1
        if k >= 0:
            v = g.inv[k & g.vmask]
            _unpark(s, v)
            s.woken_at[v] = e
            _make_ready(g, s, v)
        elif not g.strict:
            s.idle[c] = e


@cython.cfunc
@cython.exceptval(check=False)
def _first(g: Graph, s: State, c: Py, useful: cython.bint) -> I64:
    """The best key of class c that passes fallback's test, or -1 (its heap compacted: scanned
    in key order without popping each)."""
    _compact(g, s, 2 + c)
    h = s.heaps[2 + c]
    for i in range(1, h[0] + 1):
        if _test(g, s, g.inv[h[i] & g.vmask], useful):
            return h[i]
    return -1


@cython.cfunc
@cython.exceptval(check=False)
def _fallback(g: Graph, s: State) -> I64:
    """When nothing is ready: the best parked key no tier holds back, futile ones last; -1."""
    # NOTE: testing changes nothing parked nor near_live (made when a class first needs it)
    live = s.sc[FIRST_LIVE] >= 0
    for pas in range(2):
        useful = pas == 0
        best = -1
        for c in range(4):
            if not s.n_parked[c] or (c < 3 and s.live_count[c]):
                continue
            if live:
                _near_live(g, s)
                for i in range(_near_keys(s, c)):  # NOTE: each tested (needs_tier records)
                    k = s.keys[i]
                    if _test(g, s, g.inv[k & g.vmask], useful) and (best < 0 or k < best):
                        best = k
            else:
                k = _first(g, s, c, useful)
                if k >= 0 and (best < 0 or k < best):
                    best = k
        if best >= 0:
            return best
    if g.strict:
        return -1
    # rule 7 is a preference here: break the wait
    best = -1
    for c in range(4):
        k = _head(g, s, c)
        if k >= 0 and (best < 0 or k < best):
            best = k
    return best


@cython.cfunc
@cython.exceptval(check=False)
def _emit(g: Graph, s: State, v: Py) -> cython.void:
    """Schedule v."""
    sc = s.sc
    s.done[v] = True
    if s.prod[v] == sc[NEAR_GEN]:
        sc[NEAR_EPOCH] = -1
    s.order[sc[NORD]] = v
    sc[NORD] += 1
    if g.is_alloc[v]:
        t = g.l0_tier[v]
        if g.single_l0 and t >= 0:
            s.live_l0[t] = v
            s.live_count[t] += 1
            sc[EPOCH] += 1
            _first_live(s)
        size = g.size_pk[v]
        for i in range(g.succ_off[v], g.succ_off[v + 1]):
            w = g.succ_idx[i]
            s.jit[w] -= size
            s.jit_count[w] -= 1
            if not g.is_free[w]:  # NOTE: a FREE's key does not depend on jit
                _refresh(g, s, w)
        return
    t = g.free_l0[v]
    if t >= 0 and g.single_l0:
        s.live_count[t] -= 1
        if not s.live_count[t]:
            s.live_l0[t] = -1
            _first_live(s)
        sc[EPOCH] += 1
        _wake(g, s, False)
    for i in range(g.succ_off[v], g.succ_off[v + 1]):
        w = g.succ_idx[i]
        left = s.pending[w] = s.pending[w] - 1
        if g.is_free[w]:
            if left == 1:
                _free_progress(g, s, w)
            elif not left:
                _make_ready(g, s, w)
        elif not left:
            _make_ready(g, s, w)


@cython.cfunc
@cython.exceptval(check=False)
def _emit_with_allocs(g: Graph, s: State, v: Py) -> cython.void:
    """Schedule v's ALLOC predecessors not yet done (just in time), then v."""
    for i in range(g.pred_off[v], g.pred_off[v + 1]):
        u = g.pred_idx[i]
        if g.is_alloc[u] and not s.done[u]:
            _emit(g, s, u)
    _emit(g, s, v)


def run(g: Graph, s: State) -> bool:
    """Order every node into s.order; false when the rest would wait forever (strict)."""
    n = len(s.done)
    sc = s.sc
    sc[:] = 0
    sc[FIRST_LIVE] = sc[NEAR_EPOCH] = sc[NEAR_OF] = -1
    for v in range(n):
        if g.is_free[v] and s.pending[v] == 1:
            _free_progress(g, s, v)
    for v in range(n):
        if not s.pending[v] and not g.is_alloc[v]:
            _make_ready(g, s, v)
    while sc[NORD] < n:
        ready, frees = s.heaps[READY], s.heaps[FREES]
        if not ready[0] and not frees[0]:
            k = _fallback(g, s)
            if k < 0:
                return False
            v = g.inv[k & g.vmask]
            _unpark(s, v)
            _emit_with_allocs(g, s, v)
            _wake(g, s, False)
            continue
        k = _pop(frees) if frees[0] else _pop(ready)
        v = g.inv[k & g.vmask]
        if s.done[v] or not s.in_ready[v] or k != s.key[v]:
            continue  # a stale entry
        s.in_ready[v] = False
        stale = s.woken_at[v] == sc[EPOCH]  # woken, and no L0 tier changed since
        s.woken_at[v] = -1
        # NOTE: a sure node passes while no L0 tier is live (see sure)
        if g.single_l0 and s.jit_count[v] and not (s.sure[v] and sc[FIRST_LIVE] < 0):
            b = _blocker(g, s, v)
            if b >= 0 or (s.jit[v] and _futile(g, s, v) >= 0):
                c = _need(g, s, v) if b >= 0 else 3
                _park(g, s, k, c)
                if stale:  # nothing changed since it was woken: do not wake it again yet
                    s.idle[c] = sc[EPOCH]
                if not _no_wake(g, s):
                    _wake(g, s, True)
                continue
        _emit_with_allocs(g, s, v)
        if g.single_l0 and not _no_wake(g, s):
            _wake(g, s, True)
    return True


@cython.locals(i=Py, j=Py, v=Py, best=I64)
def tails(order: I64s, succ_off: I64s, succ_idx: I64s, cost: I64s, h: I64s) -> None:
    """Per node into `h`, the longest path of `cost` from it (itself included) over the
    successor lists (eq. 20's h; CPE's downstream criticality over G2); `order` is a
    topological order of those edges."""
    for i in range(len(order) - 1, -1, -1):
        v = order[i]
        best = 0
        for j in range(succ_off[v], succ_off[v + 1]):
            if h[succ_idx[j]] > best:
                best = h[succ_idx[j]]
        h[v] = best + cost[v]
