"""Codegen's flag kernel: the built extension and its source run as plain Python plan the same
flags."""

from __future__ import annotations

import numpy as np

from npucc.backend.schedule.registry import schedule_graph
from npucc.codegen import emit, flags_kernel
from npucc.ir.isa_cost import TargetSpillModel
from npucc.ir.stream_text import SYNC_BAR, SYNC_SEP, format_sync, line_tail, sync_word
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
    assert any(tail.count(" wait ") for f in built for tail in f.tails)  # two waits on a line


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


def _flags_of(tail: str) -> tuple[list[str], list[str]]:
    """The flags a line tail waits for and sets."""
    words = tail.removeprefix(SYNC_BAR).split(SYNC_SEP) if tail else []
    pairs = list(zip(words[::2], words[1::2], strict=True))
    return [f for verb, f in pairs if verb == "wait"], [f for verb, f in pairs if verb == "set"]


def test_a_tail_is_format_sync_of_its_flags_own_then_remote_in_each_group(monkeypatch):
    replay = _replays()[0]
    own = emit.plan_flags(replay)
    busy = next(v for v, tail in enumerate(own.tails) if " wait " in tail and " set " in tail)
    waiter = next(v for v, tail in enumerate(own.tails) if tail and " set " not in tail)
    far = emit.Remote({busy: [sync_word("wait", "mte2@0,1>cube#90")]},
                      {busy: [sync_word("set", "cube>mte3@1,0#91")],
                       waiter: [sync_word("set", "ctrl>ctrl@1,1#92")]})  # fmt: skip
    built = emit.plan_flags(replay, 0, far)
    monkeypatch.setattr(emit, "flags_kernel", plain_source(flags_kernel))
    assert emit.plan_flags(replay, 0, far) == built
    waits, sets = _flags_of(own.tails[busy])
    assert waits and sets
    want = format_sync([*waits, "mte2@0,1>cube#90"], [*sets, "cube>mte3@1,0#91"])
    assert built.tails[busy] == line_tail(want)
    waits, sets = _flags_of(own.tails[waiter])
    assert waits and not sets
    assert built.tails[waiter] == line_tail(format_sync(waits, ["ctrl>ctrl@1,1#92"]))
    assert [t for v, t in enumerate(built.tails) if v not in (busy, waiter)] == [
        t for v, t in enumerate(own.tails) if v not in (busy, waiter)
    ]


def test_a_line_with_remote_flags_alone():
    # two nodes on one pipe, no edges: no flags of their own; node 1 sets one to another core
    width = 6
    pairs = [f"p{i}>" for i in range((width + 1) ** 2)]
    words = ([sync_word("wait", p) for p in pairs], [sync_word("set", p) for p in pairs],
             SYNC_SEP, SYNC_BAR)  # fmt: skip
    nodes = np.array([0, 1], np.int64)
    far = ({}, {1: [sync_word("set", "x@0,1>y#3")]})
    for kernel in (flags_kernel, plain_source(flags_kernel)):
        tails, count = kernel.flag_edges(nodes, np.zeros(2, np.int64), nodes,
                                         np.zeros(3, np.int64), np.zeros(0, np.int64), width,
                                         words, 5, far)  # fmt: skip
        assert (tails, count) == (["", line_tail(format_sync([], ["x@0,1>y#3"]))], 5)
