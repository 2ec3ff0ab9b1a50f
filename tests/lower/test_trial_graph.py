"""A trial lowering's graph: the same flow and busiest pipe as the whole TileGraph's."""

from __future__ import annotations

import numpy as np
import pytest

from npucc.backend.lower.builder import MeshBuilder, TileBuilder
from npucc.backend.lower.context import LowerContext, flow
from npucc.backend.lower.depthwise import _lower_split
from npucc.backend.lower.dwfuse import lower_fused
from npucc.backend.lower.trial_graph import TrialBuilder, TrialGraph
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import load_target
from npucc.target.timing import in_order


def _depthwise() -> tuple[Graph, Layer]:
    graph = Graph("t")
    graph.add_tensor(Tensor("x", (1, 64, 28, 28)))
    graph.inputs.append("x")
    graph.add_tensor(Tensor("w", (64, 1, 3, 3), data=np.ones((64, 1, 3, 3), np.float32)))
    graph.add_tensor(Tensor("b", (64,), data=np.ones(64, np.float32)))
    graph.add_tensor(Tensor("y", (1, 64, 28, 28)))
    layer = Layer("dw", "conv2d", ["x", "w", "b"], ["y"], {"group": 64, "pads": (1, 1, 1, 1)})
    graph.add_layer(layer)
    return graph, layer


def _lowered(tiles: TileGraph | TrialGraph, channels: int, trial: bool = False) -> None:
    graph, layer = _depthwise()
    target = load_target("davinci-core")
    builder = TrialBuilder(tiles, target) if isinstance(tiles, TrialGraph) and trial else None
    ctx = LowerContext(graph, TiledProgram("t", target),
                       MeshBuilder([builder or TileBuilder(tiles, target)]), target)  # fmt: skip
    ctx.begin_layer((0,))
    _lower_split(ctx, layer, channels)


@pytest.mark.parametrize("channels", [0, 16, 32])
def test_a_trial_graph_keeps_the_flow_busiest_pipe_and_finishes_of_the_tile_graph(channels):
    whole, trial = TileGraph("t"), TrialGraph()
    _lowered(whole, channels)
    _lowered(trial, channels)
    assert trial.alloc_of == whole.alloc_of and len(trial.finish) == len(whole.nodes)
    _, finish = in_order(range(len(whole.nodes)), *whole.timing_columns(), whole.preds)
    assert trial.finish[:-1] == finish[:-1]  # the newest node is timed when asked (`flow`)
    busy: dict[str, int] = {}
    for v in whole.nodes:
        if v.pipe is not None:
            busy[v.pipe] = busy.get(v.pipe, 0) + v.cycles
    assert trial.busy() == max(busy.values()) > 0
    assert flow(trial) == flow(whole) > trial.busy() // 2


@pytest.mark.parametrize("channels", [0, 16, 32])
def test_a_trial_builder_keeps_the_finishes_of_the_tile_graph_but_allocs_and_frees(channels):
    whole, trial = TileGraph("t"), TrialGraph()
    _lowered(whole, channels)
    _lowered(trial, channels, trial=True)
    _, finish = in_order(range(len(whole.nodes)), *whole.timing_columns(), whole.preds)
    kept = [f for f, v in zip(finish, whole.nodes, strict=True) if v.op not in ("ALLOC", "FREE")]
    assert len(trial.finish) == len(kept) + 1 < len(whole.nodes)  # node 0: START
    assert trial.finish[0] == 0 and set(trial.alloc_of.values()) == {0}
    assert trial.finish[1:-1] == kept[:-1]  # the newest node is timed when asked (`flow`)
    assert flow(trial) == flow(whole) and trial.busy() == _busiest(whole)


def _busiest(graph: TileGraph) -> int:
    busy: dict[str, int] = {}
    for v in graph.nodes:
        if v.pipe is not None:
            busy[v.pipe] = busy.get(v.pipe, 0) + v.cycles
    return max(busy.values())


