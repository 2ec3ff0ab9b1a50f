"""Which tensors a plan keeps on chip: the rules, the homes, and the EDP refinement."""

import math
from itertools import combinations
from pathlib import Path

import pytest

from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.hypercut.onchip_plan import (
    STAGED_OPS,
    plan_onchip,
    stage_piece,
    staged_key,
    tensor_consumers,
    whole_tensors,
)
from npucc.backend.lower import plan_tensors
from npucc.backend.planner import PlanOptions, plan_graph
from npucc.ir.onchip import OnChip, chunk_bytes, parse_onchip
from npucc.target import load_target, target_from_dict
from npucc.transforms.graph_pipeline import import_model

MODELS = Path(__file__).parents[2] / "models"
MESH = load_target("mesh8x8")


def test_hops_reach_the_farthest_home_of_a_range():
    where = OnChip(((0, 0), (0, 1), (3, 3)), 10)
    assert where.hops((0, 0), 0, 10) == 0
    assert where.hops((0, 0), 5, 15) == 1
    assert where.hops((0, 0), 0, 25) == 6
    assert where.hops((3, 3), 20, 21) == 0 and where.hops((3, 3), 4, 4) == 0
    assert parse_onchip(where.text().split()) == where
    turned = OnChip(((0, 0),), 10, at=64, live=(3, 9), turn=(4, 5))
    assert turned.text().endswith("live=3..9 turn=4..5")
    assert parse_onchip(turned.text().split()) == turned
    with pytest.raises(ValueError, match="bad home"):
        parse_onchip(["homes=[0,x]", "chunk=4", "at=0", "live=0..0"])
    assert chunk_bytes(10, 4) == 64 and chunk_bytes(17, 4) == 128


def test_rules_lives_outputs_and_budget():
    graph = import_model(MODELS / "small_cnn.onnx")
    n = len(graph.layers)
    cores = [(0, 1, 2, 3)] * n
    produced = [
        t
        for layer in graph.layers
        for t in layer.outputs
        if t not in graph.outputs and layer.op != "reshape"  # a view is its input's tensor
    ]
    kept = plan_onchip(graph, cores, MESH)
    assert set(kept) == set(produced)  # one step: every intermediate tensor, no output
    for where in kept.values():
        assert where.homes[0] == (0, 0) and len(where.homes) <= 4
    readers = tensor_consumers(graph)
    for t, where in kept.items():  # live from its producer to its last reader, however far
        producer = next(i for i, layer in enumerate(graph.layers) if t in layer.outputs)
        assert where.live == (producer, max(readers[t]))
    assert plan_onchip(graph, cores, load_target("davinci-core")) == {}
    one = produced[0]
    assert one not in plan_onchip(graph, cores, MESH, frozenset({one}))
    tiny = MESH.to_dict()
    tiny["mesh"]["onchip_buffer"] = 64
    small = plan_onchip(graph, cores, target_from_dict(tiny))
    assert all(chunk_bytes(w.chunk, 4) <= 64 for w in small.values())


def test_the_plan_sends_through_ddr_what_the_refinement_chose():
    graph = import_model(MODELS / "residual_block.onnx")
    plan = plan_graph(graph, MESH, PlanOptions(beam=BeamOptions(width=4), estimate="exec"))
    model = ExecCostModel(graph, MESH)
    candidates = model.onchip(plan.steps)
    assert plan.offchip <= set(candidates)
    assert model.evaluate(plan.steps, plan.offchip).edp <= model.evaluate(plan.steps).edp
    lowered = plan_tensors(plan, graph, MESH)
    assert lowered == model.onchip(plan.steps, plan.offchip)
    assert not set(lowered) & plan.offchip


