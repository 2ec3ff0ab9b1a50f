"""Cost model hand-computed cases, safety check, beam search vs baselines, determinism."""

from npucc.backend.hypercut.baselines import (
    AnnealOptions,
    anneal,
    layer_pipelined,
    layer_sequential,
)
from npucc.backend.hypercut.beam import BeamOptions, BeamSearch
from npucc.backend.hypercut.plan import MeshPlan, is_safe
from npucc.target.mesh_cost import (
    Group,
    LayerLoad,
    MeshParams,
    Rect,
    Step,
    Workload,
    dram_hops,
    evaluate,
)

from .conftest import chain


def one_layer(macs: int, weights: int, out: int) -> Workload:
    layer = LayerLoad("a", macs, 0, weights, out, (), 0, True)
    return Workload("one", (layer,), 1)


def test_single_layer_by_hand(mesh: MeshParams):
    wl = one_layer(macs=64 * 1024 * 1000, weights=256, out=512)
    c = evaluate(mesh, wl, (Step((Group((0,), mesh.whole),)),))
    eb = mesh.elem_bytes
    dram = (256 + 512) * eb
    assert c.dram_bytes == dram
    hops = dram_hops(8, 8, mesh.whole)
    assert abs(c.noc_byte_hops - dram * hops) < 1e-6
    assert c.breakdown["mac"] == 64 * 1024 * 1000 * mesh.mac_pj
    assert c.breakdown["dram"] == dram * 8 * mesh.dram_pj_bit
    assert abs(c.breakdown["noc"] - dram * hops * 8 * mesh.noc_pj_bit_hop) < 1e-3
    buffer = 256 * eb * mesh.sram_write_pj + 512 * eb * mesh.sram_read_pj
    buffer += 64 * 1024 * 1000 * mesh.core_buffer_pj_per_mac
    assert abs(c.breakdown["buffer"] - buffer) < 1e-3
    assert c.latency_cycles == 1000  # compute-bound: 1000 cycles on 64 cores
    half = evaluate(mesh, wl, (Step((Group((0,), Rect(0, 0, 4, 8)),)),))
    assert half.latency_cycles == 2000


def test_dram_bound_and_on_chip_reuse(mesh: MeshParams):
    wl = Workload(
        "two",
        (
            LayerLoad("a", 1, 0, 0, 1 << 20, (), 1 << 20, False),
            LayerLoad("b", 1, 0, 0, 16, ((0, 1 << 20),), 0, True),
        ),
        1,
    )
    whole = mesh.whole
    seq = (Step((Group((0,), whole),)), Step((Group((1,), whole),)))
    c = evaluate(mesh, wl, seq)
    # a's 1 MiB output (x elem bytes) fits half of 64 MB of SRAM: b reads it on chip
    assert c.dram_bytes == ((1 << 20) + 16) * mesh.elem_bytes
    first = evaluate(mesh, Workload("a", wl.layers[:1], 1), seq[:1])
    assert first.latency_cycles >= (1 << 20) * mesh.elem_bytes / mesh.dram_bandwidth


def test_safety_check():
    wl = chain(4)
    r = Rect(0, 0, 8, 8)
    good = (Step((Group((0, 1), r),)), Step((Group((2, 3), r),)))
    bad = (Step((Group((2, 3), r),)), Step((Group((0, 1), r),)))
    assert is_safe(wl, good) and not is_safe(wl, bad)


def test_beam_beats_baselines_and_is_deterministic(mesh: MeshParams):
    wl = chain(10, batch=8)
    opts = BeamOptions(width=16, seed=3)
    plan = BeamSearch(wl, mesh, opts).run()
    assert plan == BeamSearch(wl, mesh, opts).run()
    MeshPlan(wl, mesh, plan, "hypercut").verify()
    edp = evaluate(mesh, wl, plan).edp
    assert edp <= evaluate(mesh, wl, layer_sequential(wl, mesh)).edp
    assert edp <= evaluate(mesh, wl, layer_pipelined(wl, mesh)).edp
    sa = anneal(wl, mesh, AnnealOptions(iterations=300, seed=1))
    MeshPlan(wl, mesh, sa, "sa").verify()
    assert "step 0" in MeshPlan(wl, mesh, plan, "hypercut").to_text()
