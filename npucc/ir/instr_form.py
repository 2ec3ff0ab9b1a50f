"""Instructions alike but for where their operands are: the key of an instruction's form.

An instruction's cycles, energy, pipe, trace op name and text but for its addresses depend only
on its class, its fields other than the operands and its operands' tiers; `form_key` gives that
key, so that the lowering and codegen work each figure out once per form (a ResNet-50 has
about 250 forms for 30,000 instructions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

from npucc.ir.isa import Instr


def fields_getter(names: tuple[str, ...]) -> Callable[[Instr], tuple[Any, ...]]:
    """A function giving these fields of an instruction as a tuple (attrgetter's, even of one)."""
    if len(names) > 1:
        return attrgetter(*names)
    name = names[0]

    def one(instr: Instr) -> tuple[Any, ...]:
        return (getattr(instr, name),)

    return one


@dataclass(frozen=True, slots=True)
class InstrFields:
    """An instruction class's fields as a form reads them: its operands (in field order), its
    other fields and, of those, the ones holding floats."""

    names: tuple[str, ...]  # the operands'
    operands: Callable[[Instr], tuple[Any, ...]]
    others: Callable[[Instr], tuple[Any, ...]]
    floats: Callable[[Instr], tuple[Any, ...]] | None
    own_key: Callable[[Instr], tuple[Any, ...]]  # form_key with the operands' own tiers
    key_source: Callable[[list[str]], str]  # `key_items` of the class

    @staticmethod
    def of(cls: type[Instr]) -> InstrFields:
        """The fields of `cls` (a dataclass of INSTRUCTIONS with operands, not HostOp)."""
        kinds = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
        ops = {*cls.reads, *cls.writes}
        floats = tuple(n for n, t in kinds.items() if t in ("float", "tuple[float, ...]"))
        others = tuple(n for n in kinds if n not in ops and n not in floats)
        names = tuple(n for n in kinds if n in ops)
        tuples = all(kinds[n] == "tuple[float, ...]" for n in floats)

        def key_source(tiers: list[str]) -> str:
            return key_items(others, floats, tuples, tiers)

        return InstrFields(
            names,
            fields_getter(names),
            fields_getter(others),
            fields_getter(floats) if floats else None,
            _own_key(cls, key_source([f"i.{n}.tier" for n in names])),
            key_source,
        )


def key_items(
    others: tuple[str, ...], floats: tuple[str, ...], tuples: bool, tiers: list[str]
) -> str:
    """The items of `form_key`'s tuple as Python source, for generated code: of instruction
    `i` of class `cls` (`others`, `floats`: its fields as `InstrFields.of` splits them;
    `tuples`: every float field a tuple of floats), `E` the empty tuple, each operand's tier
    the expression in `tiers` (field order)."""

    # NOTE: the same tuple as form_key(instr, fields, tiers): a 1-tuple of one field as
    # `fields_getter` gives it, the floats' tuple by repr ("" without)
    def fields_of(group: tuple[str, ...]) -> str:
        return "(" + "".join(f"i.{n}, " for n in group) + ")"

    floats_text = f"repr({fields_of(floats)})" if floats else '""'
    if floats and tuples:
        # NOTE: each field the empty tuple (`E`: CPython has one, so `is` holds of it alone;
        # anything else, a tuple subclass's empty one too, takes repr): most vector ops
        empty = " and ".join(f"i.{n} is E" for n in floats)
        floats_text = f"{repr(tuple(() for _ in floats))!r} if {empty} else {floats_text}"
    return f"cls, {fields_of(others)}, {floats_text}" + "".join(f", {t}" for t in tiers)


def _own_key(cls: type[Instr], items: str) -> Callable[[Instr], tuple[Any, ...]]:
    """`form_key` of an instruction of `cls` with its operands in their own tiers (`items`:
    `key_items` of them), as one generated expression (the lowering asks it of every
    instruction it emits or tries)."""
    env: dict[str, Any] = {"cls": cls, "E": ()}
    exec(f"def own_key(i):\n    return ({items})\n", env)  # noqa: S102  (a plain function)
    found: Callable[[Instr], tuple[Any, ...]] = env["own_key"]
    return found


_FIELDS: dict[type[Instr], InstrFields] = {}


def instr_fields(cls: type[Instr]) -> InstrFields:
    """`InstrFields.of(cls)`, made once per class."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = InstrFields.of(cls)
    return found


def form_key(instr: Instr, fields: InstrFields, tiers: Sequence[str]) -> tuple[Any, ...]:
    """The form of `instr` (its class's `fields`) with its operands in `tiers` (field order).

    NOTE: float fields enter by repr: 0.0 == -0.0 and 1 == 1.0, but they print apart.
    """
    floats = fields.floats
    return (type(instr), fields.others(instr), repr(floats(instr)) if floats else "", *tiers)
