import numpy as np

from npucc.backend.schedule.dan.headroom import room as make_room
from npucc.backend.schedule.registry import schedule_graph
from npucc.tools.dan_synthetic import synthetic_graph
from tests.schedule.dan.test_dan import CAPS, MODEL
from tests.schedule.tgraphs import build


def _two_layers():
    """Buffer a loaded and used, then buffer b loaded and used after a's use (100 B each)."""
    return build(
        [
            ("ALLOC", 0, 100, "L1"),
            ("COPY_IN", "MTE2", 10, [0]),
            ("USE", "VECTOR", 50, [0]),
            ("FREE", 0),
            ("ALLOC", 1, 100, "L1"),
            ("COPY_IN", "MTE2", 10, [1]),
            ("USE", "VECTOR", 50, [1]),
            ("FREE", 1),
        ],
        [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (2, 6), (6, 7)],
    )


def _room(cap):
    g = _two_layers()
    return make_room(g, g.nodes, g.preds, list(range(len(g.nodes))), cap)


def _fits(room, allocs):
    return room.fits(np.array(allocs, np.int64), len(allocs))


def test_a_buffer_starts_ahead_of_the_plan_only_within_the_slack():
    room = _room(100)  # the plan's own peak: b cannot start before a ends
    assert _fits(room, [0]) and not _fits(room, [4])
    room.start(0)
    assert not _fits(room, [4])
    room.end(3)
    assert _fits(room, [4])
    room = _room(200)  # room for both
    assert _fits(room, [4])
    room.start(4)
    assert _fits(room, [0]) and room.live == 100
    room.start(0)
    room.end(3)
    room.end(7)
    assert room.live == 0


def test_the_plans_next_buffers_always_fit_its_own_peak():
    g = synthetic_graph(2000, seed=4)
    _, r = schedule_graph(g, "dan-dlr", CAPS, MODEL)
    room = make_room(g, r.nodes, r.preds, r.order, r.peak)
    started = set()
    top = 0
    for v in r.order:
        if r.nodes[v].op == "ALLOC":
            continue
        wanted = [a for a in r.preds[v] if room.size[a] and a not in started]
        assert _fits(room, wanted)
        for a in sorted(wanted, key=lambda a: room.event[a]):
            room.start(a)
            started.add(a)
        top = max(top, room.live)
        f = room.alloc_of[v]
        if f >= 0 and room.size[f]:
            room.end(v)
    assert room.live == 0 and 0 < top <= r.peak
