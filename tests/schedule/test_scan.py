import pytest

from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.scan import LinearScan, buffer_tiers, lru_victim, topo_order
from npucc.ir.replay import replay, validate
from npucc.ir.tiled import TileGraph
from npucc.target.cost import TraceSpillModel

MODEL = TraceSpillModel()
CAPS = {"L1": 512}


def _released_out_of_order() -> tuple[TileGraph, int, int, int]:
    """x and y fill L1; x is freed first in the order but last in time (a long cube node reads
    it), then z needs the room of one of them: (graph, x, y, z)."""
    g = TileGraph("released-out-of-order")
    x, y, z = (g.add_buffer(256, "L1", name).id for name in "xyz")
    ax, ay = g.add_node("ALLOC", None, 0, (x,)).id, g.add_node("ALLOC", None, 0, (y,)).id
    ux = g.add_node("MMAD", "CUBE", 1000, (x,)).id
    uy = g.add_node("VEC_ADD", "VECTOR", 10, (y,)).id
    fx, fy = g.add_node("FREE", None, 0, (x,)).id, g.add_node("FREE", None, 0, (y,)).id
    az = g.add_node("ALLOC", None, 0, (z,)).id
    uz = g.add_node("COPY_IN", "MTE2", 100, (z,)).id
    fz = g.add_node("FREE", None, 0, (z,)).id
    for src, dst in ((ax, ux), (ux, fx), (ay, uy), (uy, fy), (az, uz), (uz, fz)):
        g.add_edge(src, dst)
    return g, x, y, z


def test_timed_placement_takes_the_range_released_first_in_time():
    g, x, y, z = _released_out_of_order()
    order = topo_order(g)
    cold = LinearScan(g, order, CAPS, placement="cold").run(lru_victim)
    assert cold.offsets[z] == cold.offsets[x]  # released first in the order
    first = replay(g, cold, CAPS, MODEL)
    timed = LinearScan(g, order, CAPS, placement="timed", times=first.finish).run(lru_victim)
    validate(g, timed, CAPS)
    assert timed.offsets[z] == timed.offsets[y]  # released first in time
    # z's load no longer waits for the cube node behind x
    assert replay(g, timed, CAPS, MODEL).makespan < first.makespan == 1100
    _, r = schedule_graph(g, "dan", CAPS, MODEL)
    assert r.makespan == replay(g, timed, CAPS, MODEL).makespan


@pytest.mark.parametrize(
    ("placement", "times", "prefetch"),
    [("timed", None, False), ("cold", [0] * 9, False), ("timed", [0] * 9, True)],
)
def test_times_go_with_the_timed_placement_only(placement, times, prefetch):
    g, *_ = _released_out_of_order()
    with pytest.raises(ValueError):
        LinearScan(g, topo_order(g), CAPS, placement=placement, prefetch=prefetch, times=times)


@pytest.mark.parametrize("placement", ["cold", "best"])
@pytest.mark.parametrize(("prefetch", "ahead"), [(True, 0), (False, 8), (False, 16), (False, 0)])
def test_a_scan_following_a_trail_makes_the_plan_it_makes_alone(
    monkeypatch, placement, prefetch, ahead
):
    from npucc.backend.schedule.dan.dlr import DlrVictim
    from npucc.backend.schedule.dan.mpas import mpas
    from npucc.backend.schedule.scan import Trail
    from npucc.tools.dan_synthetic import synthetic_graph

    g = synthetic_graph(6000, seed=2)
    caps = {"L1": 1536, "UB": 768, "L0A": 256, "L0B": 256, "L0C": 512}
    order = mpas(g, single_l0=True, mode="full", strict=False)
    victim = DlrVictim(g, MODEL)
    trail = Trail()
    plain = LinearScan(g, order, caps, 1, placement).run(victim, None, trail)
    assert plain.spills and len(trail.marks) > 10  # a plan with spills, a trail recorded
    alone = LinearScan(g, order, caps, 1, placement, prefetch, ahead=ahead).run(victim)
    copied = []
    follow = LinearScan._follow

    def counting(scan, t, k):
        to = follow(scan, t, k)
        copied.append(to - k)
        return to

    monkeypatch.setattr(LinearScan, "_follow", counting)
    followed = LinearScan(g, order, caps, 1, placement, prefetch, ahead=ahead).run(
        victim, None, trail
    )
    assert sum(copied) > len(order) // 4  # much of the order taken from the trail
    assert (followed.order, followed.offsets, followed.spills) == (
        alone.order,
        alone.offsets,
        alone.spills,
    )


def test_next_use_answers_as_a_list_of_each_buffers_uses_would():
    import random
    from bisect import bisect_right

    from npucc.backend.schedule.scan import INF
    from npucc.tools.dan_synthetic import synthetic_graph

    g = synthetic_graph(3000, seed=4)
    order = topo_order(g)
    full: list[list[int]] = [[] for _ in g.buffers]
    for k, v in enumerate(order):
        if g.nodes[v].op != "ALLOC":
            for b in g.nodes[v].bufs:
                full[b].append(k)
    scan = LinearScan(g, order, {t: 1 << 20 for t in buffer_tiers(g)})
    rng = random.Random(0)
    for k in [*(rng.randrange(len(order)) for _ in range(300)), -1, len(order)]:
        for b in (rng.randrange(len(g.buffers)), len(g.buffers) - 1, 0):
            i = bisect_right(full[b], k)
            assert scan.next_use(b, k) == (full[b][i] if i < len(full[b]) else INF)


def test_buffer_tiers_name_each_tier_once_in_the_order_of_its_first_buffer():
    g = TileGraph("tiers")
    for tier in ("UB", "L1", "UB", "L0A", "L1"):
        g.add_buffer(64, tier)
    assert buffer_tiers(g) == ["UB", "L1", "L0A"]
    caps = {"UB": 128, "L1": 128, "L0A": 64}
    scan = LinearScan(g, [], caps, tiers=buffer_tiers(g))
    assert list(scan.free) == list(LinearScan(g, [], caps).free) == ["UB", "L1", "L0A"]
