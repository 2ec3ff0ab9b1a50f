"""Text form of one instruction and of its operands (the part before `|` of a stream line).

    OPCODE key=value key=value ...

with values: an operand `L1[0x000100+4096]` (tier[byte address + bytes touched]), an int, a
float, a name, or a list `[1,2,3]`. The tiled IR writes the same form with symbolic operands,
`bID+OFF` (a buffer) and `@"key"+OFF` (a DDR tensor). `format_ref`/`match_ref` are the one
grammar of a resolved operand: stream lines, tensor and alloc/free records all use them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import fields
from functools import lru_cache
from typing import Any

from npucc.ir.isa import (
    DDR,
    INSTRUCTIONS,
    NOC,
    OPTIONAL_FIELDS,
    BufRef,
    DdrRef,
    Instr,
    MemRef,
    field_names,
)
from npucc.ir.isa_cost import operand_nbytes
from npucc.target import TIERS, Target

_OPERAND_RE = re.compile(rf"^({'|'.join((*TIERS, DDR, NOC))})\[0x([0-9a-f]+)\+(\d+)\]$")
_BUF_RE = re.compile(r"^b(\d+)\+(-?\d+)$")
_DDR_RE = re.compile(r'^@("(?:[^"\\]|\\.)*")\+(-?\d+)$')
_TOKEN_RE = re.compile(r'(?:"(?:[^"\\]|\\.)*"|\S)+?(?=\s|$)')


_ADDR_SPEC = "06x"  # a resolved operand's byte address: hex, at least six digits
_PERCENT_ADDR = f"%{_ADDR_SPEC}"  # the same as a %-format (`instr_template`)


def format_ref(tier: str, addr: int, nbytes: int | None = None) -> str:
    """A resolved operand `TIER[0xADDR+BYTES]`, or the address alone `TIER[0xADDR]`."""
    head, tail = _ref_sides(tier, nbytes)
    return f"{head}{addr:{_ADDR_SPEC}}{tail}"


def _ref_sides(tier: str, nbytes: int | None) -> tuple[str, str]:
    """A resolved operand's text before and after its address."""
    return f"{tier}[0x", "]" if nbytes is None else f"+{nbytes}]"


def match_ref(text: str) -> tuple[str, int, int] | None:
    """(tier, byte address, bytes) of a resolved operand, or None if `text` is not one."""
    m = _OPERAND_RE.match(text)
    return (m.group(1), int(m.group(2), 16), int(m.group(3))) if m else None


def format_float(value: float) -> str:
    """Exact, round-tripping text of a float (repr of the double)."""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if math.isnan(value):
        return "nan"
    return repr(float(value))


def format_instr(instr: Instr, target: Target | None = None, symbolic: bool = False) -> str:
    """Text of an instruction: `opcode key=value ...`.

    Resolved operands print as `TIER[0xADDR+BYTES]` (bytes of `target`'s element types,
    `operand_bytes`); with `symbolic`, buffer operands print as
    `bID+OFF` and DDR tensors as `@"key"+OFF` (the tiled IR's form).
    """
    nbytes = operand_nbytes(target, instr)
    parts = [instr.opcode]
    for name, value in _shown(instr):
        if isinstance(value, MemRef):
            text = format_ref(value.tier, value.addr, nbytes[name])
        elif symbolic and isinstance(value, BufRef):
            text = f"b{value.buf}+{value.off}"
        elif symbolic and isinstance(value, DdrRef):
            text = symbolic_ref(value)
        elif isinstance(value, (BufRef, DdrRef)):
            raise ValueError(f"unresolved operand {name} of {instr.opcode}")
        else:
            text = _value_text(value)
        parts.append(f"{name}={text}")
    return " ".join(parts)


def _shown(instr: Instr) -> Iterator[tuple[str, object]]:
    """The fields an instruction's text shows, in order: all but optional ones at their default."""
    for name in field_names(type(instr)):
        value = getattr(instr, name)
        if name not in OPTIONAL_FIELDS or value != OPTIONAL_FIELDS[name]:
            yield name, value


def _value_text(value: object) -> str:
    """Text of a field that is not an operand: an int, a float, a name or a list of numbers."""
    if isinstance(value, tuple):
        inner = ",".join(format_float(v) if isinstance(v, float) else str(v) for v in value)
        return f"[{inner}]"
    if isinstance(value, float):
        return format_float(value)
    return str(value)


def instr_template(instr: Instr, target: Target | None = None) -> str:
    """The text of a resolved instruction as a %-format with one `%06x` per operand's hex
    address (in field order): `fill_template` of it and any addresses in the same tiers is
    `format_instr`'s text.

    Codegen prints instructions alike but for their addresses from one template, each with one
    %-format (no Python per operand).
    """
    nbytes = operand_nbytes(target, instr)
    parts = [instr.opcode]
    for name, value in _shown(instr):
        if isinstance(value, (BufRef, DdrRef)):
            raise ValueError(f"unresolved operand {name} of {instr.opcode}")
        if isinstance(value, MemRef):  # format_ref's form, the address left out
            head, tail = _ref_sides(value.tier, nbytes[name])
            parts.append(f"{name}={head}\0{tail}")
        else:
            parts.append(f"{name}={_value_text(value)}")
    pieces = " ".join(parts).replace("%", "%%").split("\0")
    return _PERCENT_ADDR.join(pieces)


def fill_template(template: str, addrs: tuple[int, ...]) -> str:
    """An instruction's text from its `instr_template` and its operands' byte addresses."""
    return template % addrs


