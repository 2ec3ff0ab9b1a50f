"""The estimate's kernels (npucc.backend.estimate.timing_kernel): their source run as plain Python
(no build) gives the built module's timings, NoC prices and list schedules, and the limits that
keep their C longs from overflowing are enforced."""

import random
from array import array
from types import SimpleNamespace

import pytest

from npucc.backend.estimate import profile as profile_module
from npucc.backend.estimate import share_timing as share_timing_module
from npucc.backend.estimate import timing_kernel
from npucc.backend.estimate.list_schedule import LayerRun, LayerTiming, RunCost, core_spans
from npucc.backend.estimate.profile import (
    copy_rows,
    noc_priced,
)
from npucc.backend.estimate.share_timing import (
    MTE2,
    contracted,
    core_timing,
    timed_shape,
)
from npucc.ir.onchip import OnChip
from tests.kernels import plain_source


def _cases(count: int, seed: int) -> list[tuple[list[int], list, list, list[int]]]:
    """Random cores: cycles, pipes, predecessors (some pointing forward: never waited for) and
    classes (up to 70 release classes: bits past a C long's)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(0, 60)
        pipe = [rng.choice([None, 0, 1, 2, MTE2]) for _ in range(n)]
        cycles = [rng.randint(0, 1 << rng.choice([3, 20, 39])) for _ in range(n)]
        preds = [tuple(rng.randrange(n) for _ in range(rng.randint(0, 3))) for _ in range(n)]
        classes = [rng.choice([1, 2, 6, 1 << 40 | 1, 1 << 69]) for _ in range(n)]
        out.append((cycles, pipe, preds, classes))
    return out


def _copies(count: int, seed: int) -> list[tuple]:
    """Random profiles' copies on some cores with some operands kept (`noc_priced`'s inputs)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        used = tuple((rng.randrange(8), rng.randrange(8)) for _ in range(rng.randint(1, 6)))
        homes = {
            o: OnChip(tuple((rng.randrange(8), rng.randrange(8)) for _ in range(4)), 10)
            for o in rng.sample(range(4), rng.randint(0, 3))
        }
        offsets = {o: rng.randrange(5) for o in homes}
        copies = []
        for node in range(rng.randint(0, 30)):
            lo = rng.randrange(30)
            copies.append(
                SimpleNamespace(
                    operand=rng.randrange(4), tile=rng.randrange(9), node=node, lo=lo,
                    hi=rng.randint(lo, 35), shape=(node % 3,), instr=node % 3,
                    energy_pj=rng.random(), ddr=8, lead=rng.random() < 0.5,
                )
            )  # fmt: skip
        prof = SimpleNamespace(energy_pj=50.0, ddr_bytes=900, lead_ddr_bytes=300, copies=copies)
        out.append((prof, homes, offsets, used))
    return out


def _priced(cases: list[tuple]) -> list[tuple]:
    """`noc_priced` of each case, its cycles as a list."""
    out = []
    for prof, homes, offsets, used in cases:
        rows = copy_rows(prof, len(used), {}, 15)
        over, *rest = noc_priced(
            prof, rows, homes, offsets, used, lambda ins, hops: (7 * hops + ins, hops / 3)
        )
        out.append((over.tolist(), *rest))
    return out


def _runs(count: int, seed: int) -> list[tuple[list[LayerRun], int]]:
    """Random layer runs on 16 cores (inputs written by earlier runs or READY, flags, classes,
    stagings with no input), each batch with the list schedule's start channel."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        runs = []
        for i in range(rng.randint(1, 12)):
            srcs = tuple(
                tuple((rng.randint(0, i), rng.randrange(40)) for _ in range(rng.randint(0, 3)))
                for _ in range(rng.randint(0, 3))
            )
            classes = range(len(srcs) + 1)
            timings = tuple(
                LayerTiming(
                    rng.randrange(1 << rng.choice([4, 30])), rng.randrange(50),
                    tuple(
                        (c, rng.randrange(1 << 20))
                        for c in sorted(rng.sample(classes, rng.randint(0, len(classes))))
                    ),
                )
                for _ in range(rng.randint(1, 3))
            )  # fmt: skip
            data = tuple(sorted(rng.sample(range(1, len(srcs) + 1), rng.randint(0, len(srcs)))))
            held = (rng.choice([0, rng.randrange(500)]), rng.choice([0, rng.randrange(500)]))
            cost = RunCost(timings, 1.0, 8, *held, rng.randrange(90))
            cores = tuple(rng.sample(range(16), rng.randint(1, 16)))
            runs.append(LayerRun(cost, core_spans(cores), (0, 0, 3, 3), data, srcs, i))
        out.append((runs, rng.randrange(100)))
    return out


def _scheduled(kernel, cases: list, shared: bool) -> list[tuple]:
    """`schedule_runs` of each case from the start: its latency, its runs' ends, loads' and
    channel's times, its cores' times, and those `cores_after` rebuilds after each k runs."""
    out = []
    for runs, channel in cases:
        n = len(runs)
        ends, loads, channels = (array("q", [0] * (n + 1)) for _ in range(3))
        channels[0] = channel
        core_free, mte2_free = array("q", [0] * 16), array("q", [0] * 16)
        latency = kernel.schedule_runs(
            runs, 0, ends, loads, channels, core_free, mte2_free, shared
        )  # fmt: skip
        rebuilt = []
        for k in range(n + 1):
            cores = array("q", [7] * 16), array("q", [7] * 16)
            kernel.cores_after(runs, k, ends, loads, *cores)
            rebuilt.append((cores[0].tolist(), cores[1].tolist()))
        out.append((latency, ends.tolist(), loads.tolist(), channels.tolist(), rebuilt))
        assert rebuilt[-1] == (core_free.tolist(), mte2_free.tolist())
    return out


def _state(runs: list, channel: int, core_free: int, mte2_free: int) -> tuple:
    """`schedule_runs`'s arguments after `runs` (from `channel`, on one core at these times)."""
    ends, loads, channels = (array("q", [0] * (len(runs) + 1)) for _ in range(3))
    channels[0] = channel
    return runs, 0, ends, loads, channels, array("q", [core_free]), array("q", [mte2_free])


