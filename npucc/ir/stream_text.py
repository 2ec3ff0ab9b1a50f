"""The text grammar of a command stream (docs/command-stream.md): each record printed and matched.

    npucc-stream 1
    target {JSON}
    image size=N sha256=HEX
    ddr size=N
    tensor KIND "NAME" DDR[0xADDR+BYTES] TYPE[DIMS]            (onchip: NOC[...] ... homes= chunk=)
    core ROW COL
      QUEUE BODY | wait SRC>DST#N set SRC>DST@ROW,COL#N ...
      HOST host node={JSON} in0=DDR[0xADDR+BYTES] in0_type=TYPE[DIMS] ... out0=... out0_type=...
    end

Every record has one printer here (codegen and `Stream.to_text` print with them) and one
matcher (`stream_parse` reads with them); a line's instruction body and its operands are
`npucc.ir.instr_text`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from npucc.ir.instr_text import (
    format_float,
    format_instr,
    format_ref,
    match_ref,
    split_tokens,
    symbolic_ref,
)
from npucc.ir.isa import PIPES, HostOp, Instr, MemRef, Operand
from npucc.ir.isa_cost import operand_nbytes
from npucc.ir.onchip import OnChip
from npucc.target import Target

MAGIC = "npucc-stream"
VERSION = 1
EVENTS = ("alloc", "free", "barrier")  # the queues of pipe-less lines
QUEUE_NAMES = (*(p.lower() for p in PIPES), "ctrl")  # queue names in flags
TENSOR_KINDS = ("const", "input", "output", "temp", "onchip")
# (storage, accumulator) element types a stream may declare (docs/precision.md)
STREAM_TYPES = (("f32", "f32"), ("f16", "f32"), ("i8", "i32"))
END = "end"

_FLAG_RE = re.compile(r"^([a-z0-9]+)(?:@(\d+),(\d+))?>([a-z0-9]+)(?:@(\d+),(\d+))?#(\d+)$")
_SHAPE_RE = re.compile(r"^([a-z0-9]+)\[([0-9,]*)\]$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_NAMES = {name: name for name in QUEUE_NAMES}  # matched queue names map to these objects

At = tuple[int, int]  # (row, col) of a core


# ---------------------------------------------------------------------------- header


def format_header(target_json: str, image_size: int, image_sha256: str, ddr_size: int) -> list[str]:
    """The four header lines: version, target, image, DDR size."""
    return [
        f"{MAGIC} {VERSION}",
        f"target {target_json}",
        f"image size={image_size} sha256={image_sha256}",
        f"ddr size={ddr_size}",
    ]


def is_sha256(text: str) -> bool:
    """Whether `text` is a lowercase hex sha256 digest."""
    return _SHA_RE.match(text) is not None


# ---------------------------------------------------------------------------- tensors


def format_shape(dtype: str, shape: Iterable[int]) -> str:
    """`TYPE[D0,D1,...]`."""
    return f"{dtype}[{','.join(map(str, shape))}]"


def match_shape(token: str) -> tuple[str, str] | None:
    """(type, dims text) of `TYPE[DIMS]`, or None (the dims are digits and commas, unchecked)."""
    m = _SHAPE_RE.match(token)
    return (m.group(1), m.group(2)) if m else None


def format_tensor(
    kind: str,
    name_literal: str,
    tier: str,
    addr: int,
    nbytes: int,
    dtype: str,
    shape: Iterable[int],
    onchip: OnChip | None = None,
    quant: tuple[float, int] | None = None,
) -> str:
    """`tensor KIND "NAME" TIER[0xADDR+BYTES] TYPE[DIMS]`, plus an onchip tensor's homes or an
    int8 program's input or output quantization `quant=SCALE,ZP`.

    `name_literal` is the name as a JSON string (`json.dumps(name, ensure_ascii=True)`).
    """
    text = f"tensor {kind} {name_literal} {format_ref(tier, addr, nbytes)}"
    text = f"{text} {format_shape(dtype, shape)}"
    if quant is not None:
        text = f"{text} {format_quant(quant)}"
    return text if onchip is None else f"{text} {onchip.text()}"


def format_quant(quant: tuple[float, int]) -> str:
    """`quant=SCALE,ZP`: the host converts the float tensor to int8 values of that scale and
    zero point (an input) or from them (an output)."""
    return f"quant={format_float(quant[0])},{quant[1]}"


def parse_quant(token: str) -> tuple[float, int] | None:
    """(scale, zero point) of a `quant=SCALE,ZP` token, or None if it is not one."""
    body = token.removeprefix("quant=")
    scale, comma, zp = body.partition(",")
    try:
        value = (float(scale), int(zp))
    except ValueError:
        return None
    ok = token.startswith("quant=") and comma and value[0] > 0 and -128 <= value[1] <= 127
    return value if ok else None


# ---------------------------------------------------------------------------- cores, lines


def format_core(row: int, col: int) -> str:
    """`core ROW COL`, the line that opens a core block (closed by END)."""
    return f"core {row} {col}"


def format_line(queue: str, body: str, sync: str) -> str:
    """`  QUEUE BODY | SYNC` (an empty body or sync and its separator are left out)."""
    return line_head(queue, body) + line_tail(sync)


def line_head(queue: str, body: str) -> str:
    """A line up to its flags: `  QUEUE BODY` (`  QUEUE` without a body)."""
    return f"  {queue} {body}" if body else f"  {queue}"


def line_tail(sync: str) -> str:
    """A line's flags part: ` | SYNC` (nothing without flags)."""
    return SYNC_BAR + sync if sync else ""


