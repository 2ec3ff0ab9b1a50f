"""Codegen's flag kernel: the built extension and its source run as plain Python plan the same
flags."""

from __future__ import annotations

import numpy as np

from npucc.backend.schedule.registry import schedule_graph
from npucc.codegen import emit, flags_kernel
from npucc.ir.isa_cost import TargetSpillModel
from tests.codegen.test_flags import _matmul_graph
from tests.kernels import plain_source


def _replays():
    out = []
    for tiles, method in ((3, "original"), (8, "dan"), (12, "original")):
        graph, target = _matmul_graph(tiles)
        capacity = target.memory.on_chip()
        _, replay = schedule_graph(graph, method, capacity, TargetSpillModel(target), 32)
        out.append(replay)
    return out


def test_the_source_as_plain_python_plans_the_same_flags(monkeypatch):
    # the module is valid Python: without its build (the extension module) it runs as it is
    replays = _replays()
    built = [emit.plan_flags(r, first) for r in replays for first in (0, 41)]
    monkeypatch.setattr(emit, "flags_kernel", plain_source(flags_kernel))
    assert [emit.plan_flags(r, first) for r in replays for first in (0, 41)] == built
    assert all(f.count > 41 for f in built[1::2])
    assert any(len(items) > 1 for f in built for items in f.waits.values())


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone plans the same flags, slower,
    # so a missing build would show only as time
    assert not flags_kernel.__file__.endswith(".py"), f"{flags_kernel.__file__}: not built"


def test_sources_go_latest_first_each_once():
    # `latest_first` sorts every node's sources at once (numpy): a node with many sources,
    # repeats among them, in any edge order, as sorted(set(...)) by position, latest first
    rng = np.random.default_rng(7)
    total = 3000
    position = rng.permutation(total)
    preds = [list(rng.integers(0, total, rng.integers(0, 4))) for _ in range(total - 1)]
    preds.append(list(rng.integers(0, total, 20000)))  # one node waits for most others
    counts = np.array([len(p) for p in preds], np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = np.array([u for p in preds for u in p], np.int64)
    for kernel in (flags_kernel, plain_source(flags_kernel)):
        off, src = kernel.latest_first(position, offsets, flat)
        got = [list(src[off[v] : off[v + 1]]) for v in range(total)]
        want = [sorted(set(p), key=lambda u: position[u], reverse=True) for p in preds]
        assert got == want
