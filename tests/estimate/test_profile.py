"""The estimate's layer profiles (npucc.backend.estimate.profile): their lowering, packing
and NoC pricing, and profiles cut at a known decision (profile_layer, ProfileContext.decided,
take)."""

from __future__ import annotations

import dataclasses
import itertools
import random
from pathlib import Path

import numpy as np
import pytest

from npucc.backend.estimate.profile import (
    FIGURES,
    UNREAD,
    KnownProfile,
    LayerProfile,
    ProfileContext,
    _summarise,
    layer_signature,
    operand_positions,
    profile_layer,
)
from npucc.backend.lower.builder import MeshBuilder, TileBuilder
from npucc.backend.lower.context import LOWERINGS, LowerContext
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.isa import PIPES, DdrRef, Operand
from npucc.ir.program import TiledProgram
from npucc.ir.tiled import TileGraph
from npucc.target import Target, load_target
from npucc.transforms.graph_pipeline import import_model

MODELS = Path(__file__).parents[2] / "models"


def test_a_cores_nodes_are_its_tiles_with_the_predecessors_among_them() -> None:
    # tiles go round-robin: core 0 of 2 runs tiles 0 (with the prologue) and 2, renumbered
    # in order; a predecessor on the other core is dropped
    rng = random.Random(3)
    n, starts = 40, (5, 14, 27)
    preds = tuple(tuple(sorted(rng.sample(range(v), min(v, 3)))) for v in range(n))
    prof = LayerProfile(
        tuple(rng.choice((None, 0, 1)) for _ in range(n)), (1,) * n, preds,
        tuple(rng.randrange(1, 8) for _ in range(n)), starts, (1, 1, 1), 0.0, 0, 0, (0,) * 5,
    )  # fmt: skip
    for cores, core in [(1, 0), (2, 0), (2, 1), (3, 2), (5, 0)]:
        mine = [v for t in range(core, len(starts), cores) for v in prof.span(t)]
        nodes, pipe, got, classes = prof.core_nodes(cores, core)
        assert nodes == mine
        assert pipe == [prof.pipe[v] for v in mine]
        assert classes == [prof.classes[v] for v in mine]
        assert got == [tuple(mine.index(u) for u in preds[v] if u in mine) for v in mine]


def test_a_profile_cut_at_a_known_decision_equals_its_whole_lowering() -> None:
    # each conv of residual_block on one core and more, with each set of its operands on
    # chip: profiled sharing `known` (a lowering whose first decision is known stops there
    # and takes that profile, one lowered on the other core count too) and alone (lowered to
    # the end), the profiles are equal
    graph = import_model(MODELS / "residual_block.onnx")
    target = load_target("mesh8x8")
    taken = across = 0
    for layer in graph.layers:
        if layer.op != "conv2d":
            continue
        names = (*layer.inputs, *layer.outputs)
        operands = [o for o, name in enumerate(names) if name and not graph.is_const(name)]
        for first in (True, False):
            known: dict = {}
            for single in (first, not first):
                for r in range(len(operands) + 1):
                    for noc in itertools.combinations(operands, r):
                        before = {id(p): s for (_, s), p in known.items()}
                        shared = profile_layer(graph, layer, target, single, noc, {}, known)
                        taken += id(shared) in before
                        across += id(shared) in before and before[id(shared)] is None
                        assert shared == profile_layer(graph, layer, target, single, noc, {})
    assert taken, "some profile was taken at its decision"
    assert across, "some profile was taken on the other core count"


def _positional(prof: LayerProfile, names: tuple[str, ...]) -> LayerProfile:
    """`prof` (lowered from a layer of operands `names`) with its copies' DDR tensors named by
    their operand positions (what a profile means by them)."""
    at = operand_positions(names)

    def ref(side: Operand) -> Operand:
        return DdrRef(at[side.key], side.off) if isinstance(side, DdrRef) else side

    copies = tuple(
        dataclasses.replace(c, instr=dataclasses.replace(c.instr, src=ref(c.instr.src),
                                                         dst=ref(c.instr.dst)))
        for c in prof.copies
    )  # fmt: skip
    return dataclasses.replace(prof, copies=copies)


def _conv_chain(convs: int) -> Graph:
    """`convs` 3x3 convs of one signature (16 channels, 12x12, a bias) one after another."""
    graph = Graph("chain")
    plane = (1, 16, 12, 12)
    graph.add_tensor(Tensor("x", plane))
    graph.inputs.append("x")
    rng = np.random.default_rng(5)
    for i in range(convs):
        w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
        graph.add_tensor(Tensor(f"w{i}", w.shape, data=w))
        graph.add_tensor(Tensor(f"b{i}", (16,), data=w[:, 0, 0, 0].copy()))
        graph.add_tensor(Tensor(f"y{i}", plane))
        x = f"y{i - 1}" if i else "x"
        graph.add_layer(
            Layer(f"c{i}", "conv2d", [x, f"w{i}", f"b{i}"], [f"y{i}"], {"pads": (1,) * 4})
        )
    return graph


