import pytest

from npucc.backend.schedule.baseline_schedulers import exact_min_peak
from npucc.backend.schedule.dan.dlr import dlr
from npucc.backend.schedule.dan.mpas import mpas
from npucc.backend.schedule.original import bounds
from npucc.backend.schedule.registry import SCHEDULERS, schedule_graph
from npucc.backend.schedule.trace_json import trace_from_json
from npucc.ir.replay import replay, validate
from npucc.target.cost import TraceSpillModel
from npucc.tools import bench_dan as bench
from npucc.tools.dan_command import DEFAULT_CAPACITY
from npucc.tools.dan_workloads import WORKLOADS

MODEL = TraceSpillModel()


@pytest.mark.parametrize("method", [m for m in SCHEDULERS if m != "dan-mpas"])
def test_every_method_valid_on_small_workloads(method):
    for name in ("Conv_Case0", "FlashAttention_Case0", "Matmul_Case0"):
        g = WORKLOADS[name]()
        s, r = schedule_graph(g, method, DEFAULT_CAPACITY, MODEL)  # validates
        validate(g, s, DEFAULT_CAPACITY)
        b = bounds(g)
        assert r.makespan >= b["makespan"] and r.peak >= b["peak"]


def test_stage1_rule7_on_workloads():
    for name in ("Conv_Case0", "FlashAttention_Case0", "Matmul_Case0"):
        g = WORKLOADS[name]()
        s, _ = schedule_graph(g, "dan-mpas", DEFAULT_CAPACITY, MODEL)
        validate(g, s, None, single_l0=True)


def test_exact_min_peak_beats_the_node_bound_on_a_small_graph():
    g = WORKLOADS["Matmul_Case0"]()
    assert exact_min_peak(g) is None  # past the downset limit
    nodes = [
        {"Id": 0, "Op": "ALLOC", "BufId": 0, "Size": 100, "Type": "L1"},
        {"Id": 1, "Op": "ALLOC", "BufId": 1, "Size": 50, "Type": "UB"},
        {"Id": 2, "Op": "COPY_IN", "Pipe": "MTE2", "Cycles": 10, "Bufs": [0]},
        {"Id": 3, "Op": "VEC", "Pipe": "VECTOR", "Cycles": 5, "Bufs": [0, 1]},
        {"Id": 4, "Op": "FREE", "BufId": 0},
        {"Id": 5, "Op": "COPY_IN", "Pipe": "MTE2", "Cycles": 10, "Bufs": [1]},
        {"Id": 6, "Op": "FREE", "BufId": 1},
    ]
    edges = [[0, 2], [2, 3], [1, 5], [5, 3], [3, 4], [3, 6]]
    small = trace_from_json({"Nodes": nodes, "Edges": edges})
    assert exact_min_peak(small) == bounds(small)["peak"] == 150


def test_bench_json_schema():
    result = bench.run(["Matmul_Case0"])
    w = result["workloads"]["Matmul_Case0"]
    assert {"original", "dan"} <= set(w["methods"])
    for m in w["methods"].values():
        assert {"peak", "extra_ddr", "spills", "makespan", "seconds"} <= set(m)
    assert set(w["bounds"]) == {"peak", "makespan", "makespan_capacity", "extra_ddr"}
    assert set(w["dan_over_bounds"]) == {"makespan", "makespan_capacity", "extra_ddr"}
    assert w["dan_over_bounds"]["extra_ddr"] == 1.0  # no spill forced, none made
    assert "Matmul_Case0" in bench.table(result)


def test_bench_hard_workload_and_small_graphs():
    result = bench.run(["HardFlashAttention_Case0"])
    w = result["workloads"]["HardFlashAttention_Case0"]
    b, dan = w["bounds"], w["methods"]["dan"]
    assert 0 < b["extra_ddr"] <= dan["extra_ddr"] <= 2 * b["extra_ddr"]
    assert b["makespan"] < b["makespan_capacity"] <= dan["makespan"]
    assert w["dan_over_bounds"]["makespan_capacity"] <= 1.2
    small = bench.tightness(40)
    assert small["valid"] and small["solved"] == 40 and small["forced_spills"] > 0
    result["small"] = small
    assert "small graphs: valid True" in bench.table(result)


def test_strict_rule7_keeps_the_memory_first_order():
    g = WORKLOADS["Conv_Case0"]()
    for strict in (True, False):
        order = mpas(g, single_l0=True, mode="memory", strict=strict)
        s = dlr(g, order, DEFAULT_CAPACITY, MODEL)
        validate(g, s, DEFAULT_CAPACITY)
        assert replay(g, s, DEFAULT_CAPACITY, MODEL).metrics()["peak"] == 1280
