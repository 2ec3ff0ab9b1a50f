"""An unsplit plan's placements layer by layer, memoised (npucc.backend.estimate.unsplit_places)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from npucc.backend.estimate.unsplit_places import UnsplitPlaces, placed_from
from npucc.backend.hypercut.onchip_plan import Placed
from npucc.ir.onchip import OnChip
from tests.estimate.searched import searched

MODELS = Path(__file__).parents[2] / "models"


@pytest.mark.parametrize("name", ["residual_block", "transformer_encoder"])
def test_placements_layer_by_layer_are_plan_onchips_from_any_layer(name: str) -> None:
    model, plans, _ = searched(name)
    graph, target = model.graph, model.target
    places = UnsplitPlaces(graph, target, model._consumers, model._whole)
    rng = random.Random(7)
    done: list[tuple[list, list[int], list[Placed], dict[str, OnChip], list[int]]] = []
    checked = 0
    for plan in plans:
        if any(step.nsub > 1 for step in plan):
            continue
        rect_of, key_of = model._rects(plan)
        candidates = sorted(model.onchip(plan))
        offchip = frozenset(rng.sample(candidates, rng.randint(0, len(candidates) // 2)))
        keys = [
            None if i not in key_of else (key_of[i], *(t in offchip for t in layer.outputs))
            for i, layer in enumerate(graph.layers)
        ]
        expected = model.onchip(plan, offchip)
        # from the start, or from a layer of a plan placed before that has the same keys up to it
        states, placed, kept, ids = [0], [], {}, []
        for was, their_states, their_placed, their_kept, their_ids in done[-5:]:
            pairs = enumerate(zip(was, keys, strict=True))
            same = next((i for i, (a, b) in pairs if a != b), len(keys))
            depth = rng.randint(0, same)
            tensors = sum(1 for t in their_kept if model._producer[t] < depth)
            states = their_states[: depth + 1]
            placed = their_placed[:tensors]
            kept = dict(list(their_kept.items())[:tensors])
            ids = their_ids[:tensors]
            break
        placed_from(places, keys, rect_of, offchip, states, placed, kept, ids)
        assert list(kept.items()) == list(expected.items())
        assert ids == [places.where_id(where) for where in expected.values()]
        assert len(placed) == len(kept) and len(states) == len(keys) + 1
        done.append((keys, states, placed, kept, ids))
        checked += 1
    assert checked > 20 and len(places._steps) < sum(len(k) for k, *_ in done)
