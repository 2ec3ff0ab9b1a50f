import time

from tgraphs import CAPS

from npucc.backend.schedule.original import bounds
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.trace_json import load_trace, write_trace
from npucc.target.cost import TraceSpillModel
from npucc.tools.dan_synthetic import synthetic_graph


def test_original_on_synthetic_is_valid_and_fast(tmp_path):
    g = synthetic_graph(20_000, seed=3)
    write_trace(g, tmp_path / "s.json")
    g = load_trace(tmp_path / "s.json")
    t0 = time.perf_counter()
    schedule, r = schedule_graph(g, "original", CAPS, TraceSpillModel())
    assert time.perf_counter() - t0 < 5
    b = bounds(g)
    assert r.makespan >= b["makespan"] and r.peak >= b["peak"]
    assert r.spills == len(schedule.spills) > 0
    finish = r.finish
    for src, dst in r.edges():
        assert finish[src] <= r.start[dst]
