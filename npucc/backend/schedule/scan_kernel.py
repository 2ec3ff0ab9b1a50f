# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
# cython: infer_types=True, cdivision=True
"""LinearScan's per-node loop as a kernel compiled ahead of time (Cython, pure-Python mode).

`Space` is one tier's free address space (sorted, disjoint, merged free segments) with its
release labels (each address range's latest release): first, last, best and coldest fit, take,
give, the labels' update and query. `Core` is a scan's state over struct-of-arrays (the graph's
node kinds and buffer lists as CSR, per buffer its tier, size, offset while resident, offset at
ALLOC, last use and spilled-out flag, the residents of each tier in insertion order as linked
lists, the order so far): its `advance` places and releases nodes' buffers until a node needs
a spill decision, which scan.py takes. The index of an order's buffer uses and DLR's victim rule
(dlr.py) are here too. This module is the one home of those rules. It is valid Python too (see
mpas_kernel.py): built (`cythonize -i -3` on this file, or setup.py), Python imports the
extension module next to it; without one it runs as it is (slow, the same plans).
"""

import cython
import numpy as np

# NOTE: every value is a byte offset or size, a position, a node, a buffer or a release label,
# all below INF = 2**62 (a tier's capacity, a graph's nodes), so int64 holds each and their sums
# (offset + size) without overflow; offsets and sizes are >= 0, so C's truncating division is
# Python's floor division wherever the kernel divides
I64 = cython.typedef(cython.longlong)
Py = cython.typedef(cython.Py_ssize_t)
I64s = cython.typedef(cython.longlong[:])
F64s = cython.typedef(cython.double[:])
Bools = cython.typedef(cython.uchar[:])

INF = 1 << 62  # the position of "no next use"
C_INF = cython.declare(I64, INF)
OP_OTHER, OP_ALLOC, OP_FREE = 0, 1, 2  # Core.op's node kinds
ALLOC = cython.declare(cython.int, OP_ALLOC)
FREE = cython.declare(cython.int, OP_FREE)
FIT_FIRST, FIT_BEST, FIT_COLD = 0, 1, 2  # Core's placements (cold and timed: FIT_COLD)
BEST = cython.declare(cython.int, FIT_BEST)
COLD = cython.declare(cython.int, FIT_COLD)


@cython.locals(n=Py, m=Py, v=Py, k=Py, off=I64s, idx=I64s)
def csr(lists: list) -> tuple:
    """Per node (or item) lists of ints as int64 arrays (offsets, entries): node v's at
    entries[offsets[v]:offsets[v + 1]], in its list's order. The one home of npucc's CSR lists
    (a graph's buffer lists, MPAS's and CPE's edges)."""
    n = len(lists)
    offsets = np.zeros(n + 1, np.int64)
    off = offsets
    m = 0
    for v in range(n):
        m += len(lists[v])
        off[v + 1] = m
    entries = np.zeros(m, np.int64)
    idx = entries
    k = 0
    for v in range(n):
        for x in lists[v]:
            idx[k] = x
            k += 1
    return offsets, entries


def _grown(a, n: Py):
    """A copy of int64 array `a` with room for at least n entries (twice its length)."""
    b = np.zeros(max(n, 2 * len(a), 8), np.int64)
    b[: len(a)] = np.asarray(a)
    return b


@cython.cfunc
@cython.inline
@cython.exceptval(check=False)
def _up(x: I64, al: I64) -> I64:
    """The smallest multiple of al at or above x >= 0."""
    return (x + al - 1) // al * al


@cython.cfunc
@cython.exceptval(check=False)
def _first_above(a: I64s, lo: Py, hi: Py, x: I64) -> Py:
    """The first index lo <= i < hi with a[i] > x (hi if none; with x - 1: a[i] >= x); a[lo:hi]
    ascends."""
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    return lo


