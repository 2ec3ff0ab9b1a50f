import numpy as np
import pytest
from tgraphs import CAPS, build, chain, two_loads

from npucc.backend.schedule.original import bounds, original
from npucc.backend.schedule.registry import SCHEDULERS, schedule_graph
from npucc.ir import replay as replay_mod
from npucc.ir.replay import (
    ScheduleError,
    keeps_edges,
    reordered,
    replay,
    replay_base,
    replay_within,
    validate,
)
from npucc.ir.schedule import Schedule
from npucc.target.cost import TraceSpillModel

MODEL = TraceSpillModel()


def test_chain_hand_computed():
    g = chain()
    s = original(g, CAPS, MODEL)
    validate(g, s, CAPS)
    r = replay(g, s, CAPS, MODEL)
    assert s.order == list(range(7)) and s.spills == []
    assert s.offsets == {0: 0, 1: 0}
    assert r.start[1:4:2] == [0, 10] and r.finish[5] == 35
    assert r.metrics() == {"peak": 150, "extra_ddr": 0, "spills": 0, "makespan": 35}
    assert bounds(g) == {"peak": 150, "makespan": 35}


def test_pipes_overlap_and_serialise():
    # two independent loads share MTE2 (serialised); the vector work overlaps the second load
    g = build(
        [
            ("ALLOC", 0, 64, "UB"),
            ("ALLOC", 1, 64, "UB"),
            ("COPY_IN", "MTE2", 30, [0]),
            ("COPY_IN", "MTE2", 40, [1]),
            ("VEC", "VECTOR", 50, [0]),
            ("VEC", "VECTOR", 7, [1]),
            ("FREE", 0),
            ("FREE", 1),
        ],
        [(0, 2), (1, 3), (2, 4), (3, 5), (4, 6), (5, 7)],
    )
    s = original(g, CAPS, MODEL)
    r = replay(g, s, CAPS, MODEL)
    assert r.finish[3] == 70 and r.start[4] == 30 and r.finish[4] == 80
    assert r.makespan == 87  # VEC 5 waits for the vector pipe (80) then runs 7
    assert bounds(g)["makespan"] == 80  # longest path 30 + 50 beats MTE2 busy 70


def test_address_reuse_edge_delays_alloc():
    # B reuses A's bytes; B's ALLOC waits for A's FREE, which waits for A's 100-cycle use
    g = build(
        [
            ("ALLOC", 0, 64, "UB"),
            ("VEC", "VECTOR", 100, [0]),
            ("FREE", 0),
            ("ALLOC", 1, 64, "UB"),
            ("COPY_IN", "MTE2", 10, [1]),
            ("FREE", 1),
        ],
        [],
    )
    s = Schedule(list(range(6)), {0: 0, 1: 0})
    r = replay(g, s, CAPS, MODEL)
    assert r.reuse_edges == [(2, 3)]
    assert r.start[4] == 100 and r.makespan == 110
    s2 = Schedule(list(range(6)), {0: 0, 1: 64})
    assert replay(g, s2, CAPS, MODEL).makespan == 100


def test_forced_spills_costs_and_offsets():
    g = two_loads(100)
    caps = dict(CAPS, L1=100)
    s, r = schedule_graph(g, "original", caps, MODEL)
    n = len(g.nodes)
    # ALLOC 1 evicts 0; USE 0 reloads 0 evicting 1; USE 1 reloads 1 evicting nothing (0 freed?)
    assert s.spills[0] == (0, 0)
    assert s.order[:3] == [0, 1, n]  # SPILL_OUT of buffer 0 right before ALLOC 1
    assert r.spills == len(s.spills) >= 2
    # both buffers were loaded by COPY_IN: clean spills cost 0 out, 2*100+150 in, 100 bytes
    assert r.nodes[n].cycles == 0 and r.nodes[n + 1].cycles == 350
    assert r.extra_ddr == 100 * r.spills
    assert (0, n) in r.spill_edges and (n, n + 1) in r.spill_edges
    assert (1, n) in r.spill_edges and (n + 1, 4) in r.spill_edges  # users around the spill
    for v in range(len(r.nodes)):
        assert all(0 <= o < 100 for o in r.buffer_offsets(v))
    assert r.peak == 200  # rule 6 counts ALLOC/FREE only