def test_a_trial_builder_starts_on_an_empty_trial_graph():
    trial = TrialGraph()
    trial.add("VEC_ADD", "VECTOR", 5, ())
    with pytest.raises(AssertionError, match="empty trial graph"):
        TrialBuilder(trial, load_target("davinci-core"))


def test_an_edge_into_a_node_before_the_newest_is_refused():
    trial = TrialGraph()
    first = trial.add("VEC_ADD", "VECTOR", 5, ())
    trial.add("VEC_ADD", "VECTOR", 5, ())
    with pytest.raises(AssertionError, match="not the newest"):
        trial.add_edge(first, first)


def _fused_pair(tiles: TileGraph | TrialGraph, cube: int) -> None:
    """MobileNet v2's expand (24 -> 144, 1x1) and depthwise 3x3 pair lowered fused on `tiles`
    (a TrialBuilder's when a TrialGraph), `cube` of its channels on the cube."""
    rng = np.random.default_rng(0)
    graph = Graph("t")
    graph.add_tensor(Tensor("x", (1, 24, 28, 28)))
    graph.inputs.append("x")
    for name, shape in (("w1", (144, 24, 1, 1)), ("b1", (144,)), ("w2", (144, 1, 3, 3)),
                        ("b2", (144,))):  # fmt: skip
        graph.add_tensor(Tensor(name, shape, data=rng.standard_normal(shape).astype(np.float32)))
    graph.add_tensor(Tensor("e", (1, 144, 28, 28)))
    graph.add_tensor(Tensor("y", (1, 144, 28, 28)))
    expand = Layer("e", "conv2d", ["x", "w1", "b1"], ["e"], {"act": "relu"})
    layer = Layer("dw", "conv2d", ["e", "w2", "b2"], ["y"], {"group": 144, "pads": (1, 1, 1, 1)})
    graph.add_layer(expand)
    graph.add_layer(layer)
    target = load_target("davinci-core")
    builder = TrialBuilder(tiles, target) if isinstance(tiles, TrialGraph) else None
    ctx = LowerContext(graph, TiledProgram("t", target),
                       MeshBuilder([builder or TileBuilder(tiles, target)]), target)  # fmt: skip
    ctx.begin_layer((0,))
    for name in ("e", "y"):
        ctx.program.add_tensor(name, "temp", graph.tensors[name].shape)
    lower_fused(ctx, expand, layer, cube)


@pytest.mark.parametrize("cube", [0, 48])
def test_a_trial_builders_runs_of_taps_keep_the_finishes_of_the_tile_graph(monkeypatch, cube):
    """The depthwise taps (`vector_taps`) and the cube share's tap mmads (`_CubeTaps._tile`) go
    as runs (`emit_run`): a trial times all but the first of each from the one before."""
    runs: list[int] = []
    real = TrialGraph.repeat

    def repeat(self: TrialGraph, count: int) -> int:
        runs.append(count)
        return real(self, count)

    monkeypatch.setattr(TrialGraph, "repeat", repeat)
    whole, trial = TileGraph("t"), TrialGraph()
    _fused_pair(whole, cube)
    _fused_pair(trial, cube)
    # 3x3 taps: the vector's nine `mla`s from the bias (a run of 9: 8 timed by `repeat`), the
    # cube's first mmad alone (it does not accumulate) then a run of 8
    assert set(runs) == ({8} if cube == 0 else {7, 8})
    mmads = sum(1 for v in whole.nodes if v.op == "MMAD" and v.instr.k == 16)
    assert (mmads > 0) == (cube > 0)
    _, finish = in_order(range(len(whole.nodes)), *whole.timing_columns(), whole.preds)
    kept = [f for f, v in zip(finish, whole.nodes, strict=True) if v.op not in ("ALLOC", "FREE")]
    assert len(trial.finish) == len(kept) + 1  # node 0: START
    assert trial.finish[1:-1] == kept[:-1]
    assert flow(trial) == flow(whole) and trial.busy() == _busiest(whole)
