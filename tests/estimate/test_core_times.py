"""`CoreTimes.timings` against each core's `LayerProfile.core_timing` with its copies' cycles
overridden (the rule it memoises), on random profiles, one memo across many calls."""

from __future__ import annotations

import random

import numpy as np

from npucc.backend.estimate.core_times import CoreTimes
from npucc.backend.estimate.profile import DdrCopy, LayerProfile, copy_rows
from npucc.backend.estimate.share_timing import MTE2


def _profile(rng: random.Random) -> LayerProfile:
    """A random profile whose copies (on a pipe, as a lowering's are) fall in random tiles."""
    n = rng.randint(1, 30)
    pipe = tuple(rng.choice((None, 0, 1, MTE2)) for _ in range(n))
    starts = (0, *sorted(rng.sample(range(1, n), rng.randint(0, min(n - 1, 5)))))
    tile = [max(t for t, s in enumerate(starts) if s <= v) for v in range(n)]
    copies = tuple(
        DdrCopy(v, rng.randrange(3), 0, 1, None, tile=tile[v], shape=("DDR", "L1", 4))  # type: ignore[arg-type]
        for v in range(n)
        if pipe[v] is not None and rng.random() < 0.4
    )
    return LayerProfile(
        pipe, tuple(rng.randint(0, 9) for _ in range(n)),
        tuple(tuple(rng.sample(range(v), min(v, rng.randint(0, 3)))) for v in range(n)),
        tuple(rng.choice((1, 2, 4, 6)) for _ in range(n)), starts, (1,) * len(starts), 0.0, 0,
        0, (0,) * 5, copies,
    )  # fmt: skip


def test_core_times_are_each_cores_timing_with_its_copies_cycles() -> None:
    rng = random.Random(38)
    memo = CoreTimes()
    profiles = [_profile(rng) for _ in range(40)]  # NOTE: kept alive: the memo keys by id
    checked = 0
    for _ in range(600):
        prof = rng.choice(profiles)
        cores = rng.randint(1, len(prof.tiles) + 1)
        rows = copy_rows(prof, cores, {}, 8)
        over = np.array([rng.choice((-1, 0, 3, 7, 20)) for _ in prof.copies], np.int64)
        want: dict = {}
        for core in range(cores):
            first = int(rows.core_off[core])
            cycles = {v: int(over[first + j]) for j, v in enumerate(rows.nodes[core])
                      if over[first + j] >= 0}  # fmt: skip
            want.setdefault(prof.core_timing(cores, core, cycles), None)
        assert memo.timings(prof, rows, over) == tuple(want)
        checked += len(prof.copies) > 0
    assert checked > 300
