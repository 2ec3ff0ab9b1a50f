"""The estimate's per-core replay (npucc.backend.estimate.profile.core_timing)."""

from __future__ import annotations

import random

from npucc.backend.estimate.profile import MTE2, core_timing
from npucc.target.timing import in_order


def _by_replays(
    duration: list[int], pipe: list[int | None], preds: list[tuple[int, ...]], classes: list[int]
) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """Cold duration, MTE2 tail and tails by one in-order replay per class, each class
    released after everything else could finish."""
    order = range(len(duration))
    _, finish = in_order(order, duration, pipe, preds)
    cold = max(finish, default=0)
    mte2 = max((f for f, p in zip(finish, pipe, strict=True) if p == MTE2), default=0)
    present = 0
    for c in classes:
        present |= c
    late = sum(duration) + 1
    tails = []
    for cls in range(present.bit_length()):
        if present >> cls & 1:
            release = [late if c >> cls & 1 else 0 for c in classes]
            _, finish = in_order(order, duration, pipe, preds, release)
            tails.append((cls, max(finish) - late))
    return cold, cold - mte2 if mte2 else cold, tuple(tails)


def test_core_timing_matches_one_replay_per_class() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(0, 40)
        pipe: list[int | None] = [rng.choice([None, 0, 1, 2, MTE2]) for _ in range(n)]
        duration = [rng.randint(0, 9) for _ in range(n)]
        preds = [
            tuple(rng.randrange(n) for _ in range(rng.randint(0, 3))) if n else () for _ in range(n)
        ]  # NOTE: some point forward or at the node itself: a replay ignores them
        classes = [rng.choice([1, 2, 4, 6, 8, 3]) for _ in range(n)]
        timing = core_timing(duration, pipe, preds, classes)
        assert (timing.cold, timing.mte2_tail, timing.tails) == _by_replays(
            duration, pipe, preds, classes
        )
