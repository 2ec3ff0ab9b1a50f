"""The scan kernel's tier space (scan_kernel.Space): its fits, take and give, release labels and
coldest query against their definitions; its CSR lists (the one home, `csr`); the kernel's source
run as plain Python (no build)."""

import random

import pytest

from npucc.backend.schedule import scan as scan_module
from npucc.backend.schedule import scan_kernel
from npucc.backend.schedule.dan.dlr import DlrVictim
from npucc.backend.schedule.dan.mpas import mpas
from npucc.backend.schedule.scan import LinearScan, Trail
from npucc.backend.schedule.scan_kernel import Space
from npucc.target.cost import TraceSpillModel
from npucc.tools.dan_synthetic import synthetic_graph
from tests.kernels import plain_source


def up(x: int, al: int) -> int:
    return -(-x // al) * al


def latest(ranges, lo: int, hi: int) -> int:
    """The latest label over the ranges meeting [lo, hi) (a zero-width window: those around
    it), -1 if none."""
    return max((x for s, e, x in ranges if s < hi and e > lo), default=-1)


def brute_coldest(ranges, lo: int, hi: int, size: int, al: int):
    """Space.coldest by definition: every candidate offset's window maximum, one by one."""
    inner = [x for s, e, _ in ranges for x in (s, e) if lo < x < hi]
    cands = {up(lo, al), (hi - size) // al * al} | {up(x, al) for x in inner}
    fits = [off for off in cands if lo <= off and off + size <= hi]
    return min(((latest(ranges, off, off + size), off) for off in fits), default=None)


def labelled(sp: Space):
    return list(zip(*sp.label_lists(), strict=True))


def test_put_matches_a_per_address_map():
    rng = random.Random(1)
    for _ in range(100):
        cap = rng.choice([16, 64, 300])
        sp = Space(cap)
        at: list[int | None] = [None] * cap  # the label of each address
        for step in range(rng.randint(1, 80)):
            lo = rng.randrange(cap)
            hi = min(cap, lo + rng.randint(0, cap // 3 + 1))
            sp.put(lo, hi, step)
            at[lo:hi] = [step] * (hi - lo)
            cover: list[int | None] = [None] * cap
            ranges = labelled(sp)
            for s, e, x in ranges:
                cover[s:e] = [x] * (e - s)
            assert cover == at
            assert all(e1 <= s2 for (_, e1, _), (s2, _, _) in zip(ranges, ranges[1:], strict=False))
            assert all(s < e for s, e, _ in ranges)
            lo = rng.randrange(cap)
            hi = rng.randint(lo + 1, cap)
            assert sp.latest(lo, hi) == max((x for x in at[lo:hi] if x is not None), default=-1)
            assert sp.latest(lo, lo) == latest(ranges, lo, lo)


def test_coldest_matches_brute_force():
    rng = random.Random(0)
    for case in range(300):
        cap, al = rng.choice([64, 1000, 4096]), rng.choice([1, 8, 32])
        sp = Space(cap, al)
        if case % 3:  # released end to end, as DLR's tiers mostly are
            at = rng.randrange(0, cap // 4)
            while at < cap:
                width = rng.randint(1, rng.choice([6, 40, cap // 8 + 1]))
                sp.put(at, min(cap, at + width), rng.randrange(30))
                at += width + (rng.random() < 0.1) * rng.randint(1, 50)
        for _ in range(rng.randint(1, 120)):
            lo = rng.randrange(cap)
            sp.put(
                lo, min(cap, lo + rng.randint(1, rng.choice([6, cap // 4 + 1]))), rng.randrange(40)
            )
            lo = rng.randrange(cap)
            hi = rng.randint(lo, cap)
            size = rng.randint(0, hi - lo + 2)
            assert sp.coldest(lo, hi, size) == brute_coldest(labelled(sp), lo, hi, size, al)


def test_coldest_prefers_old_release_then_low_offset():
    sp = Space(64, 16)
    sp.put(0, 16, 5)
    sp.put(16, 32, 2)
    sp.put(32, 48, 2)
    assert sp.coldest(0, 64, 16) == (-1, 48)  # never released beats any release
    assert sp.coldest(0, 48, 16) == (2, 16)  # equal releases: the lower offset
    assert sp.coldest_fit(16) == 48
    sp.take(48, 16)
    assert sp.coldest_fit(16) == 16


def test_fits_take_and_give_match_a_per_address_map():
    rng = random.Random(2)
    for _ in range(200):
        cap, al = rng.choice([(64, 1), (300, 4), (1024, 32)])
        sp = Space(cap, al)
        free = [True] * cap
        held: list[tuple[int, int]] = []
        for step in range(rng.randint(1, 60)):
            starts, ends = sp.free_lists()
            segs = []
            for a in range(cap):  # the free segments by definition
                if free[a] and (a == 0 or not free[a - 1]):
                    segs.append([a, a])
                if free[a]:
                    segs[-1][1] = a + 1
            assert [list(s) for s in zip(starts, ends, strict=True)] == segs
            size = rng.randint(1, cap // 4)
            offs = [(s, up(s, al), e) for s, e in segs if up(s, al) + size <= e]
            assert sp.first_fit(size) == (offs[0][1] if offs else -1)
            best = min(offs, key=lambda o: (o[2] - o[1] - size, o[1]), default=None)
            assert sp.best_fit(size) == (best[1] if best else -1)
            tops = [(e - size) // al * al for s, e in segs if e - size >= s]
            tops = [o for o in tops if any(s <= o and o + size <= e for s, e in segs)]
            assert sp.last_fit(size) == (tops[-1] if tops else -1)
            if held and (rng.random() < 0.4 or not offs):
                off, n = held.pop(rng.randrange(len(held)))
                sp.give(off, n)
                free[off : off + n] = [True] * n
                with pytest.raises(ValueError):
                    sp.give(off, n)
            elif offs:
                off = rng.choice([sp.first_fit(size), sp.best_fit(size), sp.last_fit(size)])
                sp.take(off, size)
                free[off : off + size] = [False] * size
                held.append((off, size))
                with pytest.raises(ValueError):
                    sp.take(off, size)
            sp.put(0, cap, step)  # labels leave the free segments alone


def _plans():
    """A DLR-style spilling scan of each placement, a prefetching and a reloading-ahead one,
    and one following a trail: their plans."""
    g = synthetic_graph(2500, seed=2)
    caps = {"L1": 1536, "UB": 768, "L0A": 256, "L0B": 256, "L0C": 512}
    order = mpas(g, single_l0=True, mode="full", strict=False)
    victim = DlrVictim(g, TraceSpillModel())
    plans = []
    trail = Trail()
    for placement, prefetch, ahead in [
        ("cold", False, 0),
        ("best", False, 0),
        ("first", False, 0),
        ("cold", True, 0),
        ("cold", False, 8),
    ]:
        got = LinearScan(g, order, caps, 4, placement, prefetch, ahead=ahead).run(
            victim, None, trail if placement == "cold" and not prefetch else None
        )
        plans.append((got.order, got.offsets, got.spills))
    assert plans[0][2] and trail.marks  # spills, a trail recorded and followed
    return plans


def test_the_source_as_plain_python_gives_the_same_plans(monkeypatch):
    # the module is valid Python: without its build (the extension module) it runs as it is
    plain = plain_source(scan_kernel)
    built = _plans()
    monkeypatch.setattr(scan_module, "scan_kernel", plain)
    assert _plans() == built


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone runs the same plans, slowly
    assert not scan_kernel.__file__.endswith(".py"), f"{scan_kernel.__file__}: not built"


@pytest.mark.parametrize("kernel", ["built", "plain"])
def test_csr_lists_every_item_s_entries_in_its_order(kernel):
    csr = (scan_kernel if kernel == "built" else plain_source(scan_kernel)).csr
    lists = [[3, 1], [], (7,), {5}, [0, 0, 2]]  # lists, tuples, sets: each in its own order
    off, idx = csr(lists)
    assert off.dtype == idx.dtype == "int64"
    assert [idx[off[v] : off[v + 1]].tolist() for v in range(len(lists))] == [
        list(x) for x in lists
    ]
    off, idx = csr([])
    assert off.tolist() == [0] and idx.tolist() == []
