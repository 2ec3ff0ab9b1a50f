"""MPAS's compiled kernel: its heaps, its sort, the key bits, the stuck error, its tails (eq. 20),
and its source run as plain Python (no build)."""

import numpy as np
import pytest

import npucc
from npucc.backend.schedule.dan import mpas as mpas_module
from npucc.backend.schedule.dan import mpas_kernel, pipeline
from npucc.backend.schedule.dan.mpas import mpas, prepare
from npucc.backend.schedule.dan.mpas_kernel import _sort
from npucc.backend.schedule.scan import topo_order
from npucc.backend.schedule.scan_kernel import csr
from npucc.errors import NpuccError
from npucc.tools.dan_hard import HARD_WORKLOADS
from npucc.tools.dan_synthetic import synthetic_graph
from tests.kernels import plain_source
from tests.schedule.tgraphs import build

MODES = [(m, s) for m in ("full", "memory", "critical") for s in (True, False)]


def _runs(g):
    """Every mode's order (or error message), strict or not."""
    prep = prepare(g)
    out = []
    for mode, strict in MODES:
        try:
            out.append(mpas(g, True, mode, strict, prep))
        except NpuccError as exc:
            out.append(str(exc))
    return out


@pytest.mark.parametrize(
    "make",
    [lambda: synthetic_graph(3000, seed=1, group=3), HARD_WORKLOADS["HardConv_Case0"]],
)
def test_full_heaps_drop_stale_keys_and_keep_the_order(make, monkeypatch):
    g = make()
    roomy = _runs(g)
    monkeypatch.setattr(mpas_module, "HEAP_ROOM", 1)  # full as soon as a heap can be
    assert _runs(g) == roomy
    assert any(isinstance(o, list) for o in roomy)


def test_the_source_as_plain_python_gives_the_same_orders(monkeypatch):
    # the module is valid Python: without its build (the extension module) it runs as it is
    plain = plain_source(mpas_kernel)
    g = synthetic_graph(1500, seed=1, group=3)
    built = _runs(g)
    monkeypatch.setattr(mpas_module, "mpas_kernel", plain)
    assert _runs(g) == built


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone runs ~4.5x slower than main's
    # Python loop did, with the same orders, so a missing build would show only as time
    assert not mpas_kernel.__file__.endswith(".py"), f"{mpas_kernel.__file__}: not built"


def test_sort_sorts_in_place():
    rng = np.random.default_rng(0)
    for m in (0, 1, 2, 7, 100, 1001):
        a = rng.integers(-50, 50, m).astype(np.int64)
        want = np.sort(a)
        _sort(a)
        assert a.tolist() == want.tolist()


def test_keys_that_would_pass_63_bits_are_refused():
    g = build(
        [("ALLOC", 0, 1 << 61, "L1"), ("LOAD", "MTE2", 10, [0]), ("FREE", 0)],
        [(0, 1), (1, 2)],
    )
    with pytest.raises(NpuccError, match="63 bits"):
        prepare(g)
    ok = build(
        [("ALLOC", 0, 1 << 40, "L1"), ("LOAD", "MTE2", 10, [0]), ("FREE", 0)],
        [(0, 1), (1, 2)],
    )
    assert mpas(ok, True) == [0, 1, 2]


def test_a_node_that_waits_forever_is_named(monkeypatch):
    # decoder_block's core: the strict paper-critical run finds L0 tiers waiting for each other
    graphs = []
    prepare_ = pipeline.prepare
    monkeypatch.setattr(pipeline, "prepare", lambda g, **kw: graphs.append(g) or prepare_(g, **kw))
    npucc.compile("models/decoder_block.onnx")
    (g,) = graphs
    with pytest.raises(NpuccError, match=r"no schedule: node \d+ \(ALLOC of L0C buffer b\d+ '"):
        mpas(g, True, "critical", strict=True)
    order = mpas(g, True, "critical", strict=False)
    where = {v: i for i, v in enumerate(order)}
    assert sorted(order) == list(range(len(g.nodes)))
    assert all(where[u] < where[v] for v in range(len(g.nodes)) for u in g.preds[v])


@pytest.mark.parametrize("kernel", ["built", "plain"])
def test_tails_are_the_longest_pipe_cycle_paths(kernel, monkeypatch):
    if kernel == "plain":
        monkeypatch.setattr(mpas_module, "mpas_kernel", plain_source(mpas_kernel))
    g = HARD_WORKLOADS["HardConv_Case0"]()
    order = topo_order(g)
    want = [0] * len(g.nodes)  # eq. 20 by definition, one node at a time
    for v in reversed(order):
        own = g.nodes[v].cycles if g.nodes[v].pipe is not None else 0
        want[v] = own + max((want[w] for w in g.succs[v]), default=0)
    got = mpas_module.tails(order, csr(g.succs), mpas_module.pipe_cycles(g.nodes))
    assert got.tolist() == want and max(want) > 0
