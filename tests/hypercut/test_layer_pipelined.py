"""The layer-pipelined baseline (SET's LP): admissibility rules, the segmentation DP, plans."""

import itertools

from npucc.backend.hypercut.baselines import (
    _fits,
    _segment_options,
    _segmentation,
    _Segments,
    _shares,
    layer_pipelined,
)
from npucc.backend.hypercut.set_model import MeshParams, evaluate, priced_plan
from npucc.ir.plan import Group, LayerLoad, Step, Workload

from .conftest import chain


def test_min_util_rejects_idle_cores():
    assert _shares([1.0] * 4, 8) == [2, 2, 2, 2]
    assert _shares([1.0] * 5, 8) is None  # the slowest layer holds 1 core: 5/8 busy < 75 %
    assert _shares([3.0, 1.0], 4) == [3, 1]
    assert _shares([1.0] * 9, 8) is None  # more layers than cores


def maps(elems: int, batch: int) -> Workload:
    """Two equal conv-like layers whose per-sample input has `elems` elements."""
    return Workload(
        "maps",
        (
            LayerLoad("a", 1 << 30, 0, 1000, elems, (), elems, False),
            LayerLoad("b", 1 << 30, 0, 1000, 16, ((0, elems),), 0, True),
        ),
        batch,
    )


def test_buffer_rule_needs_two_sub_batches_of_input(mesh: MeshParams):
    per_core = mesh.sram_per_core // mesh.elem_bytes  # elements one core holds
    shares = [32, 32]
    small = _Segments(maps(8 * per_core, 8), 0).workload(2)
    assert _fits(mesh, small, shares, 8)  # 2 x 8 cores' worth of input on 32 cores
    assert not _fits(mesh, small, shares, 1)  # the whole batch: 64 cores' worth
    big = _Segments(maps(20 * per_core, 8), 0).workload(2)
    assert not _fits(mesh, big, shares, 8)  # two samples of 20 cores each on 32 cores
    plan = layer_pipelined(maps(20 * per_core, 8), mesh)
    assert all(len(step.groups) == 1 for step in plan)  # no segment is admissible


def test_segments_read_and_write_outside_through_dram():
    wl = chain(6, batch=2)
    seg = _Segments(wl, 2).workload(4)  # layers 2 and 3; 3 reads 1 and 2, feeds 4
    assert [layer.inputs for layer in seg.layers] == [(), ((0, 4096),)]
    assert [layer.ext_in for layer in seg.layers] == [4096, 4096]
    assert [layer.is_output for layer in seg.layers] == [False, True]


def test_segmentation_is_optimal_for_a_fixed_lambda(mesh: MeshParams):
    wl = chain(5, batch=4)
    options = _segment_options(wl, mesh)
    lam = 2e3

    def value(plan):
        costs = {step: e + lam * d for opts in options.values() for e, d, step in opts}
        return sum(costs[step] for step in plan)

    best = float("inf")
    for cuts in itertools.product((False, True), repeat=4):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [5]
        segs = list(itertools.pairwise(bounds))
        if all(s in options for s in segs):
            per_seg = [min(e + lam * d for e, d, _ in options[s]) for s in segs]
            best = min(best, sum(per_seg))
    assert abs(value(_segmentation(5, options, lam)) - best) <= 1e-9 * best


def test_plan_is_valid_deterministic_and_pipelines(mesh: MeshParams):
    wl = chain(10, batch=8)
    plan = layer_pipelined(wl, mesh)
    assert plan == layer_pipelined(wl, mesh)
    priced_plan(mesh, wl, plan, "layer-pipelined").verify()
    layers = [g.layers[0] for step in plan for g in step.groups]
    assert layers == list(range(10))  # consecutive segments in layer order
    assert any(len(step.groups) > 1 for step in plan)
    assert not any(step.loop for step in plan)
    work = [layer.macs / mesh.macs_per_core for layer in wl.layers]
    for step in plan:  # SET's rules hold on every pipelined segment
        lo, hi = step.groups[0].layers[0], step.groups[-1].layers[0] + 1
        shares = _shares(work[lo:hi], mesh.rows * mesh.cols)
        assert shares is not None
        assert _fits(mesh, _Segments(wl, lo).workload(hi), shares, step.nsub)
    alone = tuple(Step((Group((i,), mesh.whole),)) for i in range(10))
    assert evaluate(mesh, wl, plan).edp < evaluate(mesh, wl, alone).edp
