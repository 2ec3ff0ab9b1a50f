"""Capacity-aware bounds: valid against exhaustive optima on small graphs, tight where measured."""

import pytest

from npucc.backend.schedule.capacity_bounds import capacity_bounds, memory_bounds
from npucc.backend.schedule.exhaustive import min_extra_ddr, min_makespan
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.trace_json import trace_from_json
from npucc.target.cost import TraceSpillModel
from npucc.tools.dan_command import DEFAULT_CAPACITY
from npucc.tools.dan_hard import HARD_WORKLOADS, small_instance
from npucc.tools.dan_workloads import WORKLOADS

MODEL = TraceSpillModel()
SEEDS = range(200)


@pytest.fixture(scope="module")
def measured():
    rows = []
    for seed in SEEDS:
        g, caps = small_instance(seed, chained=seed % 2 == 1)
        b = memory_bounds(g, caps, MODEL)
        _, r = schedule_graph(g, "dan", caps, MODEL)
        rows.append((seed, b, min_extra_ddr(g, caps, MODEL), min_makespan(g, caps, MODEL), r))
    return rows


def test_every_small_graph_is_solved_exactly(measured):
    assert all(ddr is not None and span is not None for _, _, ddr, span, _ in measured)


def test_bounds_never_exceed_the_exhaustive_optima(measured):
    for seed, b, ddr, span, _ in measured:
        assert b["extra_ddr"] <= ddr, seed
        assert b["makespan"] <= b["makespan_capacity"] <= span, seed


def test_exhaustive_optima_never_exceed_a_legal_schedule(measured):
    # the searches relax the rules, so DAN's validated, replayed schedule is never better
    for seed, _, ddr, span, r in measured:
        assert ddr <= r.extra_ddr and span <= r.makespan, seed


def test_bounds_are_not_vacuous(measured):
    forced = [(b, ddr, span) for _, b, ddr, span, _ in measured if ddr]
    assert len(forced) >= len(SEEDS) // 10
    exact = sum(b["extra_ddr"] == ddr for b, ddr, _ in forced)
    assert exact >= len(forced) // 3  # the extra-DDR bound is the optimum on many of them
    assert sum(b["extra_ddr"] > 0 for b, _, _ in forced) >= len(forced) // 2
    assert sum(b["makespan_capacity"] > b["makespan"] for b, _, _ in forced) >= 5


def test_hard_workloads_force_spills_and_the_old_ones_do_not():
    for name, make in WORKLOADS.items():
        assert capacity_bounds(make(), DEFAULT_CAPACITY, MODEL)["extra_ddr"] == 0, name
    for name in ("HardMatmul_Case0", "HardConv_Case0", "HardFlashAttention_Case0"):
        g = HARD_WORKLOADS[name]()
        b = memory_bounds(g, DEFAULT_CAPACITY, MODEL)
        assert b["extra_ddr"] > 0 and b["makespan_capacity"] > b["makespan"], name
        _, r = schedule_graph(g, "dan", DEFAULT_CAPACITY, MODEL)
        assert r.extra_ddr >= b["extra_ddr"] and r.makespan >= b["makespan_capacity"], name


def test_a_buffer_reloaded_between_uses_is_charged_each_time():
    # a, b (L1, 64 B, both loaded by COPY_IN: clean spills) in a 64 B L1, one chain of uses
    # a b a b a: at each use the other buffer is live and must be out, and every use of it in
    # between ends the previous spill: four spills of 64 B, the exhaustive optimum
    nodes = [
        {"Id": 0, "Op": "ALLOC", "BufId": 0, "Size": 64, "Type": "L1"},
        {"Id": 1, "Op": "ALLOC", "BufId": 1, "Size": 64, "Type": "L1"},
        {"Id": 2, "Op": "COPY_IN", "Pipe": "MTE2", "Cycles": 10, "Bufs": [0]},
        {"Id": 3, "Op": "COPY_IN", "Pipe": "MTE2", "Cycles": 10, "Bufs": [1]},
        {"Id": 4, "Op": "V", "Pipe": "VECTOR", "Cycles": 10, "Bufs": [0]},
        {"Id": 5, "Op": "V", "Pipe": "VECTOR", "Cycles": 10, "Bufs": [1]},
        {"Id": 6, "Op": "V", "Pipe": "VECTOR", "Cycles": 10, "Bufs": [0]},
        {"Id": 7, "Op": "FREE", "BufId": 0},
        {"Id": 8, "Op": "FREE", "BufId": 1},
    ]
    edges = [[2, 3], [3, 4], [4, 5], [5, 6], [6, 7], [6, 8]]
    g = trace_from_json({"Nodes": nodes, "Edges": edges})
    caps = {**DEFAULT_CAPACITY, "L1": 64}
    got = capacity_bounds(g, caps, MODEL)
    assert got["extra_ddr"] == min_extra_ddr(g, caps, MODEL) == 4 * 64
    assert got["MTE2"] == 4 * (2 * 64 + 150) and got["MTE3"] == 0  # clean: free SPILL_OUTs