def test_profiles_taken_from_another_layer_of_the_signature_equal_its_own_lowering() -> None:
    # every layer of three convs of one signature, a small CNN and a decoder block, on
    # one core and more, with each set of its operands on chip: profiled sharing one `known`
    # per signature across layers, whatever their neighbours (a decision names no tensor; a
    # lowering that read no `on_noc` is known whatever is on chip, by what it read of its
    # neighbours) and alone, the profiles are equal, each copy's
    # DDR tensor as its operand position
    target = load_target("mesh8x8")
    taken = across = unread = 0
    for graph in (
        _conv_chain(3),
        import_model(MODELS / "small_cnn.onnx"),
        import_model(MODELS / "decoder_block.onnx"),
    ):
        known: dict = {}
        owner: dict = {}  # id of a profile -> the operands of the layer lowered to it
        for layer in graph.layers:
            if layer.op not in LOWERINGS:  # a view: no run of its own
                continue
            names = (*layer.inputs, *layer.outputs)
            operands = [o for o, name in enumerate(names) if name and not graph.is_const(name)]
            mine = known.setdefault(layer_signature(graph, layer, True, target)[:-2], {})
            nocs = dict.fromkeys([(), *((o,) for o in operands), tuple(operands)])
            for single, noc in itertools.product((True, False), nocs):
                before = {id(p): d for (d, _), p in mine.items()}
                shared = profile_layer(graph, layer, target, single, noc, {}, mine)
                alone = profile_layer(graph, layer, target, single, noc, {})
                if id(shared) in before:
                    taken += 1
                    across += owner[id(shared)] != names
                    unread += before[id(shared)][0] == UNREAD
                else:
                    owner[id(shared)] = names
                assert _positional(shared, owner[id(shared)]) == _positional(alone, names)
    assert taken and across and unread, (taken, across, unread)


def test_a_profile_that_read_the_core_count_is_known_on_that_count_only() -> None:
    # `decided` takes a profile known on any count only while the count is unread, and one
    # known on its own count always
    graph, layer = _depthwise(16, 4)
    target = load_target("mesh8x8")
    prof = profile_layer(graph, layer, target, True)
    for single, read, known, hit in [
        (True, False, {("d", None): prof}, True),
        (True, True, {("d", None): prof}, False),
        (True, True, {("d", True): prof}, True),
        (False, False, {("d", True): prof}, False),
    ]:
        builders = [TileBuilder(TileGraph("p"), target, c) for c in range(1 if single else 2)]
        ctx = ProfileContext(graph, TiledProgram("t", target), MeshBuilder(builders), target)
        ctx.known = known
        ctx.begin_layer(tuple(range(len(builders))))
        if read:
            assert ctx.one_core() == single and ctx.counted
        if hit:
            with pytest.raises(KnownProfile):
                ctx.decided("d")
        else:
            ctx.decided("d")


def test_profiles_sharing_the_forms_figures_equal_profiles_alone() -> None:
    # every layer of three models profiled in turn through one lowerings' memo (each
    # instruction form's energy and DDR bytes worked out once, `FIGURES`) and each alone with
    # a fresh memo: the profiles are equal, their energy to the last bit
    target = load_target("mesh8x8")
    for model in ("residual_block", "transformer_encoder", "lrn_concat"):
        graph = import_model(MODELS / f"{model}.onnx")
        memo: dict = {}
        for layer in graph.layers:
            if layer.op not in LOWERINGS:  # a view: no run of its own
                continue
            names = (*layer.inputs, *layer.outputs)
            noc = tuple(o for o, name in enumerate(names) if name and not graph.is_const(name))
            for single, on in ((True, ()), (False, noc)):
                shared = profile_layer(graph, layer, target, single, on, memo)
                alone = profile_layer(graph, layer, target, single, on, {})
                assert shared == alone and shared.energy_pj == alone.energy_pj
        assert len(memo[FIGURES]) > 10


