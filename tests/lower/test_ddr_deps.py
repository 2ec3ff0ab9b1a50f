"""Exact DDR read-after-write dependencies (ddr_deps.py): runs of copy patterns, the writers a
read overlaps (against a brute-force element set), and the builder's edges on one core."""

from __future__ import annotations

import numpy as np

from npucc.backend.lower import ddr_deps
from npucc.backend.lower.builder import TileBuilder
from npucc.backend.lower.ddr_deps import Written, by_channels, pattern_runs
from npucc.ir.isa import Copy, DdrRef
from npucc.ir.tiled import TileGraph
from npucc.target import load_target


def _elements(off: int, dims: tuple[int, ...], strides: tuple[int, ...]) -> set[int]:
    idx = np.array([off])
    for d, s in zip(dims, strides, strict=True):
        idx = (idx[:, None] + np.arange(d) * s).ravel()
    return set(idx.tolist())


def test_runs_merge_the_contiguous_inner_dims() -> None:
    """[64 channels, 1 row, 112] of a 112 x 112 plane: 64 runs of 112; rows 0-9 of them: 1120."""
    starts, length = pattern_runs(5, (64, 1, 112), (12544, 112, 1))
    assert length == 112 and starts.tolist() == [5 + 12544 * c for c in range(64)]
    starts, length = pattern_runs(0, (64, 10, 112), (12544, 112, 1))
    assert length == 1120 and len(starts) == 64
    starts, length = pattern_runs(3, (2, 3), (0, 2))  # a broadcast dim: duplicates dropped
    assert length == 1 and starts.tolist() == [3, 5, 7]


def test_a_patterns_runs_are_worked_out_once_and_shifted_to_each_offset() -> None:
    """The runs of one pattern at other offsets: its elements' at each (against a brute-force
    element set), worked out once (`_runs`' cache), each answer a new array (a caller may keep
    it)."""
    dims, strides = (3, 2, 5), (40, 9, 1)  # not nested: 2 rows 9 apart in runs of 5
    ddr_deps._runs.cache_clear()
    first, length = pattern_runs(11, dims, strides)
    for off in (0, 11, 1000):
        starts, n = pattern_runs(off, dims, strides)
        assert n == length == 5
        runs = {int(a) + i for a in starts for i in range(n)}
        assert runs == _elements(off, dims, strides)
        starts += 1  # a caller's change reaches no later answer
    assert pattern_runs(11, dims, strides)[0].tolist() == first.tolist()
    assert ddr_deps._runs.cache_info()[:2] == (4, 1)  # (hits, misses)


def test_writers_are_exactly_the_overlapping_writes() -> None:
    """Random strided writes and reads of a 4 x 6 x 7 tensor: the writers a read waits for are
    those sharing an element with it, no more and no fewer."""
    rng = np.random.default_rng(0)
    shape, strides = (4, 6, 7), (42, 7, 1)
    for _ in range(200):
        writes, sets = [], {}
        for node in range(int(rng.integers(1, 6))):
            lo = [int(rng.integers(0, n)) for n in shape]
            dims = tuple(int(rng.integers(1, n - a + 1)) for a, n in zip(lo, shape, strict=True))
            off = sum(a * s for a, s in zip(lo, strides, strict=True))
            writes.append((node, pattern_runs(off, dims, strides)))
            sets[node] = _elements(off, dims, strides)
        lo = [int(rng.integers(0, n)) for n in shape]
        dims = tuple(int(rng.integers(1, n - a + 1)) for a, n in zip(lo, shape, strict=True))
        off = sum(a * s for a, s in zip(lo, strides, strict=True))
        read = _elements(off, dims, strides)
        expected = sorted(n for n, s in sets.items() if s & read)
        assert Written.of(writes).writers(pattern_runs(off, dims, strides)) == expected


def test_a_read_waits_for_the_stores_it_overlaps_only() -> None:
    """Two row stores of a [2, 4, 8] tensor (rows 0-1, rows 2-3 of both channels), closed as one
    layer: reading rows 0-1 depends on the first store alone; reading every row on both."""
    target = load_target("davinci-core")
    graph = TileGraph("g")
    builder = TileBuilder(graph, target)
    ub = builder.alloc("UB", 64)
    stores = [
        builder.emit(Copy(DdrRef("t", r * 8), ub, (2, 2, 8), (32, 8, 1), (16, 8, 1)))
        for r in (0, 2)
    ]
    builder.close_ddr("t", 0, 64)
    dst = [builder.alloc("UB", 64) for _ in range(2)]  # no buffer edge to the stores
    first = builder.emit(Copy(dst[0], DdrRef("t", 0), (2, 2, 8), (16, 8, 1), (32, 8, 1)))
    both = builder.emit(Copy(dst[1], DdrRef("t", 0), (64,), (1,), (1,)))
    assert stores[0] in graph.preds[first] and stores[1] not in graph.preds[first]
    (barrier,) = [p for p in graph.preds[both] if graph.nodes[p].op == "BARRIER"]
    assert sorted(graph.preds[barrier]) == stores
    for buf in (ub, *dst):
        builder.free(buf)


def test_writes_by_channel_groups_are_told_from_writes_by_row_bands() -> None:
    """A [4 channels, 2 rows of 8] tensor: stores of two channels' whole planes, first channels
    first, are by channel groups; stores of a row of every channel, or both planes of the last
    channels first, or one store of everything, are not."""
    plane = 16
    by_groups = [(n, pattern_runs(n * 2 * plane, (2, plane), (plane, 1))) for n in range(2)]
    by_rows = [(n, pattern_runs(n * 8, (4, 8), (plane, 1))) for n in range(2)]
    backwards = [(1 - n, runs) for n, runs in by_groups]
    whole = [(0, pattern_runs(0, (4 * plane,), (1,)))]
    assert by_channels([Written.of(by_groups)], 0, 4, plane)
    for writes in (by_rows, backwards, whole):
        assert not by_channels([Written.of(writes)], 0, 4, plane)
