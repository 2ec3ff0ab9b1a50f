"""DAN's tries in worker processes (`jobs`): the same schedules as in one process."""

import pytest

from npucc.backend.schedule.dan import cpe, pipeline
from npucc.backend.schedule.registry import schedule_graph
from npucc.errors import NpuccError
from npucc.parallel import forks
from npucc.target.cost import TraceSpillModel
from npucc.tools import dan_command as command
from npucc.tools.dan_synthetic import synthetic_graph

CAPS = dict(command.DEFAULT_CAPACITY)
MODEL = TraceSpillModel()

pytestmark = pytest.mark.skipif(not forks(2, 2), reason="no forked workers on this platform")


@pytest.fixture
def forked(monkeypatch):
    """Every graph forks (no size threshold); the fork_map calls counted by their caller."""
    monkeypatch.setattr(pipeline, "FORK_NODES", 0)
    calls = {"pipeline": 0, "cpe": 0}
    for name, module in (("pipeline", pipeline), ("cpe", cpe)):
        real = module.fork_map

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "fork_map", counted)
    return calls


def _plan(graph, method, caps, jobs, overlap=None):
    s, r = schedule_graph(graph, method, caps, MODEL, overlap=overlap, jobs=jobs)
    return s.order, s.offsets, s.spills, r.start, r.finish, r.metrics()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("method", ["dan", "dan-dlr"])
def test_spilling_plans_are_the_same_with_workers(forked, seed, method):
    g = synthetic_graph(3000, seed=seed, group=3)
    alone = _plan(g, method, CAPS, 1)
    assert forked["pipeline"] == 0
    assert _plan(g, method, CAPS, 2) == alone
    assert alone[2]  # NOTE: it spills, so the variants were placed by workers too
    assert forked["pipeline"] == 2


@pytest.mark.parametrize("overlap", [None, 1.0, 1.5, float("inf")])
def test_refined_orders_are_the_same_with_workers(forked, overlap):
    g = synthetic_graph(2000, seed=2)  # NOTE: no spills: CPE's three list tries (and budgets)
    alone = _plan(g, "dan", CAPS, 1, overlap)
    assert _plan(g, "dan", CAPS, 2, overlap) == alone
    assert not alone[2] and forked["cpe"] == 1


def test_small_graphs_stay_in_process(monkeypatch):
    calls = []
    monkeypatch.setattr(pipeline, "fork_map", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(cpe, "fork_map", lambda *a, **k: calls.append(a))
    g = synthetic_graph(2000, seed=2)
    assert len(g.nodes) < pipeline.FORK_NODES
    schedule_graph(g, "dan", CAPS, MODEL, jobs=2)
    assert not calls


def test_an_error_is_the_same_with_workers(forked):
    caps = {tier: size for tier, size in CAPS.items() if tier != "UB"}
    g = synthetic_graph(800, seed=0)
    with pytest.raises(NpuccError) as alone:
        schedule_graph(g, "dan", caps, MODEL, jobs=1)
    with pytest.raises(NpuccError) as forked_error:
        schedule_graph(g, "dan", caps, MODEL, jobs=2)
    assert str(forked_error.value) == str(alone.value)