@cython.final
@cython.cclass
class Space:
    """One tier of `capacity` bytes: its free segments [fs[i], fe[i]), i < nf, sorted, disjoint
    and merged, offsets aligned to `al`; its released ranges [ls[i], le[i]), i < nl, sorted
    and disjoint, each labelled lab[i] (its latest release: a position or a time)."""

    fs: I64s
    fe: I64s
    ls: I64s
    le: I64s
    lab: I64s
    win: I64s  # scratch of coldest's sliding window (as long as the label arrays)
    nf: Py
    nl: Py
    al: I64
    got: I64  # the latest release over the window `_coldest` returned

    def __init__(self, capacity: I64, alignment: I64 = 1) -> None:
        self.fs = np.zeros(8, np.int64)
        self.fe = np.zeros(8, np.int64)
        self.nf = 0
        if capacity > 0:
            self.fe[0] = capacity
            self.nf = 1
        self.ls = np.zeros(8, np.int64)
        self.le = np.zeros(8, np.int64)
        self.lab = np.zeros(8, np.int64)
        self.win = np.zeros(8, np.int64)
        self.nl = 0
        self.al = alignment
        self.got = -1

    def free_lists(self) -> tuple:
        """The free segments' starts and ends, as lists."""
        return (np.asarray(self.fs)[: self.nf].tolist(), np.asarray(self.fe)[: self.nf].tolist())

    def label_lists(self) -> tuple:
        """The released ranges' starts, ends and labels, as lists."""
        n = self.nl
        return (
            np.asarray(self.ls)[:n].tolist(),
            np.asarray(self.le)[:n].tolist(),
            np.asarray(self.lab)[:n].tolist(),
        )

    def load(self, free: tuple, labels: tuple) -> None:
        """Take the state of free_lists() and label_lists() results (copied)."""
        fs, fe = free
        self.nf = len(fs)
        if self.nf + 2 > len(self.fs):
            self.fs, self.fe = _grown(self.fs, self.nf + 2), _grown(self.fe, self.nf + 2)
        np.asarray(self.fs)[: self.nf] = fs
        np.asarray(self.fe)[: self.nf] = fe
        self.load_labels(*labels)

    def load_labels(self, starts: list, ends: list, labels: list) -> None:
        """Take these released ranges and labels (copied)."""
        self.nl = 0
        self._room_labels(len(starts))
        self.nl = len(starts)
        np.asarray(self.ls)[: self.nl] = starts
        np.asarray(self.le)[: self.nl] = ends
        np.asarray(self.lab)[: self.nl] = labels

    @cython.cfunc
    def _room_labels(self, extra: Py) -> cython.int:
        """Room for `extra` more released ranges."""
        need = self.nl + extra
        if need > len(self.ls):
            self.ls, self.le = _grown(self.ls, need), _grown(self.le, need)
            self.lab, self.win = _grown(self.lab, need), _grown(self.win, need)
        return 0

    @cython.ccall
    @cython.exceptval(check=False)
    def first_fit(self, size: I64) -> I64:
        """The lowest aligned offset where `size` bytes fit, or -1."""
        for i in range(self.nf):
            off = _up(self.fs[i], self.al)
            if off + size <= self.fe[i]:
                return off
        return -1

    @cython.ccall
    @cython.exceptval(check=False)
    def last_fit(self, size: I64) -> I64:
        """The highest aligned offset where `size` bytes fit, or -1."""
        i: Py
        for i in range(self.nf - 1, -1, -1):
            if self.fe[i] - size >= self.fs[i]:
                off = (self.fe[i] - size) // self.al * self.al
                if off >= self.fs[i]:
                    return off
        return -1

    @cython.ccall
    @cython.exceptval(check=False)
    def best_fit(self, size: I64) -> I64:
        """The aligned start of the segment with the least slack for `size` (lowest on ties),
        or -1."""
        best: I64 = -1
        best_slack: I64 = 0
        for i in range(self.nf):
            off = _up(self.fs[i], self.al)
            slack = self.fe[i] - off - size
            if slack >= 0 and (best < 0 or slack < best_slack):
                best = off
                best_slack = slack
        return best

    @cython.ccall
    @cython.exceptval(check=False)
    def coldest_fit(self, size: I64) -> I64:
        """Best fit among the aligned offsets whose range was released longest ago, or -1.

        Per free segment the offsets tried are its start aligned up, its end minus `size`
        aligned down and the bounds of the released ranges inside it aligned up; the key is
        (latest release over the window, slack of the segment, offset), so a buffer avoids
        addresses just given back when it can (a window meeting no released range: -1).
        """
        found: cython.bint = False
        bl: I64 = 0
        bs: I64 = 0
        bo: I64 = -1
        for i in range(self.nf):
            slack = self.fe[i] - self.fs[i] - size
            if slack < 0:
                continue
            off = self._coldest(self.fs[i], self.fe[i], size)
            if off < 0:
                continue
            latest = self.got
            if (
                not found
                or latest < bl
                or (latest == bl and (slack < bs or (slack == bs and off < bo)))
            ):
                found, bl, bs, bo = True, latest, slack, off
        return bo

    def coldest(self, lo: I64, hi: I64, size: I64) -> tuple | None:
        """The least (latest release over [off, off+size), off) over the offsets coldest_fit
        tries in the free range [lo, hi), or None."""
        off = self._coldest(lo, hi, size)
        return None if off < 0 else (self.got, off)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _coldest(self, lo: I64, hi: I64, size: I64) -> I64:
        """`coldest`'s offset (-1: none), its latest release left in `got`."""
        al = self.al
        last = hi - size  # the highest offset that fits
        if last < lo:
            return -1
        ls, le, lab, win = self.ls, self.le, self.lab, self.win
        i = _first_above(le, 0, self.nl, lo)  # the first range ending past lo
        j = _first_above(ls, 0, self.nl, hi - 1)  # the first starting at or past hi
        # NOTE: the bounds inside (lo, hi) ascend (disjoint sorted ranges), so do they aligned
        # up: the offsets come out ascending, each window's both ends only move right, and a
        # deque of range indices with decreasing labels (win[h:t]) gives each window's latest
        a: Py = i  # the window meets ranges a..b-1
        b: Py = i
        h: Py = 0
        t: Py = 0
        best: I64 = -1
        best_latest: I64 = 0
        prev: I64 = -1
        first = _up(lo, al)
        top = last // al * al
        kk: Py = i
        side: cython.int = 0  # 0: lo's offset, 1/2: range kk's start/end, 3: the top
        while True:
            # the next candidate offset, ascending
            if side == 0:
                off = first
                side = 1
            elif side == 3:
                if top < lo or top == prev:
                    break
                off = top
                side = 4
            else:
                if kk >= j:
                    side = 3
                    continue
                if side == 1:
                    x = ls[kk]
                    side = 2
                    if x <= lo:
                        continue
                else:
                    x = le[kk]
                    side = 1
                    kk += 1
                    if x >= hi:
                        continue
                off = _up(x, al)
                if off > last:
                    side = 3
                    continue
                if off == prev:
                    continue
            if off > last:  # lo's offset past the top: none fits
                if side == 4:
                    break
                continue
            prev = off
            end = off + size
            while b < j and ls[b] < end:
                while t > h and lab[win[t - 1]] <= lab[b]:
                    t -= 1
                win[t] = b
                t += 1
                b += 1
            while a < b and le[a] <= off:
                a += 1
            while t > h and win[h] < a:
                h += 1
            latest = lab[win[h]] if t > h else -1
            if best < 0 or latest < best_latest:
                best, best_latest = off, latest
                if latest < 0:  # NOTE: labels are >= 0: no later offset beats a fresh range
                    break
            if side == 4:
                break
        self.got = best_latest
        return best

    @cython.ccall
    @cython.exceptval(check=False)
    def latest(self, lo: I64, hi: I64) -> I64:
        """The latest release over [lo, hi) (-1 where never released)."""
        i = _first_above(self.le, 0, self.nl, lo)
        j = _first_above(self.ls, 0, self.nl, hi - 1)
        got: I64 = -1
        for x in range(i, j):
            if self.lab[x] > got:
                got = self.lab[x]
        return got

    @cython.ccall
    def take(self, off: I64, size: I64) -> cython.int:
        """Mark [off, off+size) used; it must lie inside one free segment."""
        if size == 0:
            return 0
        i = _first_above(self.fs, 0, self.nf, off) - 1
        if i < 0 or self.fe[i] < off + size:
            raise ValueError(f"[{off}, {off + size}) is not free")
        start, end = self.fs[i], self.fe[i]
        top = off + size
        if off > start:  # a piece stays below
            self.fe[i] = off
            if end > top:  # and one above
                self._shift_free(i + 1, 1)
                self.fs[i + 1] = top
                self.fe[i + 1] = end
        elif end > top:  # only the piece above stays
            self.fs[i] = top
        else:  # the whole segment is taken
            self._shift_free(i + 1, -1)
        return 0

    @cython.ccall
    def give(self, off: I64, size: I64) -> cython.int:
        """Return [off, off+size) and merge it with adjacent free segments."""
        if size == 0:
            return 0
        end = off + size
        fs, fe = self.fs, self.fe
        i = _first_above(fs, 0, self.nf, off)
        if (i > 0 and fe[i - 1] > off) or (i < self.nf and fs[i] < end):
            raise ValueError(f"[{off}, {end}) is already free")
        below = i > 0 and fe[i - 1] == off
        above = i < self.nf and fs[i] == end
        if below and above:  # it joins two segments
            fe[i - 1] = fe[i]
            self._shift_free(i + 1, -1)
        elif below:
            fe[i - 1] = end
        elif above:
            fs[i] = off
        else:
            self._shift_free(i, 1)
            self.fs[i] = off
            self.fe[i] = end
        return 0

    @cython.cfunc
    def _shift_free(self, i: Py, d: Py) -> cython.int:
        """Move free segments i.. by d (+1: a gap at i, -1: segment i-1 dropped)."""
        if self.nf + d > len(self.fs):
            self.fs, self.fe = _grown(self.fs, self.nf + d), _grown(self.fe, self.nf + d)
        fs, fe = self.fs, self.fe
        x: Py
        if d > 0:
            for x in range(self.nf - 1, i - 1, -1):
                fs[x + 1] = fs[x]
                fe[x + 1] = fe[x]
        else:
            for x in range(i, self.nf):
                fs[x - 1] = fs[x]
                fe[x - 1] = fe[x]
        self.nf += d
        return 0

    @cython.ccall
    def put(self, lo: I64, hi: I64, label: I64) -> cython.int:
        """Label [lo, hi) with `label` (the parts of other ranges outside it keep theirs)."""
        if hi <= lo:
            return 0
        self._room_labels(2)
        ls, le, lab = self.ls, self.le, self.lab
        i = _first_above(le, 0, self.nl, lo)  # ranges i..j-1 meet [lo, hi)
        j = _first_above(ls, 0, self.nl, hi - 1)
        if j == i + 1 and ls[i] == lo and le[i] == hi:  # the same range again
            lab[i] = label
            return 0
        # the new ranges replacing i..j-1: the piece of i below lo, [lo, hi), the piece of
        # j-1 above hi
        below = i < j and ls[i] < lo
        above = i < j and le[j - 1] > hi
        s0, l0 = ls[i] if below else 0, lab[i] if below else 0
        e1, l1 = le[j - 1] if above else 0, lab[j - 1] if above else 0
        new: Py = 1 + below + above
        d = new - (j - i)
        x: Py
        if d > 0:
            for x in range(self.nl - 1, j - 1, -1):
                ls[x + d] = ls[x]
                le[x + d] = le[x]
                lab[x + d] = lab[x]
        elif d < 0:
            for x in range(j, self.nl):
                ls[x + d] = ls[x]
                le[x + d] = le[x]
                lab[x + d] = lab[x]
        self.nl += d
        x = i
        if below:
            ls[x], le[x], lab[x] = s0, lo, l0
            x += 1
        ls[x], le[x], lab[x] = lo, hi, label
        if above:
            ls[x + 1], le[x + 1], lab[x + 1] = hi, e1, l1
        return 0


