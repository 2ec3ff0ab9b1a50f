"""The execution-faithful estimate's list schedule (npucc.backend.estimate.list_schedule)."""

from __future__ import annotations

import copy
import random

from npucc.backend.estimate.list_schedule import (
    LayerRun,
    LayerTiming,
    RunCost,
    Timeline,
    channel_bound,
    decisive,
    schedule,
)
from npucc.target import load_target


def _timing(rng: random.Random) -> LayerTiming:
    classes = rng.choice([(0,), (1,), (0, 1), (0, 2), (1, 2), (0, 1, 2)])
    tails = tuple((c, rng.randint(0, 30)) for c in classes)
    return LayerTiming(rng.randint(0, 40), rng.randint(0, 20), tails)


def _run(timings: tuple[LayerTiming, ...], srcs: tuple, spans: tuple, after: int = -1) -> LayerRun:
    after = max(t.mte2_tail for t in timings) if after < 0 else after
    cost = RunCost(timings, 1.0, 64, 3, 5, after)
    return LayerRun(cost, spans, (0, 0, 0, 1), (1, 2), srcs, 0)


def test_a_run_ends_and_hands_on_alike_with_its_decisive_timings_only() -> None:
    target = load_target("mesh8x8")
    rng = random.Random(3)
    pruned = 0
    for _ in range(400):
        first = _run((_timing(rng),), ((), ()), ((0, 2),))
        second = _run((_timing(rng),), ((), ()), ((2, 4),))
        timings = tuple(_timing(rng) for _ in range(rng.randint(1, 6)))
        srcs = (((1, rng.randint(0, 9)),), ((2, rng.randint(0, 9)),))
        after = _run((_timing(rng),), ((), ()), ((0, 4),))  # waits for the MTE2 the run left
        whole = schedule(target, [first, second, _run(timings, srcs, ((0, 4),)), after])
        kept = decisive(timings)
        pruned += len(timings) - len(kept)
        tail = max(t.mte2_tail for t in timings)  # NOTE: of every timing, as RunCost's
        assert schedule(target, [first, second, _run(kept, srcs, ((0, 4),), tail), after]) == whole
    assert pruned > 0


def _random_runs(rng: random.Random, count: int) -> list[LayerRun]:
    """`count` runs of random timings and channel cycles on random cores, each reading
    earlier ones."""
    runs = []
    for k in range(count):
        timings = tuple(_timing(rng) for _ in range(rng.randint(1, 3)))
        srcs = tuple(((rng.randint(0, k), rng.randint(0, 9)),) for _ in range(2))
        cost = RunCost(timings, 1.0, 64, rng.randint(0, 50), rng.randint(0, 50), 0)
        a = rng.randint(0, 60)
        runs.append(LayerRun(cost, ((a, a + rng.randint(1, 4)),), (0, 0, 0, 1), (1, 2), srcs, 0))
    return runs


def test_the_channel_bound_is_a_lower_bound_of_the_latency() -> None:
    target = load_target("mesh8x8")
    rng = random.Random(5)
    for _ in range(300):
        runs = _random_runs(rng, rng.randint(1, 6))
        bound = channel_bound(target, [run.cost for run in runs])
        assert bound == sum(run.cost.lead_held + run.cost.rest_held for run in runs)
        assert bound <= schedule(target, runs)
    assert channel_bound(load_target("davinci-core"), [runs[0].cost]) == 0  # no shared channel


def test_a_schedule_continued_from_its_timeline_is_the_whole_schedule() -> None:
    target = load_target("mesh8x8")
    rng = random.Random(7)
    for _ in range(100):
        runs = _random_runs(rng, rng.randint(1, 8))
        whole = schedule(target, runs)
        for k in range(len(runs) + 1):
            at = Timeline.start(target.cores)
            schedule(target, runs[:k], at)
            before = copy.deepcopy(at)
            assert schedule(target, runs[k:], at) == whole
            assert schedule(target, runs[k:], before) == whole  # the copy is independent
            first = Timeline.start(target.cores)
            schedule(target, runs[:k], first)
            full = Timeline.start(target.cores)
            schedule(target, runs, full)
            upto = full.upto(runs, k)  # the cores' times rebuilt, no run replayed
            cores = (upto.core_free, upto.mte2_free)
            assert (upto.done, cores) == (k, (first.core_free, first.mte2_free))
            assert [a[: k + 1] for a in (upto.ends, upto.loads, upto.channels)] == [
                first.ends,
                first.loads,
                first.channels,
            ]
            assert schedule(target, runs[k:], upto) == whole
            assert upto == full