def split_line(content: str) -> tuple[str, str, bool, str]:
    """(queue, body, whether a `|` is present, sync text) of a stripped line."""
    body, bar, sync = content.partition("|")
    queue, _, rest = body.strip().partition(" ")
    return queue, rest, bool(bar), sync


def format_event(tier: str, addr: int, size: int, buf: int) -> str:
    """The body of an alloc/free line: `TIER[0xADDR+BYTES] b=ID` (a barrier has none)."""
    return f"{format_ref(tier, addr, size)} b={buf}"


def match_event(tokens: Sequence[str]) -> tuple[str, int, int, int] | None:
    """(tier, address, bytes, buffer id) of an alloc/free body's tokens, or None."""
    ref = match_ref(tokens[0]) if len(tokens) == 2 else None
    buf = match_buf(tokens[1]) if ref else None
    if ref is None or buf is None:
        return None
    return (*ref, buf)


def match_buf(token: str) -> int | None:
    """The buffer id of an alloc/free body's `b=ID` token, or None."""
    buf = token.removeprefix("b=")
    return int(buf) if buf.isdigit() and token.startswith("b=") else None


def format_body(instr: Instr, target: Target | None = None, symbolic: bool = False) -> str:
    """The body of a pipe line: a host record (`format_host`) or an instruction (instr_text);
    operand bytes are `target`'s (4 an element without one)."""
    if isinstance(instr, HostOp):
        return format_host(instr, target, symbolic)
    return format_instr(instr, target, symbolic)


# ---------------------------------------------------------------------------- host records


def host_json(node: Any) -> str:
    """A host node's canonical JSON (sorted keys, ASCII; `|` escaped so that it cannot end
    the instruction part of its line)."""
    text = json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.replace("|", "\\u007c")


def format_host(instr: HostOp, target: Target | None = None, symbolic: bool = False) -> str:
    """`host node={JSON} in0=REF in0_type=TYPE[DIMS] ... out0=REF out0_type=...`; with
    `symbolic`, the operands in the tiled IR's form (`@"key"+OFF`)."""
    parts = ["host", f"node={host_json(json.loads(instr.node))}"]
    nbytes = operand_nbytes(target, instr)
    for side, refs, types in (("in", instr.ins, instr.in_types), ("out", instr.outs,
                                                                  instr.out_types)):  # fmt: skip
        for i, (ref, (dtype, shape)) in enumerate(zip(refs, types, strict=True)):
            name = f"{side}{i}"
            if isinstance(ref, MemRef):
                text = format_ref(ref.tier, ref.addr, nbytes[name])
            elif symbolic:
                text = symbolic_ref(ref)
            else:
                raise ValueError(f"unresolved operand {name} of host")
            parts += [f"{name}={text}", f"{name}_type={format_shape(dtype, shape)}"]
    return " ".join(parts)


