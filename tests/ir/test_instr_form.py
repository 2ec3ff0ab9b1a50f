"""Instruction forms: alike but for where the operands are, and nothing else."""

from __future__ import annotations

from pathlib import Path

from npucc.compiler import compile_to
from npucc.ir.instr_form import form_key, instr_fields
from npucc.ir.isa import BufRef, Copy, DdrRef, HostOp, Mmad, VBinary, VFill, VUnary
from npucc.options import CompileOptions

MODELS = Path(__file__).resolve().parents[2] / "models"


def _key(instr):
    fields = instr_fields(type(instr))
    key = form_key(instr, fields, [ref.tier for ref in fields.operands(instr)])
    assert fields.own_key(instr) == key and repr(fields.own_key(instr)) == repr(key)
    return key


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


class _Floats(tuple):
    """A tuple subclass: its empty instance is not the empty tuple, and prints apart."""

    def __repr__(self) -> str:
        return f"_Floats{tuple(self)!r}"


def test_empty_float_fields_key_by_their_repr_as_any_others():
    ub = BufRef(1, "UB", 0)
    keys = {
        _key(VUnary("relu", ub, ub, (4,), (1,), (1,))),
        _key(VUnary("clip", ub, ub, (4,), (1,), (1,), (0.0, 6.0))),
        _key(VUnary("clip", ub, ub, (4,), (1,), (1,), (-0.0, 6.0))),
        _key(VUnary("clip", ub, ub, (4,), (1,), (1,), (), (0.5,))),
        _key(VUnary("clip", ub, ub, (4,), (1,), (1,), tuple([]), _Floats())),
        _key(VBinary("add", ub, ub, ub, (4,), (1,), (1,), (1,))),
    }
    assert len(keys) == 6
    assert _key(VUnary("relu", ub, ub, (4,), (1,), (1,)))[2] == "((), ())"


def test_own_key_is_form_key_with_the_operands_own_tiers_for_every_instruction_lowered():
    seen = set()
    for model in ("small_cnn.onnx", "transformer_encoder.onnx"):
        program = compile_to(MODELS / model, "lower-tiles", CompileOptions())
        for core in program.cores:
            for node in core.graph.nodes:
                if node.instr is not None and not isinstance(node.instr, HostOp):
                    _key(node.instr)
                    seen.add(type(node.instr))
    assert len(seen) >= 5
