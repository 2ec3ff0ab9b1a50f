from npucc.backend.schedule.dan.headroom import sunk_peak
from npucc.backend.schedule.dan.repeak import lower_peak
from npucc.backend.schedule.scan import topo_order
from npucc.tools.dan_synthetic import synthetic_graph
from tests.schedule.tgraphs import build, chain


def _pool_band():
    """A band r1 (L1 1000) pooled in two pieces into r2 (L1 400), each through a window (UB 300)
    and an output tile (UB 200); in id order piece 1 writes r2 before piece 2 loads its window,
    so r1 + r2 + both UB tiles are live at piece 2 (1900 B)."""
    spec = [("ALLOC", 0, 1000, "L1"), ("COPY_IN", "MTE2", 10, [0]), ("ALLOC", 1, 400, "L1")]
    edges = [(0, 1)]
    last = None
    for k in range(2):
        w, o = 2 + 2 * k, 3 + 2 * k
        i = len(spec)
        spec += [
            ("ALLOC", w, 300, "UB"),
            ("MOVE", "MTE1", 5, [w, 0]),
            ("ALLOC", o, 200, "UB"),
            ("VEC", "VECTOR", 5, [o, w]),
            ("FREE", w),
            ("MOVE", "VECTOR", 5, [1, o]),
            ("FREE", o),
        ]
        edges += [(i, i + 1), (1, i + 1), (i + 1, i + 3), (i + 2, i + 3), (i + 3, i + 4)]
        edges += [(i + 3, i + 5), (2, i + 5), (i + 5, i + 6)]
        if last is not None:
            edges.append((last, i + 5))  # the band's writes in order
        last = i + 5
    n = len(spec)
    spec += [("FREE", 0), ("COPY_OUT", "MTE3", 10, [1]), ("FREE", 1)]
    edges += [(8, n), (15, n), (last, n + 1), (n + 1, n + 2)]
    return build(spec, edges)


def _topological(g, order):
    at = {v: i for i, v in enumerate(order)}
    return sorted(order) == list(range(len(g.nodes))) and all(
        at[u] < at[v] for v in order for u in g.preds[v]
    )


def test_the_next_piece_runs_before_the_band_is_started():
    g = _pool_band()
    order = topo_order(g)
    assert sunk_peak(g, g.nodes, g.preds, order) == 1900
    low = lower_peak(g, g.nodes, g.preds, order)
    assert _topological(g, low)
    assert sunk_peak(g, g.nodes, g.preds, low) < 1900


def test_an_order_no_move_lowers_comes_back_unchanged():
    g = chain()
    order = topo_order(g)
    assert lower_peak(g, g.nodes, g.preds, order) == order


def test_synthetic_orders_are_lowered_and_stay_topological():
    for seed in range(3):
        g = synthetic_graph(1500, seed=seed)
        order = topo_order(g)
        low = lower_peak(g, g.nodes, g.preds, order, rounds=4)
        assert _topological(g, low)
        assert sunk_peak(g, g.nodes, g.preds, low) < sunk_peak(g, g.nodes, g.preds, order)