def test_noc_priced_takes_each_copys_farthest_home_as_onchip_hops() -> None:
    """`noc_priced`'s hops per copy (the kernel's farthest home of its elements) are
    `OnChip.hops`' over the copy's elements, its slice offset added; operands not kept keep
    their DDR copies."""
    from types import SimpleNamespace

    from npucc.backend.estimate.profile import copy_rows, noc_priced
    from npucc.ir.onchip import OnChip

    rng = random.Random(7)
    for _ in range(200):
        used = tuple((rng.randrange(8), rng.randrange(8)) for _ in range(rng.randint(1, 6)))
        homes = {
            o: OnChip(
                tuple((rng.randrange(8), rng.randrange(8)) for _ in range(rng.randint(1, 9))),
                rng.randint(1, 40),
            )
            for o in rng.sample(range(4), rng.randint(1, 3))
        }
        offsets = {o: rng.choice((0, rng.randrange(50))) for o in homes}
        copies, want = [], {}
        for node in range(rng.randint(1, 30)):
            o, k = rng.randrange(4), rng.randrange(len(used))
            where = homes.get(o)
            top = len(where.homes) * where.chunk - offsets[o] if where else 60
            lo = rng.randrange(max(top, 1))
            hi = rng.randint(lo, max(top, lo))
            copies.append(
                SimpleNamespace(
                    operand=o, tile=k, node=node, lo=lo, hi=hi, shape=("L1", "UB", node % 3),
                    instr=None, energy_pj=1.0, ddr=0, lead=False,
                )
            )  # fmt: skip
            if where is not None:
                want[(k, node)] = where.hops(used[k], lo + offsets[o], hi + offsets[o])
        prof = SimpleNamespace(energy_pj=100.0, ddr_bytes=0, lead_ddr_bytes=0, copies=copies)
        rows = copy_rows(prof, len(used), {}, 15)  # type: ignore[arg-type]
        over, energy, _, _ = noc_priced(  # type: ignore[arg-type]
            prof, rows, homes, offsets, used, lambda _, hops: (10 * hops, hops)
        )
        got = {
            (k, node): c // 10
            for k, nodes in enumerate(rows.nodes)
            for node, c in zip(nodes, over[rows.core_off[k] : rows.core_off[k + 1]], strict=True)
            if c >= 0
        }
        assert got == want
        assert energy == 100.0 + sum(hops - 1.0 for hops in want.values())


def _depthwise(channels: int, size: int) -> tuple[Graph, Layer]:
    """A depthwise 3x3 conv with a bias alone in a graph, and its layer."""
    graph = Graph("t")
    w = np.ones((channels, 1, 3, 3), np.float32)
    plane = (1, channels, size, size)
    for name, shape, data in (
        ("x", plane, None),
        ("w", w.shape, w),
        ("b", (channels,), w[:, 0, 0, 0]),
        ("y", plane, None),
    ):
        graph.add_tensor(Tensor(name, shape, data=data))
    graph.inputs.append("x")
    attrs = {"group": channels, "pads": (1, 1, 1, 1)}
    layer = Layer("dw", "conv2d", ["x", "w", "b"], ["y"], attrs)
    graph.add_layer(layer)
    return graph, layer


def _lowered_on(graph: Graph, layer: Layer, target: Target, k: int) -> list[LayerProfile]:
    """`layer` lowered on a rectangle of `k` cores as the lowering does: each core's nodes."""
    graphs = [TileGraph(f"core{c}") for c in range(k)]
    builder = MeshBuilder([TileBuilder(g, target, c) for c, g in enumerate(graphs)])
    ctx = LowerContext(graph, TiledProgram("t", target), builder, target)
    ctx.begin_layer(tuple(range(k)))
    LOWERINGS[layer.op](ctx, layer)
    return [_summarise(g, [0], target, {}) for g in graphs]


@pytest.mark.parametrize(("channels", "size"), [(256, 14), (96, 28)])
def test_a_depthwise_convs_profile_on_several_cores_has_every_cores_work(channels, size):
    """A depthwise conv's lowering deals its tiles to the cores (`claim_tiles`) and emits
    each core's together: its profile on a larger rectangle has every tile's work (the
    instructions of its lowering on 2, 4 and as many cores as tiles, summed over the cores),
    and the per-core time it predicts there is the lowering's, exactly: a core's share is one
    pipeline, the profile's tiles follow one another, but each pipe runs their instructions in
    the same order (a window's fills just before its taps, depthwise.pipeline)."""
    graph, layer = _depthwise(channels, size)
    target = load_target("mesh8x8")
    prof = profile_layer(graph, layer, target, False)
    for k in (2, 4, max(prof.ntiles, 5)):
        cores = _lowered_on(graph, layer, target, k)
        for p in range(len(PIPES)):
            assert prof.busy[p] == sum(c.busy[p] for c in cores)
        assert prof.energy_pj == pytest.approx(sum(c.energy_pj for c in cores), rel=1e-12)
        assert prof.ddr_bytes == sum(c.ddr_bytes for c in cores)
        for core, real in enumerate(cores):
            assert prof.core_timing(k, core).cold == real.timing(1)[0].cold