def symbolic_ref(ref: BufRef | DdrRef | MemRef) -> str:
    """A DDR tensor operand in the tiled IR's form, `@"key"+OFF` (a buffer: `bID+OFF`)."""
    if isinstance(ref, BufRef):
        return f"b{ref.buf}+{ref.off}"
    if isinstance(ref, DdrRef):
        return f"@{json.dumps(ref.key, ensure_ascii=True)}+{ref.off}"
    raise ValueError(f"not a symbolic operand: {ref}")


def split_tokens(text: str) -> list[str]:
    """The whitespace-separated tokens of an instruction body (a quoted string is one)."""
    return _TOKEN_RE.findall(text)


def parse_symbolic(raw: str, buffer_tiers: Sequence[str]) -> BufRef | DdrRef:
    """A symbolic operand of the tiled IR (`bID+OFF`, `@"key"+OFF`); ParseError if not one."""
    return _symbolic(raw, buffer_tiers, "host", "operand")


class ParseError(ValueError):
    """A malformed instruction; the caller adds file:line."""


def parse_instr(
    text: str, buffer_tiers: Sequence[str] | None = None
) -> tuple[Instr, dict[str, int]]:
    """Parse `opcode key=value ...`; returns the instruction and each operand's declared bytes.

    With `buffer_tiers` (tier per buffer id) the symbolic operands of the tiled IR, `bID+OFF`
    and `@"key"+OFF`, are accepted too; they declare no bytes.
    """
    # NOTE: without a quote the tokens are the whitespace-separated words (the common case)
    tokens = text.split() if '"' not in text else _TOKEN_RE.findall(text)
    if not tokens:
        raise ParseError("empty instruction")
    cls = INSTRUCTIONS.get(tokens[0])
    if cls is None:
        raise ParseError(f"unknown opcode '{tokens[0]}'")
    values: dict[str, str] = {}
    for tok in tokens[1:]:
        key, eq, val = tok.partition("=")
        if not eq or not key or not val:
            raise ParseError(f"expected key=value, got '{tok}'")
        if key in values:
            raise ParseError(f"duplicate field '{key}'")
        values[key] = val
    kwargs: dict[str, Any] = {}
    declared: dict[str, int] = {}
    for name, kind, optional in _field_kinds(cls):
        raw = values.pop(name, None)
        if raw is None:
            if optional:
                continue  # the field's default
            raise ParseError(f"{cls.opcode}: missing field '{name}'")
        try:
            if kind == "Operand":
                ref = match_ref(raw)
                if ref is not None:
                    kwargs[name] = MemRef(ref[0], ref[1])
                    declared[name] = ref[2]
                elif buffer_tiers is not None:
                    kwargs[name] = _symbolic(raw, buffer_tiers, cls.opcode, name)
                else:
                    raise ParseError(f"{cls.opcode}: bad operand {name}='{raw}'")
            elif kind == "int":
                kwargs[name] = int(raw)
            elif kind == "ints":
                kwargs[name] = _parse_list(raw, int)
            elif kind == "float":
                kwargs[name] = float(raw)
            elif kind == "floats":
                kwargs[name] = _parse_list(raw, float)
            else:
                kwargs[name] = raw
        except ValueError as exc:
            if isinstance(exc, ParseError):
                raise
            raise ParseError(f"{cls.opcode}: bad value {name}='{raw}'") from None
    if values:
        raise ParseError(f"{cls.opcode}: unknown field '{next(iter(values))}'")
    return cls(**kwargs), declared


_FIELD_KINDS: dict[type[Instr], tuple[tuple[str, str, bool], ...]] = {}


def _field_kinds(cls: type[Instr]) -> tuple[tuple[str, str, bool], ...]:
    """(name, kind, whether optional) of each field of an instruction class (computed once);
    a kind is Operand, int, ints (a list of them), float, floats or text."""
    kinds = _FIELD_KINDS.get(cls)
    if kinds is None:
        # every INSTRUCTIONS class is a dataclass (only the abstract Instr base is not)
        kinds = tuple(
            (f.name, _kind(str(f.type)), f.name in ("scalars", "index", *OPTIONAL_FIELDS))
            for f in fields(cls)  # type: ignore[arg-type]
        )
        _FIELD_KINDS[cls] = kinds
    return kinds


def _kind(annotation: str) -> str:
    for prefix, kind in (("tuple[int", "ints"), ("tuple[float", "floats")):
        if annotation.startswith(prefix):
            return kind
    return annotation if annotation in ("Operand", "int", "float") else "text"


def _symbolic(raw: str, buffer_tiers: Sequence[str], opcode: str, name: str) -> BufRef | DdrRef:
    m = _BUF_RE.match(raw)
    if m and int(m.group(1)) < len(buffer_tiers):
        buf = int(m.group(1))
        return BufRef(buf, buffer_tiers[buf], int(m.group(2)))
    m = _DDR_RE.match(raw)
    if m:
        return DdrRef(json.loads(m.group(1)), int(m.group(2)))
    raise ParseError(f"{opcode}: bad operand {name}='{raw}'")


@lru_cache(maxsize=65536)
def _parse_list(raw: str, kind: type) -> tuple[Any, ...]:
    """A `[a,b,...]` list as a tuple (cached: streams repeat the same patterns, which share it)."""
    if not (raw.startswith("[") and raw.endswith("]")):
        raise ValueError(raw)
    body = raw[1:-1]
    return tuple(kind(x) for x in body.split(",")) if body else ()