@cython.ccall
def index_uses(op: Bools, boff: I64s, bidx: I64s, order: I64s, uoff: I64s):
    """Each buffer's use positions in `order` (ALLOC excluded) as a CSR: fills uoff (nbuf + 1
    entries, zeroed) and returns upos, buffer b's uses upos[uoff[b]:uoff[b + 1]] ascending."""
    n: Py = len(order)
    nbuf: Py = len(uoff) - 1
    k: Py
    x: Py
    for k in range(n):
        v = order[k]
        if op[v] != ALLOC:
            for x in range(boff[v], boff[v + 1]):
                uoff[bidx[x] + 1] += 1
    for x in range(nbuf):
        uoff[x + 1] += uoff[x]
    got = np.zeros(uoff[nbuf], np.int64)
    upos: I64s = got
    for k in range(n):
        v = order[k]
        if op[v] != ALLOC:
            for x in range(boff[v], boff[v + 1]):
                b = bidx[x]
                upos[uoff[b]] = k
                uoff[b] += 1
    for x in range(nbuf, 0, -1):  # the fill moved each offset to the next buffer's
        uoff[x] = uoff[x - 1]
    uoff[0] = 0
    return got


@cython.cfunc
@cython.exceptval(check=False)
def _after(uoff: I64s, upos: I64s, b: I64, k: I64) -> I64:
    """The first use of b after position k (INF if none)."""
    i = _first_above(upos, uoff[b], uoff[b + 1], k)
    return upos[i] if i < uoff[b + 1] else C_INF


