"""A profile's DDR copies re-priced as NoC transfers (npucc.backend.estimate.profile.copy_rows,
noc_priced): the rows per core, the hops to the farthest home, the bytes left on the channel."""

from __future__ import annotations

from pathlib import Path

from npucc.backend.estimate.profile import copy_rows, noc_priced, profile_layer
from npucc.ir.isa import NocCopy
from npucc.ir.isa_cost import instr_cycles, instr_energy
from npucc.ir.onchip import OnChip
from npucc.target import load_target
from npucc.transforms.graph_pipeline import import_model

MODELS = Path(__file__).parents[2] / "models"
MESH = load_target("mesh8x8")
HOPS = MESH.mesh.rows + MESH.mesh.cols - 1  # more than the longest path


def _conv_profiles():
    """Each conv of residual_block profiled on a larger rectangle with its non-const operands
    known to stay on chip, and those operands."""
    graph = import_model(MODELS / "residual_block.onnx")
    for layer in graph.layers:
        if layer.op != "conv2d":
            continue
        names = (*layer.inputs, *layer.outputs)
        noc = tuple(o for o, name in enumerate(names) if name and not graph.is_const(name))
        yield profile_layer(graph, layer, MESH, False, noc, {}), noc


def test_copy_rows_deal_the_copies_round_robin_and_sum_each_operands_bytes() -> None:
    seen = 0
    for prof, _ in _conv_profiles():
        for cores in (1, 3, 8):
            known: dict = {}
            rows = copy_rows(prof, cores, known, HOPS)
            assert len(rows.instrs) == len(prof.copies)
            laid: list[list[int]] = [[] for _ in range(cores)]
            for i, c in enumerate(prof.copies):
                row = (rows.operand[i], rows.core[i], rows.lo[i], rows.hi[i], rows.spent[i])
                assert row == (c.operand, c.tile % cores, c.lo, c.hi, c.energy_pj)
                assert rows.prices[rows.shape[i]] is known[c.shape]  # one table per shape
                assert rows.instrs[i] is c.instr
                k = c.tile % cores
                assert rows.core_off[k] + len(laid[k]) == rows.dest[i]  # core by core, in order
                laid[k].append(c.node)
            assert rows.nodes == laid and rows.core_off[-1] == len(prof.copies)
            for o in {c.operand for c in prof.copies}:
                mine = [c for c in prof.copies if c.operand == o]
                assert rows.sums[o] == (
                    sum(c.ddr for c in mine),
                    sum(c.ddr for c in mine if c.lead),
                )
            seen += len(prof.copies)
    assert seen, "some conv copies a non-const operand"


def _price(ins, hops: int) -> tuple[int, float]:
    """What `ExecCostModel._noc_copy` prices: the copy as a NoC transfer over `hops`."""
    noc = NocCopy(ins.dst, ins.src, ins.dims, ins.dst_strides, ins.src_strides, hops)
    return instr_cycles(MESH, noc), instr_energy(MESH, noc)


def test_noc_priced_charges_each_copy_of_a_kept_operand_by_its_hops_and_frees_its_ddr() -> None:
    for prof, noc in _conv_profiles():
        if not prof.copies:
            continue
        used = ((0, 0), (0, 1), (1, 0), (1, 1))
        known: dict = {}
        rows = copy_rows(prof, len(used), known, HOPS)
        kept = noc[0]  # one operand on chip, on two homes far from the rectangle
        size = max(c.hi for c in prof.copies if c.operand == kept)
        homes = {kept: OnChip(((5, 5), (7, 7)), -(-size // 2))}
        calls = []

        def price(ins, hops, calls=calls):
            calls.append(hops)
            return _price(ins, hops)

        over, energy, ddr, lead = noc_priced(prof, rows, homes, {kept: 0}, used, price)
        want = [-1] * len(prof.copies)  # by place in the core by core layout
        spent = moved = lead_moved = 0
        for i, c in enumerate(prof.copies):
            if c.operand != kept:
                continue
            k = c.tile % len(used)
            hops = homes[kept].hops(used[k], c.lo, c.hi)
            assert hops >= 8  # (5, 5) and (7, 7) are 8 or more hops from every used core
            cycles, pj = _price(c.instr, hops)
            want[rows.dest[i]] = cycles
            spent += pj - c.energy_pj
            moved += c.ddr
            lead_moved += c.ddr * c.lead
        assert over.tolist() == want
        assert abs(energy - (prof.energy_pj + spent)) <= 1e-6 * max(1.0, abs(energy))
        assert (ddr, lead) == (prof.ddr_bytes - moved, prof.lead_ddr_bytes - lead_moved)
        priced = sum(len(by_hops) for by_hops in known.values())
        assert len(calls) == priced  # each (shape, hops) priced once
        again = noc_priced(prof, rows, homes, {kept: 0}, used, price)
        assert again[0].tolist() == want and again[1:] == (energy, ddr, lead)
        assert len(calls) == priced
        nothing = noc_priced(prof, rows, {}, {}, used, price)
        assert nothing[0].tolist() == [-1] * len(prof.copies)
        assert nothing[1:] == (prof.energy_pj, prof.ddr_bytes, prof.lead_ddr_bytes)