@pytest.mark.parametrize("nodes", [300, 20_000])
def test_replay_within_stops_once_slower(nodes):
    from npucc.tools.dan_synthetic import synthetic_graph

    g = synthetic_graph(nodes, seed=1)
    s, r = schedule_graph(g, "original", CAPS, MODEL)
    same = replay_within(g, s, MODEL, r.makespan)  # not slower: the whole replay
    assert same is not None
    assert (same.start, same.finish, same.reuse_edges, same.peak) == (
        r.start,
        r.finish,
        r.reuse_edges,
        r.peak,
    )
    assert replay_within(g, s, MODEL, r.makespan - 1) is None


def test_replay_base_shared_and_remaining_work_stops_early():
    from npucc.tools.dan_synthetic import synthetic_graph

    g = synthetic_graph(20_000, seed=2)
    s, r = schedule_graph(g, "original", CAPS, MODEL)
    assert s.spills  # the base's buffer uses serve the spill edges
    base = replay_base(g)
    for _ in range(2):  # a base serves any number of replays, with the same results
        again = replay(g, s, CAPS, MODEL, 1, base)
        assert (again.start, again.finish, again.spill_edges, again.reuse_edges) == (
            r.start,
            r.finish,
            r.spill_edges,
            r.reuse_edges,
        )
    # a bound below the busiest pipe's work: its first piece already shows the replay slower
    busiest = max(base.pipe_work().values())
    timed: list[int] = []
    original = replay_mod.in_order

    def counted(order, *args, **kwargs):
        timed.append(len(order))
        return original(order, *args, **kwargs)

    replay_mod.in_order = counted
    try:
        assert replay_within(g, s, MODEL, busiest - 1, base) is None
    finally:
        replay_mod.in_order = original
    assert len(timed) == 1 < len(r.order) // max(timed)


@pytest.mark.parametrize(
    ("method", "nodes", "moved"), [("dan", 2000, False), ("dan-lru", 5000, True)]
)
def test_replay_derived_from_the_plan_equals_a_full_replay(method, nodes, moved):
    from dataclasses import fields

    from npucc.tools.dan_synthetic import synthetic_graph

    g = synthetic_graph(nodes, seed=2)
    caps = dict(CAPS, L1=1024)  # it spills
    s = SCHEDULERS[method](g, caps, MODEL, 1)
    like = s.basis  # the plan's replay, which CPE refined
    assert like is not None and s.spills and (s.order != like.order) == moved
    want = replay(g, s, caps, MODEL)
    # the graph's edges checked here, or by validate (`checked`: its positions)
    for checked in (None, validate(g, s, caps)):
        at = keeps_edges(g, s, like, checked)
        assert at is not None
        got = reordered(g, s, like, at)
        for f in fields(want):
            a, b = getattr(got, f.name), getattr(want, f.name)
            assert ([tuple(x) for x in a] if f.name == "preds" else a) == (
                [tuple(x) for x in b] if f.name == "preds" else b
            ), f.name
    # an order that turns one of the plan's edges round is replayed in full instead
    src, dst = like.reuse_edges[0]
    order = [v for v in s.order if v != src]
    order.insert(order.index(dst) + 1, src)
    turned = Schedule(order, s.offsets, s.spills)
    assert keeps_edges(g, turned, like) is None
    at = np.empty(len(order), np.int64)
    at[order] = np.arange(len(order))  # (the graph's edges hold: a FREE is a leaf)
    assert keeps_edges(g, turned, like, at) is None
    assert keeps_edges(g, Schedule(s.order, s.offsets, s.spills[1:]), like) is None


def test_dirty_spill_costs_both_ways():
    g = build(
        [
            ("ALLOC", 0, 100, "UB"),
            ("VEC", "VECTOR", 1, [0]),
            ("ALLOC", 1, 100, "UB"),
            ("VEC", "VECTOR", 1, [1]),
            ("VEC", "VECTOR", 1, [0]),
            ("FREE", 0),
            ("FREE", 1),
        ],
        [(1, 3), (3, 4)],
    )
    s, r = schedule_graph(g, "original", dict(CAPS, UB=150), MODEL)
    n = len(g.nodes)
    assert s.spills[0][0] == 0
    assert r.nodes[n].cycles == 350 and r.extra_ddr >= 200


