"""CPE's local re-sequencing kernel: its source run as plain Python (no build) gives the built
module's re-timings, critical chains and window peaks (repeak)."""

import random
from itertools import pairwise

from npucc.backend.schedule.dan import cpe, moves, moves_kernel, repeak
from npucc.backend.schedule.dan.repeak import lower_peak
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.scan import topo_order
from npucc.target.cost import TraceSpillModel
from npucc.tools import dan_command as command
from npucc.tools.dan_hard import HARD_WORKLOADS
from npucc.tools.dan_synthetic import synthetic_graph
from tests.kernels import plain_source

CAPS = dict(command.DEFAULT_CAPACITY)


def _retimings(kernel, r):
    """Every trial of 400 random moves of `r`'s order (bounded and not) by `kernel`'s
    Retimer: its latest finish and changes."""
    a = cpe.Tables(r, r.preds, cpe._succs(r)).arrays
    retimer = kernel.Retimer(
        a.pred_off, a.pred_idx, a.succ_off, a.succ_idx, a.queue, a.cycles, len(a.work) - 1
    )
    order, finish = list(r.order), list(r.finish)
    retimer.start(order, finish)
    best = max(finish)
    last = max(i for i, v in enumerate(order) if finish[v] == best)
    rng = random.Random(1)
    out = [retimer.chain()]
    for _ in range(400):
        p = rng.randrange(1, len(order))
        q = max(0, p - rng.randrange(1, moves.WINDOW + 1))
        for beat, at in ((1 << 62, -1), (best, last)):
            top = retimer.retime(q, p, beat, at)
            out.append((top, retimer.changes() if top >= 0 else None))
    return out


def test_the_source_as_plain_python_gives_the_same_retimings():
    # the module is valid Python: without its build (the extension module) it runs as it is
    plain = plain_source(moves_kernel)
    g = HARD_WORKLOADS["HardConv_Case0"]()  # spills: spill and reuse edges reach far
    r = schedule_graph(g, "dan-dlr", CAPS, TraceSpillModel())[1]
    built = _retimings(moves_kernel, r)
    assert _retimings(plain, r) == built
    tops = [top for top, _ in built[1:]]
    assert sum(top >= 0 for top in tops) > 100 and sum(top < 0 for top in tops) > 10


def test_the_critical_chain_runs_from_time_0_to_the_makespan_through_binding_links():
    g = HARD_WORKLOADS["HardConv_Case0"]()
    r = schedule_graph(g, "dan-dlr", CAPS, TraceSpillModel())[1]
    a = cpe.Tables(r, r.preds, cpe._succs(r)).arrays
    retimer = moves_kernel.Retimer(
        a.pred_off, a.pred_idx, a.succ_off, a.succ_idx, a.queue, a.cycles, len(a.work) - 1
    )
    retimer.start(list(r.order), list(r.finish))
    chain = retimer.chain()
    assert len(chain) > 2 and r.start[chain[0]] == 0 and r.finish[chain[-1]] == r.makespan
    for u, v in pairwise(chain):  # v starts as u finishes: an edge or the same pipe
        assert r.finish[u] == r.start[v]
        assert u in r.preds[v] or (r.nodes[u].pipe == r.nodes[v].pipe is not None)


def test_the_installed_kernel_is_the_built_one():
    # NOTE: an install builds it (setup.py); the source alone runs the same moves, slower
    assert not moves_kernel.__file__.endswith(".py"), f"{moves_kernel.__file__}: not built"


def test_window_tops_of_the_source_as_plain_python_are_the_built_ones(monkeypatch):
    g = synthetic_graph(3000, seed=2, group=3)
    order = topo_order(g)
    built = lower_peak(g, g.nodes, g.preds, order, rounds=3)
    assert built != order  # windows re-sequenced
    monkeypatch.setattr(repeak, "moves_kernel", plain_source(moves_kernel))
    assert lower_peak(g, g.nodes, g.preds, order, rounds=3) == built
