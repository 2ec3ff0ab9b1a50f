"""CPE's compiled kernel: its source run as plain Python (no build) gives the built module's
list and budgeted orders, and times past 2^60 cycles are refused."""

import pytest

from npucc.backend.schedule.dan import cpe, cpe_kernel, headroom
from npucc.backend.schedule.registry import schedule_graph
from npucc.errors import NpuccError
from npucc.target.cost import TraceSpillModel
from npucc.tools import dan_command as command
from npucc.tools.dan_hard import HARD_WORKLOADS
from npucc.tools.dan_synthetic import synthetic_graph
from tests.kernels import plain_source
from tests.schedule.tgraphs import build

CAPS = dict(command.DEFAULT_CAPACITY)
MODEL = TraceSpillModel()


def _orders(r):
    """Every list order (no cap, the plan's peak, twice it; ranked and not) and budgeted order
    (the plan's peak, 1.5x, unbounded) of `r`, each also bounded at its own makespan."""
    preds, succs, group = r.preds, cpe._succs(r), cpe._groups(r)
    h = cpe.downstream(r, succs)
    out = []
    for cap, critical in ((None, h), (None, None), (r.peak, h), (r.peak, None), (2 * r.peak, h)):
        found = cpe.list_order(r, preds, succs, group, cap, critical)
        assert found is not None
        out += [found, cpe.list_order(r, preds, succs, group, cap, critical, max(found[1]))]
    if not r.spills:
        for cap in (r.peak, r.peak * 3 // 2, 1 << 40):
            found = cpe.budget_order(r, preds, succs, cap, h)
            assert found is not None
            out += [found, cpe.budget_order(r, preds, succs, cap, h, max(found[1]))]
    return out


def test_the_source_as_plain_python_gives_the_same_orders(monkeypatch):
    # the module is valid Python: without its build (the extension module) it runs as it is
    plain = plain_source(cpe_kernel)
    replays = []
    for g in (synthetic_graph(1500, seed=4), HARD_WORKLOADS["HardConv_Case0"]()):
        replays.append(schedule_graph(g, "dan-dlr", CAPS, MODEL)[1])
    assert not replays[0].spills and replays[1].spills
    built = [_orders(r) for r in replays]
    monkeypatch.setattr(cpe, "cpe_kernel", plain)
    monkeypatch.setattr(headroom, "cpe_kernel", plain)
    again = [_orders(r) for r in replays]
    assert again == built
    assert built[0][1] is None and all(type(v) is int for v in built[0][0][0][:10])


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone runs the same orders, slower
    assert not cpe_kernel.__file__.endswith(".py"), f"{cpe_kernel.__file__}: not built"


def test_work_past_2_60_cycles_is_refused():
    g = build([("LOAD", "MTE2", 1 << 59, []), ("USE", "VECTOR", 1 << 59, [])], [(0, 1)])
    _, r = schedule_graph(g, "dan-dlr", CAPS, MODEL)
    with pytest.raises(NpuccError, match="int64"):
        cpe.Tables(r, r.preds, cpe._succs(r))