def test_offset_changes_at_spill_in():
    g = two_loads(64)
    caps = dict(CAPS, L1=128, UB=64)
    # hand-made: spill buffer 0 after its load, bring it back at offset 64
    n = len(g.nodes)
    order = [0, 1, n, 2, 3, n + 1, 4, 5, 6, 7]
    s = Schedule(order, {0: 0, 1: 0}, [(0, 64)])
    validate(g, s, caps)
    r = replay(g, s, caps, MODEL)
    assert r.buffer_offsets(1) == (0,) and r.buffer_offsets(4) == (64,)
    assert r.offset_at(n, 0) == 0 and r.offset_at(n + 1, 0) == 64
    assert (n, 2) in r.reuse_edges  # buffer 1 takes the bytes buffer 0 left at SPILL_OUT


def test_validator_catches_overlap():
    g = two_loads(64)
    s = Schedule(list(range(8)), {0: 0, 1: 32})
    with pytest.raises(ScheduleError, match="overlaps live buffer 0"):
        validate(g, s, CAPS)


def test_validator_catches_non_topological_order():
    g = chain()
    s = Schedule([0, 3, 1, 2, 4, 5, 6], {0: 0, 1: 0})
    with pytest.raises(ScheduleError, match="edge"):
        validate(g, s, CAPS)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (Schedule(list(range(7)), {0: 0, 1: 2000}), "exceeds UB capacity"),
        (Schedule(list(range(7)), {0: 3, 1: 0}), "not a multiple"),
        (Schedule(list(range(7)), {0: 0}), "offset None"),
        (Schedule(list(range(6)), {0: 0, 1: 0}), "order has 6"),
        (Schedule([0, 1, 2, 3, 4, 5, 5], {0: 0, 1: 0}), "twice"),
    ],
)
def test_validator_rejects(schedule, message):
    with pytest.raises(ScheduleError, match=message):
        validate(chain(), schedule, CAPS, alignment=2)


def test_validator_catches_use_while_spilled():
    g = two_loads(64)
    n = len(g.nodes)
    order = [0, 1, n, 4, 2, 3, n + 1, 5, 6, 7]  # USE of buffer 0 while it is out
    with pytest.raises(ScheduleError, match="edge|not resident"):
        validate(g, Schedule(order, {0: 0, 1: 0}, [(0, 64)]), CAPS)


def test_alignment_respected():
    g = build(
        [
            ("ALLOC", 0, 10, "UB"),
            ("ALLOC", 1, 10, "UB"),
            ("V", "VECTOR", 1, [0, 1]),
            ("FREE", 0),
            ("FREE", 1),
        ],
        [],
    )
    s, _ = schedule_graph(g, "original", CAPS, MODEL, alignment=32)
    assert s.offsets == {0: 0, 1: 32}


def test_registry_has_original():
    assert "original" in SCHEDULERS
    with pytest.raises(Exception, match="unknown scheduler"):
        schedule_graph(chain(), "nope", CAPS, MODEL)


@pytest.mark.parametrize(
    ("order", "message"),
    [
        ([0, 1, 2, 3, 4, 5, 5], "node 5 appears twice in the order"),
        ([0, 1, 2, 3, 4, 5, 7], "order position 6: unknown node 7"),
        ([0, 1, 2, 3, 4, 5, -1], "order position 6: unknown node -1"),
        ([0, 1, 2, 3, 4, 5, 6.0], "order position 6: unknown node 6.0"),
        ([0, 1, 2, 3, 4, 6, 5], "edge 5->6 violated: node 6 at position 5 runs before node 5"),
        # the first edge by source id, then the source's edges in order
        ([3, 1, 0, 2, 4, 5, 6], "edge 0->1 violated: node 1 at position 1 runs before node 0 at"),
        ([0, 1, 2, 5, 3, 4, 6], "edge 3->5 violated: node 5 at position 3 runs before node 3 at"),
    ],
)
def test_validate_names_the_first_fault_of_the_order(order, message):
    g = chain()
    s = original(g, CAPS, MODEL)
    with pytest.raises(ScheduleError, match=message):
        validate(g, Schedule(order, s.offsets), CAPS)


