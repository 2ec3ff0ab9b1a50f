from npucc.backend.schedule.dan.headroom import Headroom
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
    return g, Headroom(g, g.nodes, g.preds, list(range(len(g.nodes))), cap)


def test_a_buffer_starts_ahead_of_the_plan_only_within_the_slack():
    _, room = _room(100)  # the plan's own peak: b cannot start before a ends
    assert room.fits([0]) and not room.fits([4])
    room.start(0)
    assert not room.fits([4])
    room.end(3)
    assert room.fits([4])
    _, room = _room(200)  # room for both
    assert room.fits([4])
    room.start(4)
    assert room.fits([0]) and room.live == 100
    room.start(0)
    room.end(3)
    room.end(7)
    assert room.live == 0


def test_the_plans_next_buffers_always_fit_its_own_peak():
    g = synthetic_graph(2000, seed=4)
    _, r = schedule_graph(g, "dan-dlr", CAPS, MODEL)
    room = Headroom(g, r.nodes, r.preds, r.order, r.peak)
    started = set()
    top = 0
    for v in r.order:
        if r.nodes[v].op == "ALLOC":
            continue
        wanted = [a for a in r.preds[v] if room.size[a] and a not in started]
        assert room.fits(wanted)
        for a in sorted(wanted, key=lambda a: room.event[a]):
            room.start(a)
            started.add(a)
        top = max(top, room.live)
        if v in room.alloc_of and room.size[room.alloc_of[v]]:
            room.end(v)
    assert room.live == 0 and 0 < top <= r.peak