def test_the_source_as_plain_python_gives_the_same_list_schedules():
    plain = plain_source(timing_kernel)
    cases = _runs(300, 11)
    for shared in (True, False):
        built = _scheduled(timing_kernel, cases, shared)
        assert _scheduled(plain, cases, shared) == built
        assert len({e[-1] for _, e, *_ in built}) > 100  # the cases are not alike
    with pytest.raises(ValueError):  # a run on no cores
        timing_kernel.schedule_runs(*_state([cases[0][0][0]._replace(spans=())], 0, 0, 0), True)


def test_a_list_schedule_past_a_c_long_is_refused():
    run = LayerRun(
        RunCost((LayerTiming(5, 0, ((1, 3),)),), 1.0, 8, 0, 0, 0), ((0, 1),), (0, 0, 0, 0),
        (1,), (((0, 7),),), 0,
    )  # fmt: skip
    loading = run._replace(cost=run.cost._replace(lead_held=1))
    for kernel in (timing_kernel, plain_source(timing_kernel)):
        assert kernel.schedule_runs(*_state([run], 0, (1 << 62) - 9, 0), True) == (1 << 62) - 4
        for late in ([run], 0, (1 << 63) - 2, 0), ([loading], 0, 0, (1 << 63) - 1):
            with pytest.raises(OverflowError):  # past a C long: refused, not wrapped
                kernel.schedule_runs(*_state(*late), True)


def test_the_source_as_plain_python_gives_the_same_timings(monkeypatch):
    # the module is valid Python: without its build (the extension module) it runs as it is
    plain = plain_source(timing_kernel)
    cases, copies = _cases(300, 5), _copies(200, 3)
    built = [core_timing(*case) for case in cases]
    priced = _priced(copies)
    monkeypatch.setattr(profile_module, "timing_kernel", plain)
    monkeypatch.setattr(share_timing_module, "timing_kernel", plain)
    assert [core_timing(*case) for case in cases] == built
    assert any(len(t.tails) > 1 for t in built) and any(k > 63 for t in built for k, _ in t.tails)
    assert _priced(copies) == priced
    assert any(c >= 0 for over, *_ in priced for c in over)


def test_the_source_as_plain_python_contracts_alike(monkeypatch):
    # repeated predecessors, classes past a C long, some cores with a forward predecessor
    rng = random.Random(9)
    cases = []
    for _ in range(300):
        n = rng.randint(0, 50)
        pipe = [rng.choice([None, None, None, 0, MTE2]) for _ in range(n)]
        preds = [
            tuple(rng.randrange(v) for _ in range(rng.randint(0, 3 if v else 0))) for v in range(n)
        ]
        if n and rng.random() < 0.1:
            preds[0] = (n - 1,)
        classes = [rng.choice([1, 2, 6, 1 << 40 | 1, 1 << 69]) for _ in range(n)]
        cases.append((pipe, preds, classes))
    built = [contracted(*case) for case in cases]
    monkeypatch.setattr(share_timing_module, "timing_kernel", plain_source(timing_kernel))
    assert [contracted(*case) for case in cases] == built
    assert sum(len(keep) < len(case[0]) for (keep, _), case in zip(built, cases, strict=True)) > 150


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone gives the same timings, slower,
    # so a missing build would show only as time
    assert not timing_kernel.__file__.endswith(".py"), f"{timing_kernel.__file__}: not built"


def test_cycles_past_the_limit_are_refused():
    shape = timed_shape([0, 0], [(), (0,)], [1, 2])
    ok = share_timing_module.shape_timing([timing_kernel.CYCLES_LIMIT - 1, 5], shape)
    assert ok.cold == timing_kernel.CYCLES_LIMIT + 4
    with pytest.raises((ValueError, OverflowError)):
        share_timing_module.shape_timing([timing_kernel.CYCLES_LIMIT, 5], shape)
    with pytest.raises((ValueError, OverflowError)):
        share_timing_module.shape_timing([1 << 70, 5], shape)
