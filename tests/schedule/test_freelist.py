import random
from bisect import bisect_left, bisect_right

from npucc.ir import labelmap
from npucc.ir.labelmap import LabelMap, align_up


def brute_coldest(m: LabelMap, lo: int, hi: int, size: int, al: int) -> tuple[int, int] | None:
    """LabelMap.coldest by definition: every candidate offset's window maximum, one by one."""
    inner = [x for x in m.starts + m.ends if lo < x < hi]
    cands = {align_up(lo, al), (hi - size) // al * al} | {align_up(x, al) for x in inner}
    fits = [off for off in cands if lo <= off and off + size <= hi]
    return min(((m.latest(off, off + size), off) for off in fits), default=None)


def test_coldest_matches_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        cap, al = rng.choice([64, 1000, 4096]), rng.choice([1, 8, 32])
        m = LabelMap()
        for _ in range(rng.randint(1, 120)):
            lo = rng.randrange(cap)
            m.assign(
                lo, min(cap, lo + rng.randint(1, rng.choice([6, cap // 4 + 1]))), rng.randrange(40)
            )
            lo = rng.randrange(cap)
            hi = rng.randint(lo, cap)
            size = rng.randint(0, hi - lo + 2)
            assert m.coldest(lo, hi, size, al) == brute_coldest(m, lo, hi, size, al)


def test_coldest_prefers_old_release_then_low_offset():
    m = LabelMap()
    m.assign(0, 16, 5)
    m.assign(16, 32, 2)
    m.assign(32, 48, 2)
    assert m.coldest(0, 64, 16, 16) == (-1, 48)  # never released beats any release
    assert m.coldest(0, 48, 16, 16) == (2, 16)  # equal releases: the lower offset


def test_assign_and_put_match_a_per_address_map():
    rng = random.Random(1)
    for _ in range(100):
        cap = rng.choice([16, 64, 300])
        m, p = LabelMap(), LabelMap()
        at: list[int | None] = [None] * cap  # the label of each address
        for step in range(rng.randint(1, 80)):
            lo = rng.randrange(cap)
            hi = min(cap, lo + rng.randint(0, cap // 3 + 1))
            want = list(dict.fromkeys(x for x in at[lo:hi] if x is not None))
            assert m.assign(lo, hi, step) == want
            p.put(lo, hi, step)
            at[lo:hi] = [step] * (hi - lo)
            assert (m.starts, m.ends, m.label) == (p.starts, p.ends, p.label)
            cover = [None] * cap
            for s, e, x in zip(m.starts, m.ends, m.label, strict=True):
                cover[s:e] = [x] * (e - s)
            assert cover == at
            assert all(e <= s for e, s in zip(m.ends[:-1], m.starts[1:], strict=True))


def test_coldest_numpy_path_matches_brute_force(monkeypatch):
    # many ranges per query: the numpy path (a sparse table of range maxima) answers
    monkeypatch.setattr(labelmap, "RUN_WINDOW", -1)  # not the path of ranges end to end
    rng = random.Random(2)
    for _ in range(60):
        cap, al = rng.choice([3000, 20000]), rng.choice([1, 8, 32])
        m = LabelMap()
        for _ in range(rng.randint(100, 400)):
            lo = rng.randrange(cap)
            m.put(lo, min(cap, lo + rng.randint(1, rng.choice([40, cap // 8]))), rng.randrange(90))
        for _ in range(10):
            lo = rng.randrange(cap // 4)
            hi = rng.randint(cap // 2, cap)
            size = rng.randint(1, rng.choice([64, hi - lo + 2]))
            monkeypatch.setattr(labelmap, "NUMPY_WINDOW", len(m.starts))  # the Python paths
            slow = m.coldest(lo, hi, size, al)
            monkeypatch.setattr(labelmap, "NUMPY_WINDOW", 0)
            fast = m.coldest(lo, hi, size, al)
            assert fast == slow == brute_coldest(m, lo, hi, size, al)
            assert fast is None or all(type(x) is int for x in fast)


def test_coldest_least_label_path_matches_brute_force():
    # many ranges, releases between the queries: where they cover the free range, the range
    # of the least label answers (its heap kept by put and assign, rebuilt when the lists are
    # replaced, as a restored scan does), else numpy
    rng = random.Random(3)
    answered = 0
    for case in range(16):
        cap, al = rng.choice([(4096, 32), (3000, 1), (8192, 8)])
        m = LabelMap()
        if case % 4:  # else holes stay between the ranges
            for k, lo in enumerate(range(0, cap, cap // 64)):
                m.put(lo, min(cap, lo + cap // 64), k)
        for step in range(64, 560):
            lo = rng.randrange(cap // al) * al
            hi = min(cap, lo + al * rng.choice([1, 1, 2, 5]))
            label = step if rng.random() < 0.95 else rng.randrange(step)  # a few repeated
            (m.put if step % 2 else m.assign)(lo, hi, label)
            if step % 97 == 0:
                m.starts, m.ends, m.label = m.starts[:], m.ends[:], m.label[:]
            if len(m.starts) > labelmap.NUMPY_WINDOW and step % 9 == 0:
                size = rng.choice([1, al, al, 2 * al, 7 * al])
                lo, hi = (0, cap) if step % 2 else (rng.randrange(cap // 3), cap - 5)
                assert m.coldest(lo, hi, size, al) == brute_coldest(m, lo, hi, size, al)
                answered += m._coldest_in(0, len(m.starts), 0, cap, size, al) is not None
                if m.held is not None and m.held[0] is m.starts:  # the heap kept: its holes
                    assert m.holes == sum(e < s for e, s in zip(m.ends, m.starts[1:], strict=False))
    assert answered > 30


def test_coldest_end_to_end_ranges_match_brute_force():
    # released ranges end to end (DLR's usual tier), holes only below and above them, labels
    # repeated at times and bounds aligned or not: the run path (_coldest_run) answers
    rng = random.Random(4)
    answered = 0
    for _ in range(300):
        al = rng.choice([1, 8, 32])
        grain = rng.choice([1, al])
        m = LabelMap()
        at = rng.randrange(0, 200) * grain
        for _ in range(rng.randint(1, 40)):
            width = rng.randint(1, rng.choice([2, 12])) * grain
            m.put(at, at + width, rng.randrange(30))
            at += width
        cap = at + rng.randrange(0, 300) * grain
        for _ in range(20):
            lo = rng.randrange(cap)
            hi = rng.randint(lo, cap)
            size = rng.randint(1, max(1, rng.choice([hi - lo + 1, (hi - lo) // 4 + 1])))
            want = brute_coldest(m, lo, hi, size, al)
            assert m.coldest(lo, hi, size, al) == want
            i = bisect_right(m.starts, lo) - 1
            i += i < 0 or m.ends[i] <= lo
            got = m._coldest_run(i, bisect_left(m.starts, hi), lo, hi, size, al)
            assert got is not False
            assert got == want
            answered += want is not None and want[0] >= 0
    assert answered > 800
