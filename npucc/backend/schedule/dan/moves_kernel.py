# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""CPE's local re-sequencing as a kernel compiled ahead of time (Cython, pure-Python mode): the
local moves' critical chain and incremental re-timing (`moves.local_moves`, paper 000 eqs.
34-35) over the int64 arrays of `cpe.Tables`, and for `repeak` the highest live bytes of a
re-sequenced window of the plan, the dependants or ancestors of a window's ends and its
two-part sequences.

The rules are the docstrings of `Retimer.chain`, `Retimer.retime`, `window_top`, `reach` and
`split`; this module is their one home. It is valid Python too: built (`cythonize -i -3` on this
file, or the package's build, setup.py) Python imports the extension module next to it; without
one it runs as it is (slow, the same results). G2 comes as CSR lists (`*_off` offsets, `*_idx`
entries, `scan_kernel.csr`), the pipes as `cpe_kernel.Arrays`' queues (0: pipe-less, else 1 +
the pipe's index).

NOTE: every value is an int64: times are sums of node cycles, which `cpe.Tables` refuses at 2^60
or more; positions and ids are below the node count.
"""

import cython
import numpy as np

I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _left(a: I64s, lo: Py, hi: Py, x: I64) -> Py:
    """The first index in a[lo:hi] (ascending) whose entry is not below x (bisect_left)."""
    mid: Py
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _right(a: I64s, lo: Py, hi: Py, x: I64) -> Py:
    """The first index in a[lo:hi] (ascending) whose entry is above x (bisect_right)."""
    mid: Py
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@cython.cfunc
@cython.exceptval(check=False)
def _push(heap: I64s, n: Py, x: I64) -> cython.void:
    """Add x to the min-heap heap[:n] (it then holds n + 1 entries)."""
    i: Py = n
    parent: Py
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= x:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = x


@cython.cfunc
@cython.exceptval(check=False)
def _pop(heap: I64s, n: Py) -> cython.void:
    """Take the least entry out of the min-heap heap[:n] (it then holds n - 1 entries)."""
    n -= 1
    x: I64 = heap[n]
    i: Py = 0
    c: Py
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and heap[c + 1] < heap[c]:
            c += 1
        if heap[c] >= x:
            break
        heap[i] = heap[c]
        i = c
    heap[i] = x


@cython.cclass
class Retimer:
    """The finish times under rule 5 of one order of a replay's G2 and of that order with one
    node moved earlier (`start`, then `retime` per move, `changes` for its result)."""

    pred_off: I64s
    pred_idx: I64s
    succ_off: I64s
    succ_idx: I64s
    queue: I64s
    cycles: I64s
    lanes: Py  # pipes
    order: I64s  # the order `start` was given, per node its position, its finish times
    pos: I64s
    finish: I64s
    lane_off: I64s  # per pipe, the positions of its nodes in the order: CSR, ascending
    lane_pos: I64s
    heap: I64s  # re-timing's scratch: the positions to visit (repeats allowed)
    moved: I64s  # ... the nodes whose finish differs, their old and new finishes
    olds: I64s
    news: I64s
    free: I64s  # ... per pipe: when it is free, in the moved order and in the old one
    old_free: I64s
    after: I64s  # ... per pipe free at another time than in the old timing: its next position
    nxt: I64s  # ... and that position's index in lane_pos
    count: Py  # the nodes whose finish differs after the last `retime`

    def __init__(
        self,
        pred_off: I64s,
        pred_idx: I64s,
        succ_off: I64s,
        succ_idx: I64s,
        queue: I64s,
        cycles: I64s,
        lanes: Py,
    ) -> None:
        n: Py = len(queue)
        self.pred_off, self.pred_idx = pred_off, pred_idx
        self.succ_off, self.succ_idx = succ_off, succ_idx
        self.queue, self.cycles, self.lanes = queue, cycles, lanes
        self.heap = np.zeros(len(succ_idx) + 1, np.int64)
        self.moved = np.zeros(n, np.int64)
        self.olds = np.zeros(n, np.int64)
        self.news = np.zeros(n, np.int64)
        self.free = np.zeros(lanes, np.int64)
        self.old_free = np.zeros(lanes, np.int64)
        self.after = np.zeros(lanes, np.int64)
        self.nxt = np.zeros(lanes, np.int64)
        self.count = 0

    @cython.locals(n=Py, i=Py, v=Py, x=Py, pos=I64s, queue=I64s, off=I64s, at=I64s, fill=I64s)
    def start(self, order: list, finish: list) -> None:
        """Time moves of `order` (its finish times `finish`, in node id order)."""
        n = len(order)
        self.order = np.array(order, np.int64)
        self.finish = np.array(finish, np.int64)
        self.pos = pos = np.zeros(n, np.int64)
        queue = self.queue
        self.lane_off = off = np.zeros(self.lanes + 1, np.int64)
        for i in range(n):
            v = order[i]
            pos[v] = i
            x = queue[v]
            if x > 0:
                off[x] += 1
        for x in range(self.lanes):
            off[x + 1] += off[x]
        self.lane_pos = at = np.zeros(off[self.lanes], np.int64)
        fill = np.zeros(self.lanes, np.int64)
        for i in range(n):
            x = queue[order[i]] - 1
            if x >= 0:
                at[off[x] + fill[x]] = i
                fill[x] += 1

    @cython.locals(i=Py)
    def position(self, v: Py) -> Py:
        """Node v's position in the order `start` was given."""
        i = self.pos[v]
        return i

    @cython.locals(
        order=I64s, pos=I64s, finish=I64s, queue=I64s, cycles=I64s, po=I64s, pi=I64s, lo=I64s,
        lp=I64s, n=Py, i=Py, j=Py, k=Py, v=Py, u=Py, x=Py, nxt=Py, t=I64,
    )  # fmt: skip
    def chain(self) -> list:
        """Eq. 34: the critical chain of the order `start` was given, first node first: from
        its last finisher (of least id) back through the binding edge (the first predecessor,
        in G2's order, finishing at the node's start) or else its pipe predecessor."""
        order, pos, finish = self.order, self.pos, self.finish
        queue, cycles = self.queue, self.cycles
        po, pi, lo, lp = self.pred_off, self.pred_idx, self.lane_off, self.lane_pos
        n = len(finish)
        if n == 0:  # an empty DAG (a core with no work) has no chain
            return []
        v = 0
        for i in range(1, n):
            if finish[i] > finish[v]:
                v = i
        out = [v]
        while True:
            x = queue[v] - 1
            t = finish[v] - (cycles[v] if x >= 0 else 0)
            nxt = -1
            if t > 0:
                for j in range(po[v], po[v + 1]):
                    if finish[pi[j]] == t:
                        nxt = pi[j]
                        break
                if nxt < 0 and x >= 0:
                    k = _left(lp, lo[x], lo[x + 1], pos[v])  # its pipe predecessor: at k - 1
                    if k > lo[x] and finish[order[lp[k - 1]]] == t:
                        nxt = order[lp[k - 1]]
            if nxt < 0:
                out.reverse()
                return out
            out.append(nxt)
            v = nxt

    @cython.locals(
        order=I64s, pos=I64s, finish=I64s, queue=I64s,
        cycles=I64s, po=I64s, pi=I64s, so=I64s, si=I64s, lo=I64s, lp=I64s, heap=I64s,
        moved=I64s, olds=I64s, free=I64s, old_free=I64s, after=I64s, nxt=I64s, lanes=Py,
        n=Py, m=Py, hn=Py, i=Py, j=Py, k=Py, v=Py, u=Py, w=Py, x=Py, t=I64, f=I64, was=I64,
        early=Py, top=I64, never=Py, ahead=Py,
    )  # fmt: skip
    def retime(self, q: Py, p: Py, beat: I64, last: Py) -> I64:
        """The latest finish re-timed of the order with the node at position p moved to
        position q < p (the nodes whose finish differs: `changes`); -1 once the moved order's
        makespan is proven not below `beat`: a re-timed finish reaches it, or the node at
        position `last` (finishing at `beat`; -1: none) can no longer finish earlier.

        NOTE: past p the order is the old one, so a node there finishes as in the old timing
        unless its pipe is free at another time than in the old timing or a predecessor's
        finish moved: only those nodes are re-timed (`heap`: the positions of the successors of
        the moved finishes; `after`: per pipe whose free time differs, its next position), in
        order, and re-timing stops once there are none. Likewise (rule 5 is monotone) once no
        pipe is free earlier than in the old timing and no node that finishes earlier has a
        successor still to come, no later finish is earlier than the old one.

        NOTE: the re-timed finishes are written into `finish` itself (each node is re-timed
        once, after its old finish is read) and the old ones put back before returning.
        """
        order, pos, finish = self.order, self.pos, self.finish
        queue, cycles, lanes = self.queue, self.cycles, self.lanes
        po, pi, so, si = self.pred_off, self.pred_idx, self.succ_off, self.succ_idx
        lo, lp, heap = self.lane_off, self.lane_pos, self.heap
        moved, olds = self.moved, self.olds
        free, old_free, after, nxt = self.free, self.old_free, self.after, self.nxt
        n = len(order)
        self.count = 0
        if last >= 0:
            # NOTE: the moved node cannot start later; if it finishes as before, no node
            # finishes earlier (rule 5 is monotone: each node waits for the same nodes or later)
            v = order[p]
            t = 0
            for j in range(po[v], po[v + 1]):
                if finish[pi[j]] > t:
                    t = finish[pi[j]]
            x = queue[v] - 1
            if x >= 0:
                k = _left(lp, lo[x], lo[x + 1], q)
                f = finish[order[lp[k - 1]]] if k > lo[x] else 0
                t = (t if t > f else f) + cycles[v]
            if t == finish[v]:
                return -1
        # each pipe is free at its last finish before q (0: none before q)
        for x in range(lanes):
            k = _left(lp, lo[x], lo[x + 1], q)
            free[x] = finish[order[lp[k - 1]]] if k > lo[x] else 0
            old_free[x] = free[x]
        for i in range(q, p + 1):  # the old timing's pipes, from position p + 1 on
            x = queue[order[i]] - 1
            if x >= 0:
                old_free[x] = finish[order[i]]
        m = hn = 0
        early = -1  # the last position of a successor of a node that finishes earlier
        top = 0
        # the moved span: the node at p, then those at q .. p - 1
        for i in range(q, p + 1):
            v = order[p] if i == q else order[i - 1]
            t = 0
            for j in range(po[v], po[v + 1]):
                if finish[pi[j]] > t:
                    t = finish[pi[j]]
            x = queue[v] - 1
            if x >= 0:
                f = free[x]
                t = (t if t > f else f) + cycles[v]
                free[x] = t
            was = finish[v]
            if t != was:
                for j in range(so[v], so[v + 1]):
                    k = pos[si[j]]
                    if k > p:
                        _push(heap, hn, k)
                        hn += 1
                        if t < was and k > early:
                            early = k
                moved[m] = v
                olds[m] = was
                m += 1
                finish[v] = t
            if t > top:
                if t >= beat:
                    return self._restore(m, -1)
                top = t
        never = n
        ahead = 0  # pipes free earlier than in the old timing
        for x in range(lanes):
            after[x] = never
            if free[x] != old_free[x]:
                ahead += free[x] < old_free[x]
                k = nxt[x] = _right(lp, lo[x], lo[x + 1], p)
                if k < lo[x + 1]:
                    after[x] = lp[k]
        while True:
            i = never
            for x in range(lanes):
                if after[x] < i:
                    i = after[x]
            if hn and heap[0] <= i:
                i = heap[0]
                while hn and heap[0] == i:
                    _pop(heap, hn)
                    hn -= 1
            if i == never:
                break
            if not ahead and early < i <= last:
                return self._restore(m, -1)
            v = order[i]
            t = 0
            for j in range(po[v], po[v + 1]):
                if finish[pi[j]] > t:
                    t = finish[pi[j]]
            was = finish[v]
            x = queue[v] - 1
            if x >= 0:
                if after[x] == i:  # NOTE: its pipe's free time differs
                    f = free[x]
                    k = nxt[x]
                    ahead -= f < old_free[x]
                else:  # NOTE: as in the old timing: the pipe's last finish, unchanged
                    k = _left(lp, lo[x], lo[x + 1], i)
                    f = finish[order[lp[k - 1]]] if k > lo[x] and lp[k - 1] > p else free[x]
                t = (t if t > f else f) + cycles[v]
                free[x] = t
                old_free[x] = was
                if t != was:
                    ahead += t < was
                    k = nxt[x] = k + 1
                    after[x] = lp[k] if k < lo[x + 1] else never
                else:
                    after[x] = never
            if t != was:
                for j in range(so[v], so[v + 1]):
                    k = pos[si[j]]
                    _push(heap, hn, k)
                    hn += 1
                    if t < was and k > early:
                        early = k
                moved[m] = v
                olds[m] = was
                m += 1
                finish[v] = t
            if t > top:
                if t >= beat:
                    return self._restore(m, -1)
                top = t
        for j in range(m):
            self.news[j] = finish[moved[j]]
        self.count = m
        return self._restore(m, top)

    @cython.cfunc
    @cython.exceptval(check=False)
    @cython.locals(j=Py, finish=I64s, moved=I64s, olds=I64s)
    def _restore(self, m: Py, top: I64) -> I64:
        """Put the old finishes of the first `m` nodes moved back; `top`."""
        finish, moved, olds = self.finish, self.moved, self.olds
        for j in range(m):
            finish[moved[j]] = olds[j]
        return top

    @cython.locals(j=Py)
    def changes(self) -> dict:
        """Node -> its re-timed finish, for each node whose finish differs after the last
        `retime` that did not return -1."""
        return {int(self.moved[j]): int(self.news[j]) for j in range(self.count)}


@cython.locals(
    n=Py, i=Py, j=Py, s=Py, e=Py, a=Py, r=Py, cs=I64, cg=I64, best=I64, rank=I64s, start=I64s
)  # fmt: skip
def window_top(
    seq: I64s, lo: Py, at: I64s, alloc: I64s, size: I64s, first: I64s, gone: I64s, low: I64s
) -> I64:
    """repeak's window rule (`repeak._Rows.top`): the highest live bytes, past those before
    the window, of the positions `seq` (a re-sequencing of lo..lo+len-1) run in their place;
    a buffer starts at its first user in `seq` unless started before lo. Per counted use (by
    position `at`, ascending): its ALLOC, that buffer's bytes and start position; per position
    `gone`, the bytes its FREE ends; `low`: per node -1 (scratch, left so)."""
    n = len(seq)
    ranks = np.zeros(n, np.int64)
    starts = np.zeros(n, np.int64)
    rank, start = ranks, starts
    for i in range(n):
        rank[seq[i] - lo] = i
    s = _left(at, 0, len(at), lo)
    e = _left(at, s, len(at), lo + n)
    for j in range(s, e):  # each buffer started inside: its first user in seq
        if first[j] >= lo:
            a = alloc[j]
            r = rank[at[j] - lo]
            if low[a] < 0 or r < low[a]:
                low[a] = r
    for j in range(s, e):
        a = alloc[j]
        if first[j] >= lo and low[a] >= 0:
            start[low[a]] += size[j]
            low[a] = -1
    cs = cg = 0
    best = -(1 << 62)
    for i in range(n):  # live bytes at each position: started so far less ended before it
        cs += start[i]
        if cs - cg > best:
            best = cs - cg
        cg += gone[seq[i]]
    return best


@cython.locals(n=Py, k=Py, e=Py, v=I64)
def reach(
    window: I64s,
    pred_off: I64s,
    pred_idx: I64s,
    tag: I64s,
    stamp: I64,
    back: cython.bint,
    out: cython.uchar[:],
) -> cython.void:
    """repeak's windows (`repeak._Plan.reach`): per node of `window` (a slice of a topological
    order of G2's preds) out 1 if it depends on the first (`back`: if the last depends on it);
    `tag`: per node a scratch mark, `stamp` a mark no node holds yet."""
    n = len(window)
    if n == 0:
        return
    if back:
        # NOTE: a node's dependants come after it, so its mark is final when the walk meets it
        tag[window[n - 1]] = stamp
        for k in range(n - 1, -1, -1):
            v = window[k]
            if tag[v] == stamp:
                out[k] = 1
                for e in range(pred_off[v], pred_off[v + 1]):
                    tag[pred_idx[e]] = stamp
    else:
        tag[window[0]] = stamp
        out[0] = 1
        for k in range(1, n):
            v = window[k]
            for e in range(pred_off[v], pred_off[v + 1]):
                if tag[pred_idx[e]] == stamp:
                    tag[v] = stamp
                    out[k] = 1
                    break


@cython.locals(n=Py, i=Py, k=Py)
def split(lo: Py, mask: cython.uchar[:], front: cython.bint, seq: I64s) -> cython.void:
    """repeak's two-part windows: seq[:len(mask)] the positions lo.. of a window, those whose
    `mask` is `front` (1 or 0) first, then the rest, each part in the window's order."""
    n = len(mask)
    k = 0
    for i in range(n):
        if (mask[i] != 0) == front:
            seq[k] = lo + i
            k += 1
    for i in range(n):
        if (mask[i] != 0) != front:
            seq[k] = lo + i
            k += 1