def test_a_split_loop_stages_its_cube_weights_on_its_rectangle():
    graph = import_model(MODELS / "small_cnn.onnx")
    n = len(graph.layers)
    cores = [(8, 9, 10, 11)] * n
    cube = [(i, t) for i, layer in enumerate(graph.layers) if layer.op in STAGED_OPS
            for t in layer.inputs if t and graph.is_const(t)]  # fmt: skip
    assert cube
    piece = stage_piece(MESH)
    split = plan_onchip(graph, cores, MESH, loops=[(0, 2, -1)] * n)
    for _, t in cube:
        where = split[staged_key(t, 0)]
        elems = math.prod(graph.tensors[t].shape)
        assert where.chunk == min(elems, max(-(-elems // 4), piece))  # a piece per home at least
        assert where.homes == tuple((1, c) for c in range(len(where.homes)))
    whole = plan_onchip(graph, cores, MESH, loops=[(0, 1, -1)] * n)
    assert not any("@chip" in key for key in whole)  # one sub-batch: read once anyway
    first = staged_key(cube[0][1], 0)
    assert first not in plan_onchip(graph, cores, MESH, frozenset({first}), loops=[(0, 2, -1)] * n)


def test_a_staged_weight_too_large_for_its_rectangle_spreads_to_the_nearest_cores():
    graph = import_model(MODELS / "transformer_encoder.onnx")
    n = len(graph.layers)
    rect = (0, 1, 8, 9)  # a 2x2 corner of the 8x8 mesh
    tensors = frozenset(graph.tensors)  # no handoff: the weights have the buffers to themselves
    kept = plan_onchip(graph, [rect] * n, MESH, tensors, loops=[(0, 2, -1)] * n)
    big = [t for t in graph.tensors if graph.is_const(t) and graph.tensors[t].shape == (768, 768)]
    where = kept[staged_key(big[0], 0)]  # 2.36 MB: more than four 512 KiB buffers hold
    assert len(where.homes) > 4 and where.homes[:4] == ((0, 0), (0, 1), (1, 0), (1, 1))
    assert chunk_bytes(where.chunk, 4) <= MESH.mesh.onchip_budget
    assert set(where.homes[4:]) == {(0, 2), (1, 2), (2, 0), (2, 1)}  # one hop away


def test_staged_weights_take_only_the_room_the_handoffs_left():
    graph = import_model(MODELS / "transformer_encoder.onnx")
    n = len(graph.layers)
    loops = [(0, 2, -1)] * n
    kept = plan_onchip(graph, [(0, 1, 8, 9)] * n, MESH, loops=loops)
    handoffs = {k: w for k, w in kept.items() if k in graph.tensors}
    staged = frozenset(kept) - set(handoffs)
    assert handoffs and staged  # the handoffs, then the weights that still fit
    alone = plan_onchip(graph, [(0, 1, 8, 9)] * n, MESH, staged, loops=loops)
    # unchanged, and nothing else (ExecCostModel.best_edp takes this variant from `kept`)
    assert alone == handoffs and list(alone) == list(handoffs)


def test_a_homes_bytes_serve_one_tensor_after_another():
    graph = import_model(MODELS / "residual_block.onnx")
    n = len(graph.layers)
    cores = [(0, 1, 2, 3)] * n
    whole = plan_onchip(graph, cores, MESH)
    tight = MESH.to_dict()
    tight["mesh"]["onchip_buffer"] = 2 * max(chunk_bytes(w.chunk, 4) for w in whole.values())
    kept = plan_onchip(graph, cores, target_from_dict(tight))
    assert set(kept) == set(whole)  # all fit again, although their chunks add up to more
    assert sum(chunk_bytes(w.chunk, 4) for w in kept.values()) > tight["mesh"]["onchip_buffer"]
    sharing = [(a, b) for a, b in combinations(kept.values(), 2) if a.shares(b, 4)]
    assert sharing and not any(a.meets(b) for a, b in sharing)
    later = plan_onchip(graph, cores, MESH, spans=[(0, n)] * n)  # every life overlaps
    assert not any(a.shares(b, 4) for a, b in combinations(later.values(), 2))


def test_a_loop_on_one_rectangle_holds_one_sub_batch_of_a_handoff():
    graph = import_model(MODELS / "residual_block.onnx")
    n = len(graph.layers)
    cores = [(0, 1, 2, 3)] * n
    shared = plan_onchip(graph, cores, MESH, loops=[(0, 4, -1)] * n)  # a loop of several steps
    handoffs = [w for k, w in shared.items() if k in graph.tensors]
    assert handoffs and all(w.slots == 1 and w.slot for w in handoffs)
    apart = [(0, 1, 2, 3) if i % 2 else (4, 5, 6, 7) for i in range(n)]  # alternate rectangles
    double = plan_onchip(graph, apart, MESH, loops=[(0, 4, -1)] * n)
    # a layer on the producer's cores reads each reader's output: its sub-batch j waits for
    # the reader's, so one slot overlaps as much; the last layer's input has no such layer
    slots = {k: w.slots for k, w in double.items() if k in graph.tensors}
    assert slots == {"bn0.scaled": 1, "bn0": 1, "r1": 1, "r2": 1, "r3": 2}
    piped = plan_onchip(graph, cores, MESH, loops=[(0, 4, s) for s in range(n)])  # a pipeline
    assert all(w.slots >= 2 for k, w in piped.items() if k in graph.tensors)


def test_one_slot_handoffs_of_a_loop_take_turns_with_their_bytes():
    """In a loop of several steps on one rectangle, handoffs whose turns in a sub-batch do not
    overlap share bytes although their lives (the whole loop) do; nothing else does."""
    graph = import_model(MODELS / "residual_block.onnx")
    n = len(graph.layers)
    cores = [(0, 1, 2, 3)] * n
    spans = [(i, 3 * n + i) for i in range(n)]  # four sub-batches, one layer after another
    kept = plan_onchip(graph, cores, MESH, loops=[(0, 4, -1)] * n, spans=spans)
    handoffs = {k: w for k, w in kept.items() if k in graph.tensors}
    lives = handoffs.values()
    assert all(w.turn is not None and w.meets(v) for w in lives for v in lives)
    sharing = [(a, b) for a, b in combinations(kept.values(), 2) if a.shares(b, 4)]
    assert sharing and all(a.alternates(b) for a, b in sharing)
    whole = plan_onchip(graph, cores, MESH, loops=[(0, 1, -1)] * n, spans=spans)
    assert not any(w.turn for w in whole.values())
    assert not any(a.shares(b, 4) for a, b in combinations(whole.values(), 2))


def test_a_loops_whole_input_passes_its_bytes_to_its_output_home_by_home():
    """Layers 2-4 of residual_block in a loop of four sub-batches on four cores: slice j of
    its input `bn0` (home j) dies at sub-batch j, slice j of its output `r3` is born there.
    With room for both, `r3` takes the offset it takes by whole lives; in a buffer where the
    whole lives leave it none, it takes `bn0`'s bytes on each home once that home's slice is
    read."""
    graph = import_model(MODELS / "residual_block.onnx")
    cores = [(0, 1, 2, 3)] * len(graph.layers)
    loops = [(0, 1, -1)] * 2 + [(1, 4, -1)] * 3 + [(2, 1, -1)]
    positions = [(0,), (1,), (2, 5, 8, 11), (3, 6, 9, 12), (4, 7, 10, 13), (14,)]
    spans = [(p[0], p[-1]) for p in positions]
    whole = plan_onchip(graph, cores, MESH, loops=loops, spans=spans)
    roomy = plan_onchip(graph, cores, MESH, loops=loops, spans=spans, positions=positions)
    assert whole["bn0"].lives is None and not whole["r3"].shares(whole["bn0"], 4)
    assert [w.at for w in roomy.values()] == [w.at for w in whole.values()]
    small = MESH.to_dict()
    small["mesh"]["onchip_buffer"] = 12288  # r1, r2 and bn0 leave 4 KB: r3 needs 8
    tight = target_from_dict(small)
    assert "r3" not in plan_onchip(graph, cores, tight, loops=loops, spans=spans)
    kept = plan_onchip(graph, cores, tight, loops=loops, spans=spans, positions=positions)
    assert kept["bn0"].lives == ((1, 3), (1, 6), (1, 9), (1, 12))
    assert kept["r3"].lives == ((4, 14), (7, 14), (10, 14), (13, 14))
    assert kept["r3"].meets(kept["bn0"]) and kept["r3"].shares(kept["bn0"], 4)
    assert kept["bn0"].precedes(kept["r3"]) and not kept["r3"].clashes(kept["bn0"], 4)
    assert parse_onchip(kept["r3"].text().split()) == kept["r3"]
    for a, b in combinations(kept.values(), 2):
        assert not a.clashes(b, 4)


@pytest.mark.parametrize("name", ["residual_block", "small_cnn", "transformer_encoder"])
def test_an_unsplit_plan_keeps_what_the_general_rule_keeps(name: str) -> None:
    graph = import_model(MODELS / f"{name}.onnx")
    n = len(graph.layers)
    consumers = tensor_consumers(graph)
    whole = whole_tensors(graph, consumers)
    targets = [MESH]
    for share in (16, 4096):  # some tensors do not fit
        tight = MESH.to_dict()
        tight["mesh"]["onchip_buffer"] = MESH.mesh.onchip_buffer // share
        targets.append(target_from_dict(tight))
    counts = set()
    for target in targets:
        for width in (1, 2, 4, 8):
            cores = [tuple(range(i % width, 64, width)) for i in range(n)]
            identity = [(i, i) for i in range(n)]  # spans given: the general rule
            for offchip in (frozenset(), frozenset(list(graph.tensors)[1::3])):
                general = plan_onchip(graph, cores, target, offchip, spans=identity)
                assert plan_onchip(graph, cores, target, offchip, whole=whole) == general
                assert plan_onchip(graph, cores, target, offchip) == general
                assert list(plan_onchip(graph, cores, target, offchip)) == list(general)
                counts.add(len(general))
    assert len(counts) > 2  # all, none and some kept
