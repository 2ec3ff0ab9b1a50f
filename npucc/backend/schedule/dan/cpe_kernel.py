# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""CPE's list order (`cpe.list_order`) as a kernel compiled ahead of time (Cython, pure-Python
mode) over the int64 arrays of `cpe.Tables`.

The rules are cpe.py's docstring's; this module is their one home. It is valid Python too: built
(`cythonize -i -3` on this file, or the package's build, setup.py) Python imports the extension
module next to it; without one it runs as it is (slow, the same orders). `Arrays` holds one
replay's G2 (CSR lists: `*_off` offsets, `*_idx` entries, each node's in its list's order) and
per node and per queue what every order over it shares.

NOTE: every value is an int64: times are sums of node cycles along a schedule, at most the sum of
all cycles, which `cpe.Tables` refuses at 2^60 or more (so a time plus a pipe's work left or a
downstream criticality stays below 2^62, NO_BOUND); ranks and ids are below the node count. A heap
holds distinct pairs ((ready time, rank) or (0, rank): a rank is unique), so its pops come in one
order whatever the order of its pushes.
"""

import cython
import numpy as np

I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])
Bools = cython.typedef(cython.uchar[:])  # numpy bool_ arrays

NO_BOUND = 1 << 62  # a bound no time reaches
DONE, BEATEN, STALLED = 0, 1, 2  # list_order's outcomes
_NO_BOUND = cython.declare(I64, 1 << 62)


@cython.dataclasses.dataclass(eq=False)
@cython.cclass
class Arrays:
    """One replay's G2 and what CPE's orders over it share (read only)."""

    pred_off: I64s
    pred_idx: I64s
    succ_off: I64s
    succ_idx: I64s
    queue: I64s  # per node: 0 pipe-less, else 1 + its pipe's index
    cycles: I64s
    indeg: I64s  # per node: its G2 predecessors
    is_alloc: Bools
    work: I64s  # per queue: the cycles of its nodes


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _before(t: I64, key: I64, u: I64, other: I64) -> cython.bint:
    """Does the pair (t, key) come before (u, other)?"""
    return t < u or (t == u and key < other)


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _put(times: I64s, keys: I64s, j: Py, t: I64, key: I64) -> cython.void:
    """Set the pair at j to (t, key)."""
    times[j] = t
    keys[j] = key


@cython.cfunc
@cython.exceptval(check=False)
def _push(times: I64s, keys: I64s, base: Py, n: Py, t: I64, key: I64) -> Py:
    """Push (t, key) on the heap of pairs times/keys[base:base + n]; its new size."""
    i: Py = n
    while i > 0:
        up: Py = (i - 1) >> 1
        if _before(times[base + up], keys[base + up], t, key):
            break
        _put(times, keys, base + i, times[base + up], keys[base + up])
        i = up
    _put(times, keys, base + i, t, key)
    return n + 1


@cython.cfunc
@cython.exceptval(check=False)
def _pop(times: I64s, keys: I64s, base: Py, n: Py) -> Py:
    """Drop the least pair of the heap times/keys[base:base + n] (read it first); its new size."""
    n -= 1
    t: I64 = times[base + n]
    key: I64 = keys[base + n]
    i: Py = 0
    while True:
        c: Py = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _before(
            times[base + c + 1], keys[base + c + 1], times[base + c], keys[base + c]
        ):
            c += 1
        if _before(t, key, times[base + c], keys[base + c]):
            break
        _put(times, keys, base + i, times[base + c], keys[base + c])
        i = c
    _put(times, keys, base + i, t, key)
    return n


@cython.cclass
class _Heaps:
    """Per queue a heap of (ready time, key) pairs not yet ready to start and one of (0, key)
    available, each in one flat array at the queue's base (a node is in one at a time)."""

    base: I64s
    ptime: I64s
    pkey: I64s
    atime: I64s
    akey: I64s
    npend: I64s  # per queue: its heaps' sizes
    navail: I64s

    @cython.locals(total=Py, v=Py, q=Py, spot=Py, count=Py)
    def __init__(self, queue: I64s, queues: Py) -> None:
        total = queue.shape[0]
        base = np.zeros(queues, np.int64)
        for v in range(total):
            base[queue[v]] += 1
        spot = 0
        for q in range(queues):
            count = base[q]
            base[q] = spot
            spot += count
        self.base = base
        self.ptime = np.zeros(total, np.int64)
        self.pkey = np.zeros(total, np.int64)
        self.atime = np.zeros(total, np.int64)
        self.akey = np.zeros(total, np.int64)
        self.npend = np.zeros(queues, np.int64)
        self.navail = np.zeros(queues, np.int64)


@cython.locals(
    total=Py, queues=Py, v=Py, w=Py, u=Py, e=Py, g=Py, q=Py, p=Py, b=Py, i=Py, best=Py,
    nready=Py, done=Py, idle=Py, k=I64, t=I64, c=I64, free=I64, live=I64, parked=Py, hp=_Heaps,
)  # fmt: skip
def list_order(
    a: Arrays,
    plan: I64s,
    group: I64s,
    size: I64s,
    h: I64s,
    rank: I64s,
    ranked: I64s,
    capped: cython.bint,
    fits: I64,
    stop: I64,
    order: I64s,
    timed: I64s,
) -> Py:
    """`cpe.list_order` over `a`: its order and finish times under rule 5 into `order` and
    `timed` (`size`: per node the size of its first buffer, read with `capped`); the outcome
    (DONE, BEATEN: a bound reached `stop`, STALLED: an ALLOC never fits)."""
    total = a.queue.shape[0]
    queues = a.work.shape[0]
    indeg: I64s = np.array(a.indeg, np.int64)
    left: I64s = np.array(a.work, np.int64)
    # the memory order kept per group: each kept node waits for the one before it
    chain_next: I64s = np.full(total, -1, np.int64)
    g = 0
    for v in range(total):
        if group[v] > g:
            g = group[v]
    last: I64s = np.full(g + 1, -1, np.int64)
    for i in range(plan.shape[0]):
        v = plan[i]
        g = group[v]
        if g >= 0 and (not capped or (g == 0 and a.is_alloc[v])):
            if last[g] >= 0:
                chain_next[last[g]] = v
                indeg[v] += 1
            last[g] = v
    # with `capped`: per L1+UB ALLOC its size, per other node of that group minus it
    sizes: I64s = np.zeros(total, np.int64)
    if capped:
        for v in range(total):
            if group[v] == 0:
                sizes[v] = size[v] if a.is_alloc[v] else -size[v]
    # NOTE: with `capped` a parked ALLOC waits for the FREE that lets it fit, which rule 5
    # does not: its order is timed apart (`timed`); without, the two timings are the same
    finish: I64s = timed
    pipe_free: I64s = np.zeros(queues, np.int64)
    timed_free: I64s = pipe_free
    if capped:
        finish = np.zeros(total, np.int64)
        timed_free = np.zeros(queues, np.int64)
    ready_at: I64s = np.zeros(total, np.int64)
    # per queue a heap of (ready time, rank) not yet ready to start and one of (0, rank)
    # available
    hp = _Heaps(a.queue, queues)
    base: I64s = hp.base
    ptime: I64s = hp.ptime
    pkey: I64s = hp.pkey
    atime: I64s = hp.atime
    akey: I64s = hp.akey
    npend: I64s = hp.npend
    navail: I64s = hp.navail
    # per queue its candidate (start, rank, pipe); (NO_BOUND, 0, -1) with nothing queued
    cstart: I64s = np.full(queues, NO_BOUND, np.int64)
    crank: I64s = np.zeros(queues, np.int64)
    cpipe: I64s = np.full(queues, -1, np.int64)
    # NOTE: a pipe's candidate depends on its own queues and pipe_free alone, so it is
    # recomputed only for the pipes pushed to or run since (`dirty`); queue 0 holds the
    # pipe-less nodes, available once ready (their pipe is never busy)
    dirty: Bools = np.zeros(queues, np.uint8)
    idle = queues - 1  # pipes not yet busy past time 0
    ready: I64s = np.zeros(total + 2, np.int64)
    nready = 0
    for v in range(total):
        if not indeg[v]:
            ready[nready] = v
            nready += 1
    done = 0
    live = 0
    parked = -1  # the next L1+UB ALLOC (with `capped`), ready but not fitting yet
    v = -1
    while True:
        for i in range(nready):  # NOTE: w's predecessors have all run (rule 5: their finish)
            w = ready[i]
            if sizes[w] > 0 and live + sizes[w] > fits:
                parked = w
                continue
            t = 0
            for e in range(a.pred_off[w], a.pred_off[w + 1]):
                if finish[a.pred_idx[e]] > t:
                    t = finish[a.pred_idx[e]]
            if parked == w:  # a parked ALLOC runs no earlier than the node that let it fit
                parked = -1
                if finish[v] > t:
                    t = finish[v]
            ready_at[w] = t
            q = a.queue[w]
            # NOTE: a node ready by its pipe's free time (or pipe-less) is available at once
            # (the pick would move it there before its pipe's next candidate)
            if q and t > pipe_free[q]:
                npend[q] = _push(ptime, pkey, base[q], npend[q], t, rank[w])
            else:
                navail[q] = _push(atime, akey, base[q], navail[q], 0, rank[w])
            if q:
                dirty[q] = True
        if done == total:
            return DONE
        if navail[0] and not idle:  # NOTE: every pipe's candidate starts after time 0
            p = 0
            v = ranked[akey[base[0]]]
            navail[0] = _pop(atime, akey, base[0], navail[0])
        else:
            for p in range(1, queues):
                if not dirty[p]:
                    continue
                dirty[p] = False
                free = pipe_free[p]
                b = base[p]
                while npend[p] and ptime[b] <= free:
                    k = pkey[b]
                    npend[p] = _pop(ptime, pkey, b, npend[p])
                    navail[p] = _push(atime, akey, b, navail[p], 0, k)
                if navail[p]:
                    cstart[p], crank[p], cpipe[p] = free, akey[b], p
                elif npend[p]:
                    cstart[p] = ptime[b] if ptime[b] > free else free
                    crank[p], cpipe[p] = pkey[b], p
                else:
                    cstart[p], crank[p], cpipe[p] = _NO_BOUND, 0, -1
            if navail[0]:
                cstart[0], crank[0], cpipe[0] = 0, akey[base[0]], 0
            else:
                cstart[0], crank[0], cpipe[0] = _NO_BOUND, 0, -1
            best = 0  # the earliest start (ties: the least rank, then pipe)
            for q in range(1, queues):
                if cstart[q] < cstart[best] or (
                    cstart[q] == cstart[best]
                    and (
                        crank[q] < crank[best]
                        or (crank[q] == crank[best] and cpipe[q] < cpipe[best])
                    )
                ):
                    best = q
            p = cpipe[best]
            if p > 0:
                dirty[p] = True
            elif p < 0:  # NOTE: cannot happen with `fits` at least the order's own peak
                return STALLED
            b = base[p]
            if navail[p]:
                v = ranked[akey[b]]
                navail[p] = _pop(atime, akey, b, navail[p])
            else:
                v = ranked[pkey[b]]
                npend[p] = _pop(ptime, pkey, b, npend[p])
        if p:
            c = a.cycles[v]
            free = ready_at[v] if ready_at[v] > pipe_free[p] else pipe_free[p]
            if not pipe_free[p] and free + c:
                idle -= 1
            finish[v] = pipe_free[p] = free + c
            if capped:
                t = timed_free[p]
                for e in range(a.pred_off[v], a.pred_off[v + 1]):
                    if timed[a.pred_idx[e]] > t:
                        t = timed[a.pred_idx[e]]
                t += c
                timed[v] = timed_free[p] = t
            left[p] -= c
            # NOTE: rule 5 runs a pipe's later nodes after its last finish and a node's
            # successors after it: bounds of the makespan
            if timed_free[p] + left[p] >= stop or timed[v] + h[v] - c >= stop:
                return BEATEN
        else:
            finish[v] = ready_at[v]
            if capped:
                t = 0
                for e in range(a.pred_off[v], a.pred_off[v + 1]):
                    if timed[a.pred_idx[e]] > t:
                        t = timed[a.pred_idx[e]]
                timed[v] = t
        order[done] = v
        done += 1
        live += sizes[v]
        nready = 0
        for e in range(a.succ_off[v], a.succ_off[v + 1]):
            w = a.succ_idx[e]
            indeg[w] -= 1
            if not indeg[w]:
                ready[nready] = w
                nready += 1
        w = chain_next[v]
        if w >= 0:
            indeg[w] -= 1
            if not indeg[w]:
                ready[nready] = w
                nready += 1
        if parked >= 0 and live + sizes[parked] <= fits:
            ready[nready] = parked
            nready += 1


@cython.cclass
class Room:
    """The plan's L1+UB events and the slack an order running ahead of them still has
    (`headroom`'s rule; `headroom.room` makes one)."""

    # per node: an ALLOC's L1+UB bytes (0: not counted)
    size = cython.declare(I64s, visibility="readonly")
    alloc_of = cython.declare(I64s, visibility="readonly")  # per node: a FREE's ALLOC, or -1
    # per counted ALLOC its start event, per its FREE its end event
    event = cython.declare(I64s, visibility="readonly")
    slack: I64s  # per plan state s (events 0..s-1 done): cap - live(s) - ahead(s) + gone(s)
    done: Bools  # per event
    ahead: I64s  # per ALLOC started ahead of the plan: its event, else -1
    first: Py  # the first event not done
    cap: I64
    live = cython.declare(I64, visibility="readonly")  # L1+UB bytes started and not freed
    moves: I64  # starts and ends so far: `fits` answers the same until it changes

    def __init__(self, size: I64s, alloc_of: I64s, event: I64s, live: I64s, cap: I64) -> None:
        self.size, self.alloc_of, self.event, self.cap = size, alloc_of, event, cap
        slack = np.full(live.shape[0], cap, np.int64)
        slack -= np.asarray(live)
        self.slack = slack
        self.done = np.zeros(live.shape[0] - 1, np.uint8)
        self.ahead = np.full(size.shape[0], -1, np.int64)
        self.first = self.live = self.moves = 0

    @cython.ccall
    @cython.exceptval(check=False)
    @cython.locals(i=Py, j=Py, x=I64, e=Py, k=Py, need=I64, total=I64, first=Py)
    def fits(self, allocs: I64s, n: Py) -> cython.bint:
        """Can the L1+UB ALLOCs allocs[:n] (not started) start now? (Sorts them.)"""
        total = self.live
        for i in range(n):
            total += self.size[allocs[i]]
        if total > self.cap:
            return False
        for i in range(1, n):  # by event, the latest first (insertion sort: n is small)
            x = allocs[i]
            j = i
            while j > 0 and self.event[allocs[j - 1]] < self.event[x]:
                allocs[j] = allocs[j - 1]
                j -= 1
            allocs[j] = x
        need = 0
        first = self.first + 1  # NOTE: the state now is the live bytes, checked above
        for i in range(n):
            need += self.size[allocs[i]]
            e = self.event[allocs[i]]
            for k in range(first, e + 1):
                if self.slack[k] < need:
                    return False
        return True

    @cython.ccall
    @cython.exceptval(check=False)
    @cython.locals(e=Py, k=Py)
    def start(self, a: Py) -> cython.void:
        """ALLOC `a` (counted) starts: its buffer's first user runs."""
        e = self.event[a]
        self.moves += 1
        self.live += self.size[a]
        if e > self.first:
            for k in range(self.first, e + 1):
                self.slack[k] -= self.size[a]
            self.ahead[a] = e
        self._done(e)

    @cython.ccall
    @cython.exceptval(check=False)
    @cython.locals(a=Py, e=Py, k=Py, end=Py, size=I64)
    def end(self, v: Py) -> cython.void:
        """FREE `v` runs (its buffer counted)."""
        a = self.alloc_of[v]
        size = self.size[a]
        e = self.event[a]
        self.moves += 1
        self.live -= size
        if self.ahead[a] >= 0:
            if self.ahead[a] >= self.first:
                for k in range(self.first, e + 1):
                    self.slack[k] += size
            self.ahead[a] = -1
        end = self.event[v]
        for k in range(e + 1 if e + 1 > self.first else self.first, end + 1):
            self.slack[k] += size  # the plan holds it in states e+1..end
        self._done(end)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _done(self, e: Py) -> cython.void:
        """Event e is done."""
        self.done[e] = True
        while self.first < self.done.shape[0] and self.done[self.first]:
            self.first += 1


@cython.cclass
class _Budget:
    """A budgeted order's state (`budget_order`): the order so far, the pipe queues' heaps (as
    `list_order`'s, keyed by position in the plan's order), the pipe-less nodes waiting."""

    a: Arrays
    room: Room
    pos: I64s
    plan: I64s
    order: I64s
    finish: I64s  # NOTE: a ready ALLOC's finish is its ready time, whenever it runs
    indeg: I64s
    done: Bools
    base: I64s
    ptime: I64s
    pkey: I64s
    atime: I64s
    akey: I64s
    npend: I64s
    navail: I64s
    pipe_free: I64s
    dirty: Bools
    waiting: I64s  # pipe-less nodes ready (they run at once if they fit)
    nwait: Py
    stack: I64s
    asked: I64s  # per node: room.moves when it was last asked about
    answer: Bools  # ... and the answer then
    want: I64s  # a node's ALLOC predecessors (`_fits`, `_run`)
    norder: Py
    frontier: Py  # the plan's first node (ALLOCs aside) not run yet

    @cython.locals(total=Py, queues=Py, v=Py, most=Py, hp=_Heaps)
    def __init__(
        self, a: Arrays, room: Room, pos: I64s, plan: I64s, order: I64s, finish: I64s
    ) -> None:
        total = a.queue.shape[0]
        queues = a.work.shape[0]
        self.a, self.room, self.pos, self.plan = a, room, pos, plan
        self.order, self.finish = order, finish
        self.indeg = np.array(a.indeg, np.int64)
        self.done = np.zeros(total, np.uint8)
        hp = _Heaps(a.queue, queues)
        self.base, self.ptime, self.pkey, self.atime = hp.base, hp.ptime, hp.pkey, hp.atime
        self.akey, self.npend, self.navail = hp.akey, hp.npend, hp.navail
        self.pipe_free = np.zeros(queues, np.int64)
        # NOTE: a pipe's candidate (start, key) depends on its queues and pipe_free alone, so
        # it is recomputed only for the pipes pushed to or run since (`dirty`)
        self.dirty = np.ones(queues, np.uint8)
        self.waiting = np.zeros(total, np.int64)
        self.stack = np.zeros(total, np.int64)
        self.asked = np.full(total, -1, np.int64)
        self.answer = np.zeros(total, np.uint8)
        most = 1
        for v in range(total):
            if a.indeg[v] > most:
                most = a.indeg[v]
        self.want = np.zeros(most, np.int64)
        self.nwait = self.norder = self.frontier = 0

    @cython.cfunc
    @cython.exceptval(check=False)
    @cython.locals(e=Py, x=Py, n=Py)
    def _fits(self, w: Py) -> cython.bint:
        """Do w's ALLOCs not started yet fit the room now?"""
        # NOTE: a queued node's ALLOCs are all ready, and only room.start marks one done, so
        # its answer holds until the room moves
        if self.asked[w] == self.room.moves:
            return self.answer[w]
        n = 0
        for e in range(self.a.pred_off[w], self.a.pred_off[w + 1]):
            x = self.a.pred_idx[e]
            if self.a.is_alloc[x] and self.room.size[x] and not self.done[x]:
                self.want[n] = x
                n += 1
        self.asked[w] = self.room.moves
        self.answer[w] = n == 0 or self.room.fits(self.want, n)
        return self.answer[w]

    @cython.cfunc
    @cython.exceptval(check=False)
    @cython.locals(w=Py, x=Py, e=Py, q=Py, t=I64)
    def _ready(self, n: Py) -> cython.void:
        """The nodes stack[:n] are ready (their predecessors ran, or are ready ALLOCs)."""
        a = self.a
        while n:
            n -= 1
            w = self.stack[n]
            t = 0
            for e in range(a.pred_off[w], a.pred_off[w + 1]):
                if self.finish[a.pred_idx[e]] > t:
                    t = self.finish[a.pred_idx[e]]
            self.finish[w] = t
            if a.is_alloc[w]:  # NOTE: an ALLOC runs with the first of its users to run
                n = self._release(w, n)
            elif a.queue[w]:
                q = a.queue[w]
                # NOTE: a node ready by its pipe's free time is available at once (the
                # candidates' update would move it there first)
                if t > self.pipe_free[q]:
                    self.npend[q] = _push(
                        self.ptime, self.pkey, self.base[q], self.npend[q], t, self.pos[w]
                    )
                else:
                    self.navail[q] = _push(
                        self.atime, self.akey, self.base[q], self.navail[q], 0, self.pos[w]
                    )
                self.dirty[q] = True
            else:
                self.waiting[self.nwait] = w
                self.nwait += 1

    @cython.cfunc
    @cython.exceptval(check=False)
    @cython.locals(i=Py, j=Py, n=Py, e=Py, x=Py, f=Py)
    def _run(self, w: Py, t: I64) -> cython.void:
        """Run w, finishing at t, after its ALLOCs not run yet (by the plan's events)."""
        a, room, want = self.a, self.room, self.want
        self.finish[w] = t
        n = 0
        for e in range(a.pred_off[w], a.pred_off[w + 1]):
            x = a.pred_idx[e]
            if a.is_alloc[x]:
                j = n
                while j > 0 and (
                    room.event[want[j - 1]] > room.event[x]
                    or (room.event[want[j - 1]] == room.event[x] and want[j - 1] > x)
                ):
                    want[j] = want[j - 1]
                    j -= 1
                want[j] = x
                n += 1
        for i in range(n):
            x = want[i]
            if not self.done[x]:
                self.done[x] = True
                self.order[self.norder] = x
                self.norder += 1
                if room.size[x]:
                    room.start(x)
        self.done[w] = True
        self.order[self.norder] = w
        self.norder += 1
        f = room.alloc_of[w]
        if f >= 0 and room.size[f]:  # a FREE of a counted buffer
            room.end(w)
        while self.frontier < self.plan.shape[0] and self.done[self.plan[self.frontier]]:
            self.frontier += 1
        self._ready(self._release(w, 0))

    @cython.cfunc
    @cython.exceptval(check=False)
    @cython.locals(e=Py, x=Py)
    def _release(self, w: Py, n: Py) -> Py:
        """Push the successors of w it was the last predecessor of on stack[n:]; the new n."""
        for e in range(self.a.succ_off[w], self.a.succ_off[w + 1]):
            x = self.a.succ_idx[e]
            self.indeg[x] -= 1
            if not self.indeg[x]:
                self.stack[n] = x
                n += 1
        return n


@cython.locals(
    total=Py, queues=Py, v=Py, w=Py, e=Py, p=Py, q=Py, b=Py, i=Py, j=Py, m=Py, n=Py, best=Py,
    nheld=Py, moved=cython.bint, k=I64, t=I64, c=I64, free=I64, s=_Budget,
)  # fmt: skip
def budget_order(
    a: Arrays,
    room: Room,
    pos: I64s,
    at: I64s,
    plan: I64s,
    h: I64s,
    stop: I64,
    order: I64s,
    finish: I64s,
) -> Py:
    """`cpe.budget_order` over `a` within `room`: its order and finish times under rule 5 into
    `order` and `finish`; the outcome (DONE, BEATEN: a bound reached `stop`, STALLED: the
    plan's next node is not ready, which its topological order rules out)."""
    total = a.queue.shape[0]
    queues = a.work.shape[0]
    s = _Budget(a, room, pos, plan, order, finish)
    left: I64s = np.array(a.work, np.int64)
    cstart: I64s = np.full(queues, NO_BOUND, np.int64)  # NO_BOUND: nothing queued
    ckey: I64s = np.zeros(queues, np.int64)
    held: I64s = np.zeros(total, np.int64)  # pipe-less nodes ready that did not fit
    batch: I64s = np.zeros(total, np.int64)
    nheld = 0
    n = 0
    for v in range(total):
        if not a.indeg[v]:
            s.stack[n] = v
            n += 1
    s._ready(n)
    while s.norder < total:
        moved = True
        while moved and (s.nwait or nheld):  # NOTE: pipe-less nodes run once they fit
            moved = False
            m = 0
            for i in range(s.nwait):
                batch[m] = s.waiting[i]
                m += 1
            for i in range(nheld):
                batch[m] = held[i]
                m += 1
            s.nwait = nheld = 0
            for i in range(m):
                w = batch[i]
                if s._fits(w):
                    s._run(w, finish[w])
                    moved = True
                else:
                    held[nheld] = w
                    nheld += 1
        if s.norder == total:
            break
        for p in range(1, queues):
            if not s.dirty[p]:
                continue
            s.dirty[p] = False
            free = s.pipe_free[p]
            b = s.base[p]
            while s.npend[p] and (s.ptime[b] <= free or s.done[at[s.pkey[b]]]):
                k = s.pkey[b]
                s.npend[p] = _pop(s.ptime, s.pkey, b, s.npend[p])
                if not s.done[at[k]]:
                    s.navail[p] = _push(s.atime, s.akey, b, s.navail[p], 0, k)
            while s.navail[p] and s.done[at[s.akey[b]]]:
                s.navail[p] = _pop(s.atime, s.akey, b, s.navail[p])
            if s.navail[p]:
                cstart[p], ckey[p] = free, s.akey[b]
            elif s.npend[p]:
                cstart[p] = s.ptime[b] if s.ptime[b] > free else free
                ckey[p] = s.pkey[b]
            else:
                cstart[p] = _NO_BOUND
        best = -1
        for q in range(1, queues):
            # NOTE: a candidate without room waits: no later node of its pipe jumps the queue
            if cstart[q] != _NO_BOUND and (
                best < 0 or _before(cstart[q], ckey[q], cstart[best], ckey[best])
            ):
                w = at[ckey[q]]
                for e in range(a.pred_off[w], a.pred_off[w + 1]):
                    if a.is_alloc[a.pred_idx[e]]:
                        break
                else:
                    best = q
                    continue
                if s._fits(w):
                    best = q
        if best < 0:  # every pipe waits: the plan's next node fits
            if s.frontier >= plan.shape[0]:
                return STALLED
            w = plan[s.frontier]
            p = a.queue[w]
            if not p:
                for i in range(nheld):
                    if held[i] == w:
                        break
                else:
                    return STALLED
                for j in range(i, nheld - 1):
                    held[j] = held[j + 1]
                nheld -= 1
                s._run(w, finish[w])
                continue
        else:
            p = best
            w = at[ckey[p]]
        c = a.cycles[w]
        t = (finish[w] if finish[w] > s.pipe_free[p] else s.pipe_free[p]) + c
        s.pipe_free[p] = t
        s.dirty[p] = True
        s._run(w, t)
        left[p] -= c
        if t + left[p] >= stop or t + h[w] - c >= stop:
            return BEATEN
    return DONE


@cython.locals(i=Py, v=Py, e=Py, x=Py, f=Py, n=Py)
def plan_events(
    pred_off: I64s,
    pred_idx: I64s,
    is_alloc: Bools,
    size: I64s,
    alloc_of: I64s,
    plan: I64s,
    started: Bools,
    event: I64s,
    live: I64s,
) -> Py:
    """`headroom.plan_events` of `plan` over G2's preds in CSR form: each counted ALLOC's start
    event and each of its FREEs' end event into `event` (-1 elsewhere), the live bytes after
    each event into `live` (from 0; `started`: all false); the number of states."""
    n = 1
    live[0] = 0
    for i in range(plan.shape[0]):
        v = plan[i]
        if is_alloc[v]:
            continue
        for e in range(pred_off[v], pred_off[v + 1]):
            x = pred_idx[e]
            if size[x] and not started[x]:
                started[x] = True
                event[x] = n - 1
                live[n] = live[n - 1] + size[x]
                n += 1
        f = alloc_of[v]
        if f >= 0 and size[f]:
            event[v] = n - 1
            live[n] = live[n - 1] - size[f]
            n += 1
    return n
