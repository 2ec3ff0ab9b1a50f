"""The execution-faithful estimate's list schedule (npucc.backend.estimate.list_schedule)."""

from __future__ import annotations

import random

from npucc.backend.estimate.list_schedule import (
    LayerRun,
    LayerTiming,
    RunCost,
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


def test_a_later_runs_const_bytes_pass_an_earlier_runs_input_bytes_on_the_channel() -> None:
    target = load_target("mesh8x8")
    reads = LayerTiming(1, 0, ((1, 1),))
    # A: 100 channel cycles of input bytes; B: 50 of const bytes; C: 10 cycles after A's end
    a = LayerRun(
        RunCost((reads,), 1.0, 64, 0, 100, 0), ((0, 2),), (0, 0, 0, 1), (1,), (((0, 0),),), 0
    )
    c = LayerRun(
        RunCost((LayerTiming(10, 0, ((1, 10),)),), 1.0, 0, 0, 0, 0), ((4, 5),), (0, 0, 0, 1), (1,),
        (((1, 0),),), 0,
    )  # fmt: skip
    weights = RunCost((LayerTiming(1, 0, ((0, 1),)),), 1.0, 64, 50, 0, 0)
    idle = LayerRun(weights, ((2, 4),), (0, 0, 0, 1), (), (), 0)  # its cores free from 0
    assert schedule(target, [a, idle, c]) == 100 + 50 + 10  # B's 50 go ahead of A's 100, once
    busy = LayerRun(weights, ((0, 2),), (0, 0, 0, 1), (), (), 0)  # on A's cores: after A
    assert schedule(target, [a, busy, c]) == 100 + 50


def test_a_runs_input_loads_queue_behind_its_leading_const_loads_on_the_channel() -> None:
    target = load_target("mesh8x8")
    # 50 channel cycles of leading const bytes; its input (on chip: no channel bytes) is ready
    # at 0, and its loads and the 10 cycles after them wait for those const loads (in-order MTE2)
    timing = LayerTiming(1, 0, ((0, 1), (1, 10)))
    run = LayerRun(
        RunCost((timing,), 1.0, 64, 50, 0, 0), ((0, 2),), (0, 0, 0, 1), (1,), (((0, 0),),), 0
    )
    assert schedule(target, [run]) == 50 + 10
    assert schedule(load_target("davinci-core"), [run]) == 10  # no shared channel: no wait


def test_a_later_runs_const_bytes_pass_a_runs_leading_const_bytes_on_the_channel() -> None:
    target = load_target("mesh8x8")
    # Z: 20 cycles on A's cores; A: then 100 channel cycles of leading const bytes and its input
    # loads (1 cycle); B: 50 of const bytes on cores free from 0; C: 10 cycles after A's end
    z = LayerRun(
        RunCost((LayerTiming(20, 0, ((0, 20),)),), 1.0, 0, 0, 0, 0), ((0, 2),), (0, 0, 0, 1), (),
        (), 0,
    )  # fmt: skip
    reads = LayerTiming(1, 0, ((1, 1),))
    a = LayerRun(
        RunCost((reads,), 1.0, 64, 100, 0, 0), ((0, 2),), (0, 0, 0, 1), (1,), (((0, 0),),), 0
    )
    c = LayerRun(
        RunCost((LayerTiming(10, 0, ((1, 10),)),), 1.0, 0, 0, 0, 0), ((4, 5),), (0, 0, 0, 1), (1,),
        (((2, 0),),), 0,
    )  # fmt: skip
    weights = RunCost((LayerTiming(1, 0, ((0, 1),)),), 1.0, 64, 50, 0, 0)
    idle = LayerRun(weights, ((2, 4),), (0, 0, 0, 1), (), (), 0)  # free before A's bytes
    assert schedule(target, [z, a, idle, c]) == 50 + 100 + 1 + 10  # B's 50 first, once
    busy = LayerRun(weights, ((0, 2),), (0, 0, 0, 1), (), (), 0)  # on A's cores: after A
    assert schedule(target, [z, a, busy, c]) == 20 + 100 + 1 + 50