def match_host(text: str, operand: Any = None) -> tuple[HostOp, dict[str, int]] | str:
    """The host record of a line body and each operand's declared bytes, or what is wrong.

    `operand(raw)` reads an operand that is not resolved (the tiled IR's symbolic form).
    """
    tokens = split_tokens(text)
    if not tokens or tokens[0] != "host":
        return "expected 'host node={...} in0=... ...'"
    values: dict[str, str] = {}
    for tok in tokens[1:]:
        key, eq, val = tok.partition("=")
        if not eq or not key or not val or key in values:
            return f"bad or duplicate field '{tok[:40]}'"
        values[key] = val
    try:
        node = json.loads(values.pop("node", ""))
    except ValueError:
        return "host: node must be a JSON object"
    if not isinstance(node, dict) or not {"op", "domain", "version", "opset", "attrs",
                                          "inputs"} <= node.keys():  # fmt: skip
        return "host: node needs op, domain, version, opset, attrs and inputs"
    refs: dict[str, list[Operand]] = {"in": [], "out": []}
    types: dict[str, list[tuple[str, tuple[int, ...]]]] = {"in": [], "out": []}
    declared: dict[str, int] = {}
    for side in ("in", "out"):
        while f"{side}{len(refs[side])}" in values:
            name = f"{side}{len(refs[side])}"
            raw, kind = values.pop(name), match_shape(values.pop(f"{name}_type", ""))
            ref = match_ref(raw)
            if kind is None or not all(d.isdigit() for d in kind[1].split(",") if kind[1]):
                return f"host: {name}_type must be TYPE[DIMS]"
            if ref is not None:
                refs[side].append(MemRef(ref[0], ref[1]))
                declared[name] = ref[2]
            elif operand is not None:
                refs[side].append(operand(raw))
            else:
                return f"host: bad operand {name}='{raw[:40]}'"
            types[side].append((kind[0], tuple(int(d) for d in kind[1].split(",") if d)))
    if values:
        return f"host: unknown field '{next(iter(values))}'"
    canonical = json.dumps(node, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    instr = HostOp(canonical, tuple(refs["in"]), tuple(refs["out"]), tuple(types["in"]),
                   tuple(types["out"]))  # fmt: skip
    return instr, declared


# ---------------------------------------------------------------------------- flags


def format_flag(
    src: str, dst: str, num: int, src_at: At | None = None, dst_at: At | None = None
) -> str:
    """`SRC>DST#N`; an end given its core (`src_at`, `dst_at`) carries `@ROW,COL`.

    NOTE: a line names only the other core's end of a flag between two cores (a wait the setter,
    a set the waiter); messages name both.
    """
    if src_at is not None:
        src = f"{src}@{src_at[0]},{src_at[1]}"
    if dst_at is not None:
        dst = f"{dst}@{dst_at[0]},{dst_at[1]}"
    return f"{src}>{dst}#{num}"


def match_flag(spec: str, core: At) -> tuple[str, At, str, At, int] | None:
    """(src, src core, dst, dst core, number) of a flag on a line of `core`, or None.

    An end without `@ROW,COL` is `core`'s; queue names come back interned (a stream has
    hundreds of thousands of flags).
    """
    src, _, rest = spec.partition(">")
    dst, _, num = rest.partition("#")
    if src in _NAMES and dst in _NAMES and num.isdecimal():
        return _NAMES[src], core, _NAMES[dst], core, int(num)  # NOTE: what _FLAG_RE matches
    m = _FLAG_RE.match(spec)
    if not m:
        return None
    src, src_row, src_col, dst, dst_row, dst_col, num = m.groups()
    src_at = (int(src_row), int(src_col)) if src_row else core
    dst_at = (int(dst_row), int(dst_col)) if dst_row else core
    return _NAMES.get(src, src), src_at, _NAMES.get(dst, dst), dst_at, int(num)


SYNC_BAR = " | "  # between a line's body and its flags
SYNC_SEP = " "  # between a line's flags


def sync_word(verb: str, flag: str) -> str:
    """A flag on a line: `wait FLAG` (the line waits for it) or `set FLAG` (the line sets it).

    NOTE: the flag's text last: the word of `format_flag(..., n)` is this of its text but `n`,
    then `n` (codegen's flag kernel makes its words so)."""
    return f"{verb} {flag}"


def format_sync(waits: Sequence[str], sets: Sequence[str]) -> str:
    """`wait FLAG ... set FLAG ...` from flag texts: their words, the waits first."""
    words = [sync_word("wait", flag) for flag in waits]
    words += [sync_word("set", flag) for flag in sets]
    return SYNC_SEP.join(words)


# ---------------------------------------------------------------------------- file


def format_stream(
    header: Sequence[str], tensors: Sequence[str], cores: Iterable[tuple[int, int, Sequence[str]]]
) -> str:
    """The whole text: header lines, tensor lines, then each core's block of lines."""
    lines = [*header, *tensors]
    for row, col, body in cores:
        lines.append(format_core(row, col))
        lines.extend(body)
        lines.append(END)
    lines.append("")  # NOTE: the final newline, joined in: `join(...) + "\n"` copied the text
    return "\n".join(lines)