def test_replay_within_goes_on_from_a_marked_replay():
    from dataclasses import fields

    from npucc.backend.schedule.dan.dlr import dlr
    from npucc.backend.schedule.scan import topo_order
    from npucc.tools.dan_synthetic import synthetic_graph

    g = synthetic_graph(20_000, seed=2)
    caps = dict(CAPS, L1=1024)  # it spills
    order = topo_order(g)
    plan = dlr(g, order, caps, MODEL)
    assert plan.spills
    base = replay_base(g)
    like = replay(g, plan, caps, MODEL, 1, base, marked=True)
    assert len(like.marks) == -(-len(plan.order) // replay_mod.MARK_EVERY)
    # a variant parting late: a buffer live across the last mark before 3/4 of the order
    # spilled just after it and reloaded at once (its occupancy there ends at the new
    # SPILL_OUT, not at its FREE: the label of its range at the mark is not like's)
    n = len(g.nodes)
    mark = len(plan.order) * 3 // 4 // replay_mod.MARK_EVERY * replay_mod.MARK_EVERY
    cut = mark + 8
    pos = {v: i for i, v in enumerate(plan.order)}
    spilled = {b for b, _ in plan.spills}
    b = next(
        b
        for b in range(len(g.buffers))
        if b not in spilled
        and g.buffers[b].size
        and pos[g.alloc_of[b]] < mark
        and cut < pos[g.free_of[b]]
    )
    k = len(plan.spills)
    late = Schedule(
        plan.order[:cut] + [n + 2 * k, n + 2 * k + 1] + plan.order[cut:],
        plan.offsets,
        [*plan.spills, (b, plan.offsets[b])],
    )
    validate(g, late, caps)
    timed: list[int] = []
    original = replay_mod.in_order

    def counted(order, *args, **kwargs):
        timed.append(len(order))
        return original(order, *args, **kwargs)

    packed = dlr(g, order, caps, MODEL, placement="best")
    variants = [
        late,
        plan,
        dlr(g, order, caps, MODEL, prefetch=True),
        dlr(g, order, caps, MODEL, ahead=8),
        packed,
        # its offsets named in another order (compared buffer by buffer)
        Schedule(packed.order, dict(reversed(packed.offsets.items())), packed.spills),
    ]
    for s in variants:
        want = replay(g, s, caps, MODEL)
        timed.clear()
        replay_mod.in_order = counted
        try:
            got = replay_within(g, s, MODEL, want.makespan, base, like)
        finally:
            replay_mod.in_order = original
        if s is late or s is plan:  # gone on from a mark past 3/4 of the order
            assert sum(timed) < len(s.order) // 4 + replay_mod.MARK_EVERY
        assert replay_within(g, s, MODEL, want.makespan - 1, base, like) is None
        assert got is not None and not got.marks
        for f in fields(want):
            a, b = getattr(got, f.name), getattr(want, f.name)
            assert ([tuple(x) for x in a] if f.name == "preds" else a) == (
                [tuple(x) for x in b] if f.name == "preds" else b
            ), f.name


@pytest.mark.parametrize(
    ("order", "spills", "fault"),
    [
        ([0, 1, 2], [], None),
        ([0, 1, 3, 4, 2], [(0, 0)], None),  # used before its SPILL_OUT
        ([0, 3, 4, 1, 2], [(0, 0)], None),  # ... after its SPILL_IN
        ([0, 3, 1, 4, 2], [(0, 0)], "node 1 (VEC) at position 2 uses buffer 0 while it is not "
         "resident (ALLOC/SPILL/FREE positions [0, 1, 3, 4])"),
    ],
)  # fmt: skip
def test_validator_names_the_use_outside_its_buffer_s_spans(order, spills, fault):
    g = build([("ALLOC", 0, 64, "UB"), ("VEC", "VECTOR", 5, [0]), ("FREE", 0)], [])
    schedule = Schedule(order, {0: 0}, spills)
    if fault is None:
        validate(g, schedule, CAPS)
    else:
        with pytest.raises(ScheduleError) as info:
            validate(g, schedule, CAPS)
        assert str(info.value) == f"{fault} ({g.name})"
