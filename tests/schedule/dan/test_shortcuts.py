"""DAN's shortcuts (scans that stop or resume, lazy replays, early-stopping re-timing) give
exactly what the full computations give."""

import random
from pathlib import Path

import pytest

import npucc
from npucc.backend.schedule.dan import cpe, moves, moves_kernel
from npucc.backend.schedule.dan.dlr import DlrVictim, dlr
from npucc.backend.schedule.dan.pipeline import AHEAD, ORDERS, dan, stage1
from npucc.backend.schedule.registry import schedule_graph
from npucc.backend.schedule.scan import LinearScan
from npucc.ir.isa_cost import TargetSpillModel
from npucc.ir.replay import replay
from npucc.ir.schedule import capacities
from npucc.target.cost import TraceSpillModel
from npucc.target.timing import in_order
from npucc.tools import dan_command as command
from npucc.tools.dan_hard import HARD_WORKLOADS

CAPS = dict(command.DEFAULT_CAPACITY)
MODEL = TraceSpillModel()


def _timing(nodes, preds, order):
    """Finish times of `order` under rule 5 (the reference CPE's shortcuts are held to)."""
    return in_order(order, [v.cycles for v in nodes], [v.pipe for v in nodes], preds)[1]


MODELS = Path(__file__).resolve().parents[3] / "models"


def _rank(r):
    return (r.extra_ddr, r.spills, r.makespan, r.peak)


def _every_plan(graph):
    """Stage 2 as a sequence of complete scans, each plan replayed (no limits, no resumes)."""
    best = None  # (rank, ORDERS index, schedule, order)
    placed = []
    for i in sorted(range(len(ORDERS)), key=lambda i: ORDERS[i] != "lowering"):
        order = stage1(graph, ORDERS[i])
        s = dlr(graph, order, CAPS, MODEL)
        r = replay(graph, s, CAPS, MODEL)
        placed.append((_rank(r)[:2], order))
        if best is None or (_rank(r), i) < best[:2]:
            best = (_rank(r), i, s, order)
    assert best is not None
    if best[2].spills:
        lowering = placed[0][1]
        variants = [(best[3], "cold", True, 0)]
        variants += [(o, "cold", False, a) for k, o in placed if k == best[0][:2] for a in AHEAD]
        for o in (best[3], lowering) if best[3] is not lowering else (best[3],):
            variants += [(o, p, False, 0) for p in ("best", "first")]
        for order, placement, prefetch, ahead in variants:
            s = dlr(graph, order, CAPS, MODEL, 1, placement, prefetch, ahead=ahead)
            r = replay(graph, s, CAPS, MODEL)
            if _rank(r) < best[0]:
                best = (_rank(r), best[1], s, order)
    return best[2]


@pytest.mark.parametrize("name", ["HardMatmul_Case0", "HardFlashAttention_Case0", "HardConv_Case0"])
def test_stage2_picks_the_plan_every_complete_scan_and_replay_picks(name):
    graph = HARD_WORKLOADS[name]()
    want = _every_plan(graph)
    got = dan(graph, CAPS, MODEL, stage="dlr")
    assert want.spills  # the variants ran
    assert (got.order, got.offsets, got.spills) == (want.order, want.offsets, want.spills)


@pytest.mark.parametrize("prefetch,ahead", [(True, 0), (False, 8), (False, 16)])
def test_a_scan_resumed_at_the_first_spill_equals_a_fresh_one(prefetch, ahead):
    g = HARD_WORKLOADS["HardConv_Case0"]()
    order = stage1(g, "memory")
    victim = DlrVictim(g, MODEL)
    base = LinearScan(g, order, CAPS, 1, "cold", traffic=victim.traffic)
    base.run(victim)
    assert base.first is not None and 0 < len(base.first.result) < len(order)
    fresh = LinearScan(g, order, CAPS, 1, "cold", prefetch, ahead=ahead).run(victim)
    resumed = LinearScan(g, order, CAPS, 1, "cold", prefetch, ahead=ahead).run(victim, base.first)
    assert (resumed.order, resumed.offsets, resumed.spills) == (
        fresh.order,
        fresh.offsets,
        fresh.spills,
    )


