"""The overlap trials priced in forked workers: the program one process lowers, same bytes."""

from __future__ import annotations

import os

import onnx
import pytest
from onnx import helper

import npucc.backend.lower as lower
import npucc.backend.lower.overlap as overlap
from npucc.compiler import compile_until
from npucc.parallel import fork_map, forks
from npucc.passes import CompileContext
from tests.lower.test_cascade import TARGET, _model

FORKS = pytest.mark.skipif(not forks(2, 2), reason="no forked workers on this platform")


def _conv_conv_lrn(h: int = 61, w: int = 59) -> onnx.ModelProto:
    """conv 3x3 (16 -> 32, relu), conv 3x3 (32 -> 64), LRN: a link whose conv is not the first
    layer (its trials start from the mark before it)."""
    nodes = [
        helper.make_node("Conv", ["x", "f"], ["a0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a0"], ["a1"]),
        helper.make_node("Conv", ["a1", "e"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("LRN", ["a"], ["y"], size=5, alpha=1e-3, beta=0.75, bias=1.0),
    ]
    return _model(nodes, {"f": (32, 16, 3, 3), "e": (64, 32, 3, 3)}, [1, 16, h, w], [1, 64, h, w])


@FORKS
def test_fork_map_computes_item_here_in_this_process_and_keeps_its_side_effects():
    seen: list[int] = []

    def fn(item: int) -> tuple[int, int]:
        seen.append(item)
        return item * item, os.getpid()

    out = fork_map(fn, [1, 2, 3], 2, here=2)
    assert [square for square, _ in out] == [1, 4, 9]
    assert out[2][1] == os.getpid() and {pid for _, pid in out[:2]} != {os.getpid()}
    assert seen == [3]  # the workers' calls left nothing here


@FORKS
def test_a_links_trials_priced_by_workers_lower_what_one_process_lowers(monkeypatch):
    planned = compile_until(_conv_conv_lrn(), "hypercut", TARGET)
    found = lower.trials
    picks: list[tuple[list[int], list[int]]] = []
    pick = overlap._pick

    def watched(spans, best):  # noqa: ANN001, ANN202
        picks.append((list(spans), pick(spans, best)))
        return picks[-1][1]

    monkeypatch.setattr(overlap, "_pick", watched)
    for order in (1, -1):  # NOTE: the last height is this process's, the others the workers'

        def tried(*args, order=order):  # noqa: ANN002, ANN202
            return [(first, heights[::order]) for first, heights in found(*args)]

        monkeypatch.setattr(lower, "trials", tried)
        one = lower.LowerTiles(jobs=1).run(planned, CompileContext(TARGET)).to_text()
        two = lower.LowerTiles(jobs=2).run(planned, CompileContext(TARGET)).to_text()
        assert one == two
    assert len(picks) == 2 and all(rows for _, rows in picks)  # both orders: a trial picked
    # NOTE: one pick at least was a worker's, lowered again here
    assert any(rows[0] != heights[-1] for heights, rows in picks)
