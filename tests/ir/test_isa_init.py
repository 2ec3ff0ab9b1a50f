"""Instructions are values (isa.Instr's NOTE): slotted dataclasses built with their fields and
defaults, equal and hashed by their fields."""

from __future__ import annotations

import dataclasses

from npucc.ir.isa import INSTRUCTIONS, BufRef, Copy, VFill


def test_every_instruction_builds_as_its_dataclass_would():
    for cls in INSTRUCTIONS.values():
        assert dataclasses.is_dataclass(cls) and "__slots__" in vars(cls), cls.__name__
        assert cls.__hash__ is not None and cls.__hash__ is not object.__hash__, cls.__name__
    fill = VFill(BufRef(1, "UB", 0), (4,), (1,), 0.5)
    assert (fill.dims, fill.dst_strides, fill.value) == ((4,), (1,), 0.5)
    assert not hasattr(fill, "__dict__")
    assert dataclasses.replace(fill) == fill and dataclasses.replace(fill) is not fill


def test_instructions_are_equal_and_hashed_by_their_fields():
    a = Copy(BufRef(1, "UB", 4), BufRef(2, "L1", 0), (8,), (1,), (1,))
    b = Copy(BufRef(1, "UB", 4), BufRef(2, "L1", 0), (8,), (1,), (1,))
    c = Copy(BufRef(1, "UB", 5), BufRef(2, "L1", 0), (8,), (1,), (1,))
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c}) == 2