@cython.final
@cython.cclass
class Core:
    """A scan's state and its per-node loop (scan.py's LinearScan drives it)."""

    spaces = cython.declare(list, visibility="readonly")  # per tier index its Space
    op: Bools  # per node: OP_OTHER, OP_ALLOC or OP_FREE
    boff: I64s  # per node: its buffers bidx[boff[v]:boff[v + 1]]
    bidx: I64s
    tier_of: I64s  # per buffer
    size_of: I64s
    outl: Bools  # per buffer: it outlives its layer (placed from the top of its tier)
    order: I64s
    uoff: I64s  # per buffer: its use positions upos[uoff[b]:uoff[b + 1]] (index_uses)
    upos: I64s
    times: I64s  # per node: its release label (timed), else empty
    loff: I64s  # per buffer: its offset while resident, else -1
    prv: I64s  # per buffer: the residents of its tier as a list in insertion order
    nxt: I64s
    head: I64s  # per tier: its first and last resident (-1: none)
    tail: I64s
    where: I64s  # per buffer: its offset at ALLOC, else -1
    last_use: I64s
    out: Bools  # per buffer: spilled out
    result: I64s  # the order so far (nodes and spill nodes), nres of them
    nres = cython.declare(Py, visibility="readonly")
    nout: Py
    fit: cython.int
    labels = cython.declare(cython.bint, visibility="public")  # releases are labelled
    timed: cython.bint
    # the position whose node's buffers are placed first fit from offset 0
    packed = cython.declare(I64, visibility="readonly")
    now: I64  # the release label of the node being placed (timed)

    def __init__(self, spaces, arrays, uses, times, where, last_use, fit, labels) -> None:
        self.spaces = spaces
        self.op, self.boff, self.bidx, self.tier_of, self.size_of, self.outl = arrays
        self.order, self.uoff, self.upos = uses
        self.timed = times is not None
        self.times = np.asarray(times if times is not None else [], np.int64)
        nbuf = len(self.tier_of)
        self.loff = np.full(nbuf, -1, np.int64)
        self.prv = np.full(nbuf, -1, np.int64)
        self.nxt = np.full(nbuf, -1, np.int64)
        self.head = np.full(len(spaces), -1, np.int64)
        self.tail = np.full(len(spaces), -1, np.int64)
        self.where = where
        self.last_use = last_use
        self.out = np.zeros(nbuf, np.uint8)
        self.result = np.zeros(len(self.order) + 64, np.int64)
        self.nres = 0
        self.nout = 0
        self.fit = fit
        self.labels = labels
        self.packed = -1
        self.now = 0

    @cython.ccall
    def advance(self, k: Py, stop: Py, wake: I64) -> Py:
        """Take the nodes at positions k.. up to `stop`, each placing (ALLOC) or releasing
        (FREE) its buffer, until one needs the scan's Python side: an ALLOC that does not
        fit, a node using a spilled-out buffer, a position at or past `wake` (a reload ahead
        due); that position (not taken), or `stop`."""
        op, boff, bidx, order, last_use = self.op, self.boff, self.bidx, self.order, self.last_use
        x: Py
        while k < stop:
            v = order[k]
            if self.timed:
                self.now = self.times[v]
            if k >= wake:
                return k
            o = op[v]
            p = boff[v]
            if o == ALLOC:
                b = bidx[p]
                off = self.place(b, k)
                if off < 0:
                    return k
                self.occupy(b, off)
                self.where[b] = off
                self.push(v)
                last_use[b] = k
            else:
                q = boff[v + 1]
                if self.nout:
                    for x in range(p, q):
                        if self.out[bidx[x]]:
                            return k
                if o == FREE:
                    self.release(bidx[p])
                self.push(v)
                for x in range(p, q):
                    last_use[bidx[x]] = k
            k += 1
        return k

    @cython.ccall
    @cython.exceptval(check=False)
    def place(self, b: I64, k: I64) -> I64:
        """Where buffer b fits at position k by the placement (-1: nowhere): first fit in a
        repack (`packed`), from the top for an outliving buffer, else coldest, best or first."""
        sp = cython.cast(Space, self.spaces[self.tier_of[b]])
        size = self.size_of[b]
        if self.packed == k:
            return sp.first_fit(size)
        if self.outl[b]:
            return sp.last_fit(size)
        if self.fit == COLD:
            return sp.coldest_fit(size)
        if self.fit == BEST:
            return sp.best_fit(size)
        return sp.first_fit(size)

    @cython.ccall
    def occupy(self, b: I64, off: I64) -> cython.int:
        """Take b's bytes at `off` and make it its tier's last resident."""
        t = self.tier_of[b]
        cython.cast(Space, self.spaces[t]).take(off, self.size_of[b])
        self.loff[b] = off
        self._link(t, b, off)
        return 0

    @cython.cfunc
    @cython.exceptval(check=False)
    def _link(self, t: I64, b: I64, off: I64) -> cython.void:
        """Append b to tier t's residents."""
        self.loff[b] = off
        self.prv[b] = self.tail[t]
        self.nxt[b] = -1
        if self.tail[t] >= 0:
            self.nxt[self.tail[t]] = b
        else:
            self.head[t] = b
        self.tail[t] = b

    @cython.ccall
    def release(self, b: I64) -> I64:
        """Give resident b's bytes back, labelled with this release (its position in the
        order so far, or `now`); b's offset."""
        t = self.tier_of[b]
        off = self.loff[b]
        p, n = self.prv[b], self.nxt[b]
        if p >= 0:
            self.nxt[p] = n
        else:
            self.head[t] = n
        if n >= 0:
            self.prv[n] = p
        else:
            self.tail[t] = p
        self.loff[b] = -1
        sp = cython.cast(Space, self.spaces[t])
        size = self.size_of[b]
        sp.give(off, size)
        if self.labels:
            sp.put(off, off + size, self.now if self.timed else self.nres)
        return off

    @cython.ccall
    def push(self, v: I64) -> cython.int:
        """Append node v to the order so far."""
        if self.nres == len(self.result):
            self.result = _grown(self.result, self.nres + 1)
        self.result[self.nres] = v
        self.nres += 1
        return 0

    def extend(self, k: Py, stop: Py, where: I64s) -> None:
        """Append the order's positions k..stop-1 as they are, each ALLOC's buffer placed where
        `where` says (a Trail's recording scan's offsets)."""
        x: Py
        for x in range(k, stop):
            v = self.order[x]
            if self.op[v] == ALLOC:
                b = self.bidx[self.boff[v]]
                self.where[b] = where[b]
            self.push(v)

    def residents(self, t: I64) -> list:
        """Tier t's residents, in insertion order."""
        got = []
        b = self.head[t]
        while b >= 0:
            got.append(int(b))
            b = self.nxt[b]
        return got

    def items(self, t: I64) -> list:
        """Tier t's (resident, offset) pairs, in insertion order."""
        return [(b, int(self.loff[b])) for b in self.residents(t)]

    def set_items(self, t: I64, items) -> None:
        """Make tier t's residents these (buffer, offset) pairs, in their order (the tier's
        free space is set apart)."""
        for b in self.residents(t):
            self.loff[b] = -1
        self.head[t] = self.tail[t] = -1
        for b, off in items:
            self._link(t, b, off)

    def set_out(self, b: I64, out: cython.bint) -> None:
        """Mark b spilled out (or back in)."""
        self.nout += 1 if out else -1
        self.out[b] = out

    def set_packed(self, k: I64) -> None:
        """Place the buffers of position k's node first fit from offset 0."""
        self.packed = k

    def order_so_far(self) -> list:
        """The order so far, as a list."""
        return np.asarray(self.result)[: self.nres].tolist()

    def set_order(self, result: list) -> None:
        """Make the order so far `result`."""
        self.nres = 0
        if len(result) > len(self.result):
            self.result = _grown(self.result, len(result))
        np.asarray(self.result)[: len(result)] = result
        self.nres = len(result)

    @cython.ccall
    @cython.exceptval(check=False)
    def next_use(self, b: I64, k: I64) -> I64:
        """The position of the first use of b after position k (INF if none)."""
        return _after(self.uoff, self.upos, b, k)

    def farthest(self, candidates: list, k: I64) -> I64:
        """The candidate used farthest ahead of position k (lowest id on ties)."""
        best: I64 = -1
        best_use: I64 = -1
        for b in candidates:
            nu = _after(self.uoff, self.upos, b, k)
            if nu > best_use or (nu == best_use and b < best):
                best, best_use = b, nu
        return best

    def dlr_victim(self, candidates: list, k: I64, cost: F64s, l0: cython.bint) -> I64:
        """DLR's eviction rule (dlr.py, eqs. 25-31) at position k: in an L0 tier the candidate
        used farthest ahead (a buffer never used again first), else the first with the largest
        reuse distance per unit of spill cost, (next use - k) / cost (INF distance: inf)."""
        if l0:
            return self.farthest(candidates, k)
        best: I64 = candidates[0]
        best_score: cython.double = -1.0
        score: cython.double
        for b in candidates:
            nu = _after(self.uoff, self.upos, b, k)
            score = float("inf") if nu >= C_INF else (nu - k) / cost[b]
            if score > best_score:
                best, best_score = b, score
        return best
