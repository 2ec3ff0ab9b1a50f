"""Instructions' generated __init__ (isa._quick_init): the dataclass's fields, defaults and
frozen instances, and a refusal of what it would skip."""

from __future__ import annotations

import dataclasses

import pytest

from npucc.ir.isa import INSTRUCTIONS, BufRef, VFill, _quick_init


def test_every_instruction_builds_as_its_dataclass_would():
    for cls in INSTRUCTIONS.values():
        assert cls.__init__.__qualname__ == f"{cls.__name__}.__init__"
    fill = VFill(BufRef(1, "UB", 0), (4,), (1,), 0.5)
    assert (fill.dims, fill.dst_strides, fill.value) == ((4,), (1,), 0.5)
    assert dataclasses.replace(fill) == fill
    with pytest.raises(dataclasses.FrozenInstanceError):
        fill.value = 1.0  # type: ignore[misc]


def test_a_post_init_or_a_default_factory_is_refused():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            assert self.n >= 0

    @dataclasses.dataclass(frozen=True, slots=True)
    class Listed:
        dims: tuple[int, ...] = dataclasses.field(default_factory=tuple)

    for cls in (Checked, Listed):
        with pytest.raises(TypeError, match="_quick_init"):
            _quick_init(cls)  # type: ignore[arg-type]
