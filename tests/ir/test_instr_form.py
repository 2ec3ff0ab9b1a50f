"""Instruction forms: alike but for where the operands are, and nothing else."""

from __future__ import annotations

from npucc.ir.instr_form import form_key, instr_fields
from npucc.ir.isa import BufRef, Copy, DdrRef, Mmad, VFill


def _key(instr):
    fields = instr_fields(type(instr))
    return form_key(instr, fields, [ref.tier for ref in fields.operands(instr)])


def test_instructions_apart_only_in_their_operands_places_share_a_form():
    one = Copy(BufRef(3, "L1", 0), DdrRef("x", 0), (4, 8), (8, 1), (16, 1))
    two = Copy(BufRef(9, "L1", 64), DdrRef("y", 512), (4, 8), (8, 1), (16, 1))
    assert _key(one) == _key(two)
    assert instr_fields(Mmad).names == ("dst", "a", "b")


def test_other_tiers_fields_or_float_texts_make_other_forms():
    base = Copy(BufRef(3, "L1", 0), DdrRef("x", 0), (4, 8), (8, 1), (16, 1))
    keys = {
        _key(base),
        _key(Copy(BufRef(3, "UB", 0), DdrRef("x", 0), (4, 8), (8, 1), (16, 1))),
        _key(Copy(BufRef(3, "L1", 0), DdrRef("x", 0), (4, 8), (8, 1), (8, 1))),
        _key(VFill(BufRef(1, "UB", 0), (4,), (1,), 0.0)),
        _key(VFill(BufRef(1, "UB", 0), (4,), (1,), -0.0)),
        _key(VFill(BufRef(1, "UB", 0), (4,), (1,), 0)),
    }
    assert len(keys) == 6
