"""Codegen's flag kernel: the built extension and its source run as plain Python plan the same
flags."""

from __future__ import annotations

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
