"""Unsplit plans priced from a shared prefix (npucc.backend.estimate.prefix)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from npucc.backend.estimate.exec_cost import ExecCostModel, _cost_of
from npucc.backend.estimate.list_schedule import Timeline, channel_bound, schedule
from npucc.backend.estimate.prefix import Prefixes, Trace
from npucc.backend.lower.subbatch import loop_parts
from npucc.ir.plan import Step
from tests.estimate.searched import searched

MODELS = Path(__file__).parents[2] / "models"


def _trace(edp: float) -> Trace:
    return Trace([], {}, [], [0], Timeline.start(1), edp)


@pytest.mark.parametrize("name", ["residual_block", "transformer_encoder"])
def test_plans_priced_from_a_shared_prefix_cost_what_they_cost_alone(name: str) -> None:
    shared, plans, found = searched(name)
    graph, target = shared.graph, shared.target
    traces = {id(t): t for trie in shared._prefixes._tries for t in trie.trace if t}.values()
    firsts = {id(t.runs[0]) for t in traces}  # a plan going on from a prefix shares its runs
    assert len(plans) > 20 and len(firsts) < len(traces) // 2
    alone = ExecCostModel(graph, target, shared.memo)
    for plan in plans:
        whole = min(alone.evaluate(plan).edp, alone.evaluate(plan, alone.every_tensor).edp)
        assert shared.best_edp(plan) == whole  # to the bit
    assert shared.refine_offchip(found) == _greedy_offchip(alone, found)


def test_a_trace_carries_its_plan_through_ddr_energy_and_channel_bound() -> None:
    model, plans, _ = searched("residual_block")
    graph, target = model.graph, model.target
    alone = ExecCostModel(graph, target, model.memo)
    for plan in plans:
        parts = loop_parts(graph, plan, alone.splits)
        trace = model._unsplit_trace(plan, parts)
        costs = [_cost_of(item) for item in alone._priced(alone._rects(plan)[0], parts, {})]
        energy, held = trace.ddr[-1]
        assert held == channel_bound(target, costs) > 0
        assert energy == pytest.approx(sum(c.energy for c in costs), rel=1e-12)
        assert trace.ids == [model._places.where_id(where) for where in trace.kept.values()]


def test_a_trace_keeps_its_plans_whole_schedule() -> None:
    model, _, _ = searched("residual_block")
    traces = {id(t): t for trie in model._prefixes._tries for t in trie.trace if t}.values()
    for trace in traces:
        at = Timeline.start(model.target.cores)
        latency = schedule(model.target, trace.runs, at)
        assert at == trace.timeline and trace.edp == trace.energy[-1] * float(latency)


def test_the_trie_finds_the_longest_prefix_across_two_generations() -> None:
    prefixes = Prefixes()
    prefixes.GENERATION = 5  # nodes: the root and four keys
    first, second = _trace(1.0), _trace(2.0)
    trace, depth, newer = prefixes.find("abcd")
    assert (trace, depth) == (None, 0)
    prefixes.add("abcd", newer, first)
    assert prefixes.find("abxy")[:2] == (first, 2)
    assert prefixes.find("abcd")[:2] == (first, 4)
    trace, depth, newer = prefixes.find("abcz")
    prefixes.add("abcz", newer, second)  # the newer generation is full: it becomes the older
    assert prefixes.find("abcd")[:2] == (first, 4)  # found in the older
    assert prefixes.find("abcz")[:2] == (second, 4)  # its whole path in the newer
    prefixes.add("qr", prefixes.find("qr")[2], first)
    prefixes.add("qrs", prefixes.find("qrs")[2], second)  # the first generation dropped
    assert prefixes.find("abcd")[:2] == (second, 3)


def _greedy_offchip(model: ExecCostModel, plan: tuple[Step, ...]) -> frozenset[str]:
    """`refine_offchip`'s greedy walk, each trial priced by `evaluate` alone."""
    candidates = list(model.onchip(plan))
    offchip: frozenset[str] = frozenset()
    best = model.evaluate(plan).edp
    ddr = model.evaluate(plan, frozenset(candidates)).edp
    start_off = ddr < best
    if start_off:
        offchip, best = frozenset(candidates), ddr
    for t in candidates:
        trial = offchip - {t} if start_off else offchip | {t}
        value = model.evaluate(plan, trial).edp
        if value < best:
            offchip, best = trial, value
    return offchip


def test_the_trie_finds_the_longest_prefix_and_the_first_plan_through_it() -> None:
    rng = random.Random(3)
    prefixes = Prefixes()
    added: list[tuple[list[str], Trace]] = []
    nodes = 1
    for i in range(400):
        keys = [rng.choice("ab") if rng.random() < 0.9 else rng.choice("cd") for _ in range(8)]
        trace, depth, newer = prefixes.find(keys)
        shared = [
            next((j for j, (x, y) in enumerate(zip(keys, k, strict=True)) if x != y), 8)
            for k, _ in added
        ]
        longest = max(shared, default=0)
        first = next((t for (_, t), n in zip(added, shared, strict=True) if n == longest), None)
        assert (trace, depth) == (first if longest else None, longest)
        if depth < len(keys):
            made = _trace(float(i))
            prefixes.add(keys, newer, made)
            added.append((keys, made))
            nodes += len(keys) - depth
    assert len(added) > 100 and prefixes._tries[0].nodes == nodes
