"""A core's share of a profile timed on in-order pipes (npucc.backend.estimate.share_timing):
`core_timing` against one in-order replay per class, a core's share cut from the profile's
arrays, and the contraction of pipe-less nodes."""

from __future__ import annotations

import random

from npucc.backend.estimate.profile import LayerProfile
from npucc.backend.estimate.share_timing import (
    MTE2,
    contracted,
    core_share,
    core_timing,
    profile_arrays,
    share_lists,
)
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


def test_a_cores_share_from_arrays_is_its_nodes_and_keys_its_shape_exactly() -> None:
    # `core_share` (numpy) gives `core_nodes`'s nodes, pipes, predecessors and classes
    # (duplicate and forward predecessors, classes past a C long); equal keys only for
    # equal shapes, and equal shapes of one profile have equal keys
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(1, 30)
        starts = tuple(sorted(rng.sample(range(n), rng.randint(1, min(n, 6)))))
        prof = LayerProfile(
            tuple(rng.choice((None, 0, 1, MTE2)) for _ in range(n)), (3,) * n,
            tuple(tuple(rng.randrange(n) for _ in range(rng.randint(0, 3))) for _ in range(n)),
            tuple(rng.choice((1, 2, 6, 1 << 69 | 1)) for _ in range(n)), starts,
            (1,) * len(starts), 0.0, 0, 0, (0,) * 5,
        )  # fmt: skip
        arrays = profile_arrays(prof)
        seen: dict[tuple, tuple] = {}
        for cores in range(1, len(starts) + 2):
            for core in range(cores):
                nodes, *shape = prof.core_nodes(cores, core)
                share = core_share(arrays, cores, core)
                assert share.nodes.tolist() == nodes
                assert list(share_lists(arrays, share)) == shape
                want = repr(shape)
                assert seen.setdefault(share.key, want) == want
                assert {k for k, v in seen.items() if v == want} == {share.key}


def test_a_contracted_core_times_alike_with_fewer_nodes() -> None:
    rng = random.Random(11)
    fewer = 0
    for _ in range(400):
        n = rng.randint(0, 40)
        pipe: list[int | None] = [rng.choice([None, None, 0, 1, MTE2]) for _ in range(n)]
        duration = [rng.randint(0, 9) for _ in range(n)]
        preds = [tuple(rng.sample(range(v), min(v, rng.randint(0, 3)))) for v in range(n)]
        classes = [rng.choice([1, 2, 4, 6, 8, 3]) for _ in range(n)]
        keep, (pipe2, preds2, classes2) = contracted(pipe, preds, classes)
        timed = [duration[v] for v in keep] + [0] * (len(pipe2) - len(keep))
        assert core_timing(timed, pipe2, preds2, classes2) == core_timing(
            duration, pipe, preds, classes
        )
        assert all(pipe[v] is None for v in set(range(n)) - set(keep))  # only pipe-less go
        fewer += len(pipe2) < n
    assert fewer > 200  # pipe-less nodes joining no two nodes to two others are gone


def _by_sets(
    pipe: list[int | None], preds: list[tuple[int, ...]], classes: list[int]
) -> tuple[list[int], tuple[list, list, list]]:
    """`contracted` by Python sets (the rule as first written)."""
    n = len(pipe)
    if any(u >= v for v in range(n) for u in preds[v]):
        return list(range(n)), (list(pipe), list(preds), list(classes))
    succs: list[list[int]] = [[] for _ in range(n)]
    for v, ps in enumerate(preds):
        for u in ps:
            succs[u].append(v)
    reach: list[set[int]] = [set()] * n
    alive, mask, zero = [True] * n, list(classes), 0
    for v in range(n - 1, -1, -1):
        out: set[int] = set()
        for w in succs[v]:
            out |= {w} if alive[w] else reach[w]
        reach[v] = out
        ps = preds[v]
        if pipe[v] is not None or (len(ps) >= 2 and len(out) >= 2 and len(set(ps)) >= 2):
            continue
        alive[v] = False
        if not out:
            zero |= classes[v]
        for w in out:
            mask[w] |= classes[v]
    keep = [v for v in range(n) if alive[v]]
    kept_preds = [tuple(i for i, u in enumerate(keep) if v in reach[u]) for v in keep]
    shape = ([pipe[v] for v in keep], kept_preds, [mask[v] for v in keep])
    if zero:
        shape[0].append(None)
        shape[1].append(())
        shape[2].append(zero)
    return keep, shape


def test_contracted_is_the_rule_by_sets() -> None:
    # repeated predecessors, classes past a C long, some cores with a forward predecessor
    rng = random.Random(13)
    for _ in range(500):
        n = rng.randint(0, 45)
        pipe: list[int | None] = [rng.choice([None, None, None, 0, 1, MTE2]) for _ in range(n)]
        preds = [
            tuple(rng.randrange(v) for _ in range(rng.randint(0, 3 if v else 0))) for v in range(n)
        ]
        if n and rng.random() < 0.1:
            preds[rng.randrange(n)] += (rng.randrange(n),)
        classes = [rng.choice([1, 2, 4, 6, 1 << 69 | 1]) for _ in range(n)]
        keep, shape = contracted(pipe, preds, classes)
        assert (keep, tuple(shape)) == _by_sets(pipe, preds, classes)


def test_a_core_with_a_forward_predecessor_is_not_contracted() -> None:
    pipe: list[int | None] = [None, 0, None]
    preds = [(2,), (0,), (1,)]
    keep, shape = contracted(pipe, preds, [1, 2, 4])
    assert keep == [0, 1, 2]
    assert shape == (pipe, preds, [1, 2, 4])
