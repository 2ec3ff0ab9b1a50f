"""The estimate's per-core timing kernel (npucc.backend.estimate.timing_kernel): its source run as
plain Python (no build) gives the built module's timings, and the limits that keep its C longs
from overflowing are enforced."""

import importlib.util
import random
from pathlib import Path

import pytest

from npucc.backend.estimate import profile as profile_module
from npucc.backend.estimate import timing_kernel
from npucc.backend.estimate.profile import MTE2, core_timing, timed_shape


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


def test_the_source_as_plain_python_gives_the_same_timings(monkeypatch):
    # the module is valid Python: without its build (the extension module) it runs as it is
    source = Path(profile_module.__file__).with_name("timing_kernel.py")
    spec = importlib.util.spec_from_file_location("timing_kernel_py", source)
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    cases = _cases(300, 5)
    built = [core_timing(*case) for case in cases]
    monkeypatch.setattr(profile_module, "timing_kernel", plain)
    assert [core_timing(*case) for case in cases] == built
    assert any(len(t.tails) > 1 for t in built) and any(k > 63 for t in built for k, _ in t.tails)


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone gives the same timings, slower,
    # so a missing build would show only as time
    assert not timing_kernel.__file__.endswith(".py"), f"{timing_kernel.__file__}: not built"


def test_cycles_past_the_limit_are_refused():
    shape = timed_shape([0, 0], [(), (0,)], [1, 2])
    ok = profile_module.shape_timing([timing_kernel.CYCLES_LIMIT - 1, 5], shape)
    assert ok.cold == timing_kernel.CYCLES_LIMIT + 4
    with pytest.raises((ValueError, OverflowError)):
        profile_module.shape_timing([timing_kernel.CYCLES_LIMIT, 5], shape)
    with pytest.raises((ValueError, OverflowError)):
        profile_module.shape_timing([1 << 70, 5], shape)