def _retimer(r, preds, order, finish, kernel=None):
    """A `moves_kernel.Retimer` (of `kernel`, the module or its plain source) started on
    `order` timed `finish`."""
    a = cpe.Tables(r, preds, cpe._succs(r)).arrays
    retimer = (kernel or moves_kernel).Retimer(
        a.pred_off, a.pred_idx, a.succ_off, a.succ_idx, a.queue, a.cycles, len(a.work) - 1
    )
    retimer.start(order, finish)
    return retimer


def _retime(retimer, q, p, beat=1 << 62, last=-1):
    """`Retimer.retime`'s (changes, latest finish), None where it returns -1."""
    top = retimer.retime(q, p, beat, last)
    return None if top < 0 else (retimer.changes(), top)


def _applied(finish, changes):
    """`finish` with `Retimer.retime`'s changed finishes written in."""
    out = list(finish)
    for v, t in changes.items():
        out[v] = t
    return out


def test_retiming_a_move_matches_timing_the_moved_order():
    g = HARD_WORKLOADS["HardConv_Case0"]()  # spills: spill and reuse edges reach far
    s = dlr(g, stage1(g, "memory"), CAPS, MODEL)
    r = replay(g, s, CAPS, MODEL)
    preds = r.preds
    order = list(s.order)
    finish = _timing(r.nodes, preds, order)
    assert finish == r.finish  # what cpe takes as the plan's timing
    retimer = _retimer(r, preds, order, finish)
    rng = random.Random(0)
    tried = 0
    for _ in range(1000):
        p = rng.randrange(1, len(order))
        q = max(0, p - rng.randrange(1, moves.WINDOW + 1))
        if any(order[x] in preds[order[p]] for x in range(q, p)):
            continue  # not a legal move
        trial = order[:q] + [order[p]] + order[q:p] + order[p + 1 :]
        changes, top = _retime(retimer, q, p)
        assert _retime(retimer, q, p) == (changes, top)  # the old finishes were put back
        want = _timing(r.nodes, preds, trial)
        assert _applied(finish, changes) == want
        assert all(finish[v] != t for v, t in changes.items())
        assert top <= max(want)
        tried += 1
    assert tried > 150


def test_retiming_stops_once_the_makespan_cannot_drop():
    program = npucc.compile_until(MODELS / "residual_block.onnx", "lower-tiles")
    target = program.target
    g = program.cores[0].graph
    caps, model = capacities(target), TargetSpillModel(target)
    s, r = schedule_graph(g, "dan-dlr", caps, model, target.memory.alignment)
    preds = r.preds
    order = list(s.order)
    finish = _timing(r.nodes, preds, order)
    pos = {v: i for i, v in enumerate(order)}
    retimer = _retimer(r, preds, order, finish)
    best = max(finish)
    last = max(pos[x] for x, f in enumerate(finish) if f == best)
    stopped = kept = 0
    for p in range(1, len(order)):  # every legal move within the window
        for q in range(p - 1, max(p - moves.WINDOW, 0) - 1, -1):
            if order[q] in preds[order[p]]:
                break
            trial = order[:q] + [order[p]] + order[q:p] + order[p + 1 :]
            want = _timing(r.nodes, preds, trial)
            got = _retime(retimer, q, p, best, last)
            if got is None:  # the node at `last` cannot finish earlier, or the makespan rose
                assert want[order[last]] >= best or max(want) >= best
                stopped += 1
            else:
                assert _applied(finish, got[0]) == want
            got = _retime(retimer, q, p, best)
            if got is None:  # the makespan rose
                assert max(want) >= best
            else:
                assert _applied(finish, got[0]) == want
                kept += 1
    assert stopped > 10 and kept > 100


def test_a_list_order_stops_once_it_cannot_beat():
    g = HARD_WORKLOADS["HardConv_Case0"]()
    s = dlr(g, stage1(g, "memory"), CAPS, MODEL)
    r = replay(g, s, CAPS, MODEL)
    preds, succs, group = r.preds, cpe._succs(r), cpe._groups(r)
    h = cpe.downstream(r, succs)
    for cap, critical in ((None, h), (r.peak, h), (r.peak, None)):
        found = cpe.list_order(r, preds, succs, group, cap, critical)
        assert found is not None
        order, finish = found
        assert finish == _timing(r.nodes, preds, order)
        top = max(finish)
        assert cpe.list_order(r, preds, succs, group, cap, critical, top + 1) == found
        assert cpe.list_order(r, preds, succs, group, cap, critical, top) is None
