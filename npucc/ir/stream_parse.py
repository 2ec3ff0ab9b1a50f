"""Parse a command stream (docs/command-stream.md) into a `Stream`, rejecting malformed lines.

The records' grammar is `stream_text`'s; what they must satisfy beyond it, `stream_verify`'s.
Every error is a `StreamError` that starts with `FILE:LINE:`.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from npucc.errors import NpuccError
from npucc.gcpause import gc_paused
from npucc.ir.dtypes import HOST_DTYPES, HOST_INTS, INDEX_BYTES, INDEX_DTYPE
from npucc.ir.instr_text import ParseError, format_ref, match_ref, parse_instr
from npucc.ir.isa import DDR, HOST, NOC, PIPES, Instr, NocCopy
from npucc.ir.onchip import parse_onchip
from npucc.ir.stream import Event, Flag, FlagKey, Line, Stream, StreamCore, StreamTensor
from npucc.ir.stream_text import (
    END,
    EVENTS,
    MAGIC,
    QUEUE_NAMES,
    STREAM_TYPES,
    TENSOR_KINDS,
    VERSION,
    is_sha256,
    match_buf,
    match_event,
    match_flag,
    match_host,
    match_shape,
    parse_quant,
    split_line,
)
from npucc.ir.stream_verify import StreamChecks, clip
from npucc.target import DTYPE_BYTES, Target, target_from_json

_JSON = json.JSONDecoder()
_UNPRINTABLE = re.compile(r"[^\t\n\x20-\x7e]")  # not printable ASCII, a tab or a newline


def read_stream_text(path: str | os.PathLike[str]) -> str:
    """The text of a stream file; an NpuccError naming the file when it is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise NpuccError(f"cannot read stream {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise NpuccError(
            f"cannot read stream {path}: not text; expected an npucc command stream (.cmd, "
            "written by `npucc MODEL.onnx -o OUT.cmd`)"
        ) from None
    return text


def load_stream(path: str | os.PathLike[str]) -> Stream:
    """Read and parse a stream file."""
    return parse_stream(read_stream_text(path), os.fspath(path))


def parse_stream(text: str, path: str = "<stream>") -> Stream:
    """Parse stream text; `path` names the file in error messages."""
    with gc_paused():  # NOTE: a line's objects are long-lived and make no cycles
        return _Parser(path).parse(text)


class _Parser(StreamChecks):
    __slots__ = ("flag_sets", "flag_waits", "checked", "regions")

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.flag_sets: dict[FlagKey, tuple[Flag, int]] = {}
        self.flag_waits: dict[FlagKey, tuple[Flag, int]] = {}
        # the instruction of each pipe line's (queue, body) that passed the checks: a repeated
        # one passes them again (the memories' extents only grow; what it reaches is reached)
        # but a noc copy's, whose route depends on its core
        self.checked: dict[tuple[str, str], Instr] = {}
        # the (tier, address, bytes) of each alloc/free region text that passed the checks: a
        # repeated one passes them again (VGG-19: 225 k events, a few thousand regions)
        self.regions: dict[str, tuple[str, int, int]] = {}

    def parse(self, text: str) -> Stream:
        it = self._records(text)

        def expect(what: str) -> list[str]:
            for self.lineno, content in it:
                return content.split()
            raise self.fail(f"unexpected end of file, expected {what}")

        if expect(f"'{MAGIC} {VERSION}'") != [MAGIC, str(VERSION)]:
            raise self.fail(f"expected '{MAGIC} {VERSION}'")
        self.target = self._target(it)
        image_size, image_sha = self._image(expect("image"))
        image_line = self.lineno
        self.ddr_size = self._ddr(expect("ddr"))
        self.extent[DDR] = (self.ddr_size, self.lineno)
        if image_size > self.ddr_size:
            raise self.fail(f"image size {image_size} exceeds ddr size {self.ddr_size}")
        tensors: dict[str, StreamTensor] = {}
        cores: list[StreamCore] = []
        core: StreamCore | None = None
        at = (0, 0)  # the core's (row, col): one tuple its lines' flags share
        for self.lineno, content in it:
            if core is not None:
                if content == END:
                    core = None
                else:
                    core.lines.append(self._line(content, at))
            elif content.startswith("tensor ") and not cores:
                tensor = self._tensor(content, image_size)
                if tensor.name in tensors:
                    raise self.fail(f"duplicate tensor {json.dumps(tensor.name)}")
                tensors[tensor.name] = tensor
            elif content.startswith("core "):
                core = self._core(content, cores)
                cores.append(core)
                at = (core.row, core.col)
            else:
                raise self.fail(f"unexpected line '{clip(content)}'")
        if core is not None:
            raise self.fail(f"core block opened at line {core.lineno} has no '{END}'")
        if not cores:
            raise self.fail("stream has no core block")
        for key, (flag, lineno) in self.flag_sets.items():
            if key not in self.flag_waits:
                raise self.fail(f"flag {flag} is set but never waited", lineno)
        return Stream(
            self.path, self.target, image_size, image_sha, self.ddr_size, tensors, cores,
            image_line, self.extent,
        )  # fmt: skip

    def _records(self, text: str) -> Iterator[tuple[int, str]]:
        """Each line's number and content, but blank and comment lines, as they are read.

        NOTE: one at a time, not a list of them all: a line's text is freed before the next
        is read, and its memory is reused (VGG-19's 425 k lines: the parse's peak 528 MiB,
        was 626).
        """
        start, lineno = 0, 0
        # NOTE: text all printable ASCII, tabs and newlines passes every line's check at once
        plain = _UNPRINTABLE.search(text) is None
        while start <= len(text):
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            content = text[start:end].strip()
            start, lineno = end + 1, lineno + 1
            if content and not content.startswith("#"):
                if not plain and (
                    not content.isascii() or not content.replace("\t", " ").isprintable()
                ):
                    raise self.fail("non-ASCII or control character", lineno)
                yield lineno, content

    def _target(self, it: Iterator[tuple[int, str]]) -> Target:
        for self.lineno, content in it:
            key, _, body = content.partition(" ")
            if key != "target" or not body:
                raise self.fail("expected 'target {json}'")
            try:
                target = target_from_json(body)
            except (ValueError, NpuccError) as exc:
                raise self.fail(f"bad target: {exc}") from None
            if (target.dtype, target.acc_dtype) not in STREAM_TYPES:
                raise self.fail(f"unsupported dtype {target.dtype} (accumulator "
                                f"{target.acc_dtype}): streams are f32, f16 into f32, or i8 "
                                "into i32")  # fmt: skip
            return target
        raise self.fail("unexpected end of file, expected target")

    def _image(self, tokens: list[str]) -> tuple[int, str]:
        if len(tokens) != 3 or tokens[0] != "image":
            raise self.fail("expected 'image size=N sha256=HEX'")
        size = self._int_field(tokens[1], "size")
        sha = tokens[2].removeprefix("sha256=")
        if not tokens[2].startswith("sha256=") or not is_sha256(sha):
            raise self.fail(f"bad image digest '{clip(tokens[2])}'")
        return size, sha

    def _ddr(self, tokens: list[str]) -> int:
        if len(tokens) != 2 or tokens[0] != "ddr":
            raise self.fail("expected 'ddr size=N'")
        size = self._int_field(tokens[1], "size")
        if size % 4:
            raise self.fail(f"ddr size {size} is not a multiple of 4")
        if size > self.target.memory.DDR:
            raise self.fail(f"ddr size {size} exceeds the target's DDR {self.target.memory.DDR}")
        return size

    def _int_field(self, token: str, key: str) -> int:
        name, eq, value = token.partition("=")
        if name != key or not eq or not value.isdigit():
            raise self.fail(f"expected {key}=N, got '{clip(token)}'")
        return int(value)

    def _tensor(self, content: str, image_size: int) -> StreamTensor:
        parts = content.split(None, 2)
        kind, rest = (parts[1], parts[2]) if len(parts) == 3 else ("", "")
        if kind not in TENSOR_KINDS:
            raise self.fail(f"bad tensor kind '{clip(kind)}' (one of {', '.join(TENSOR_KINDS)})")
        if not rest.startswith('"'):
            raise self.fail("tensor name must be a JSON string literal")
        try:
            name, end = _JSON.raw_decode(rest)
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad tensor name literal: {exc.msg}") from None
        tokens = rest[end:].split()
        if kind == "onchip":
            return self._onchip(name, tokens)
        quant = None
        if len(tokens) == 3 and kind in ("input", "output") and self.target.dtype == "i8":
            quant = parse_quant(tokens.pop())
            if quant is None:
                raise self.fail("expected quant=SCALE,ZP (a positive scale, an int8 zero point)")
        if len(tokens) != 2 or not rest[end : end + 1].isspace():
            raise self.fail("expected 'tensor KIND \"NAME\" DDR[0xADDR+BYTES] TYPE[DIMS]'")
        ref = match_ref(tokens[0])
        if ref is None or ref[0] != DDR:
            raise self.fail(f"bad tensor location '{clip(tokens[0])}'")
        _, addr, nbytes = ref
        s = match_shape(tokens[1])
        dtype = s[0] if s else ""
        storage = self.target.dtype
        if dtype != storage and not (
            (dtype == INDEX_DTYPE and kind == "input")
            or (dtype in (*HOST_DTYPES, "f32") and kind in ("input", "output"))
            or (dtype == self.target.acc_dtype and kind == "temp")
        ):
            raise self.fail(
                f"bad tensor type '{clip(tokens[1])}' (target dtype is {storage}; "
                f"{INDEX_DTYPE} only for inputs, {', '.join(HOST_DTYPES)} and f32 for inputs and "
                f"outputs, {self.target.acc_dtype} for temps (spilled accumulators))"
            )
        assert s is not None
        try:
            shape = tuple(int(d) for d in s[1].split(",")) if s[1] else ()
        except ValueError:
            raise self.fail(f"bad tensor shape '{clip(tokens[1])}'") from None
        # NOTE: an input's or output's model type is held as the storage type (the host converts
        # it); a temp of the accumulator type (an L0C spill slot) holds accumulators
        eb = INDEX_BYTES if dtype == INDEX_DTYPE else self.target.elem_bytes
        if kind == "temp":
            eb = DTYPE_BYTES[dtype]
        if math.prod(shape) * eb != nbytes:
            raise self.fail(f"tensor {json.dumps(name)}: {nbytes} bytes do not hold shape {shape}")
        if addr % 4 or addr + nbytes > self.ddr_size:
            raise self.fail(
                f"tensor {json.dumps(name)}: {format_ref(DDR, addr, nbytes)} is "
                f"misaligned or outside ddr size {self.ddr_size}"
            )
        if kind == "const" and addr + nbytes > image_size:
            raise self.fail(f"const tensor {json.dumps(name)} lies outside the image")
        if (
            quant is None
            and kind in ("input", "output")
            and self.target.dtype == "i8"
            and (dtype not in HOST_INTS)
        ):
            raise self.fail(f"tensor {json.dumps(name)}: an int8 stream's float {kind} needs "
                            "quant=SCALE,ZP")  # fmt: skip
        return StreamTensor(kind, name, addr, nbytes, shape, self.lineno, dtype, quant=quant)

    def _onchip(self, name: str, tokens: list[str]) -> StreamTensor:
        """`tensor onchip "NAME" NOC[0xADDR+BYTES] f32[DIMS] homes=[R,C;...] chunk=N at=OFF
        live=A..B [turn=C..D] [lives=[A..B;...]]`."""
        ref = match_ref(tokens[0]) if len(tokens) in (6, 7, 8) else None
        s = match_shape(tokens[1]) if ref else None
        if ref is None or s is None or ref[0] != NOC or s[0] != self.target.dtype:
            raise self.fail(
                'expected \'tensor onchip "NAME" NOC[0xADDR+BYTES] TYPE[DIMS] homes=[R,C;...] '
                "chunk=N at=OFF live=A..B [turn=C..D] [lives=[A..B;...]]'"
            )
        try:
            where = parse_onchip(tokens[2:])
            shape = tuple(int(d) for d in s[1].split(",")) if s[1] else ()
        except ValueError as exc:
            raise self.fail(f"onchip tensor {json.dumps(name)}: {exc}") from None
        _, addr, nbytes = ref
        self.check_onchip(name, addr, nbytes, shape, where)
        tensor = StreamTensor("onchip", name, addr, nbytes, shape, self.lineno, s[0], where)
        self.onchip.append(tensor)
        self.reach(NOC, addr + nbytes)
        return tensor

    def _core(self, content: str, cores: list[StreamCore]) -> StreamCore:
        tokens = content.split()
        if len(tokens) != 3 or not tokens[1].isdigit() or not tokens[2].isdigit():
            raise self.fail("expected 'core ROW COL'")
        row, col = int(tokens[1]), int(tokens[2])
        if row >= self.target.mesh.rows or col >= self.target.mesh.cols:
            raise self.fail(f"core {row} {col} is outside the target's mesh")
        for other in cores:
            if (other.row, other.col) == (row, col):
                raise self.fail(f"core {row} {col} already defined at line {other.lineno}")
        return StreamCore(row, col, self.lineno)

    def _line(self, content: str, core: tuple[int, int]) -> Line:
        queue, rest, bar, sync = split_line(content)
        queue = sys.intern(queue)  # NOTE: the lines share their queue names' strings
        instr: Instr | Event
        if queue == HOST:
            host = match_host(rest)
            if isinstance(host, str):
                raise self.fail(host)
            instr = host[0]
            self.check_host(host[0], host[1], core)
            sync_queue = queue.lower()
        elif queue in PIPES:
            known = self.checked.get((queue, rest))
            instr = known if known is not None else self._instr(queue, rest, core)
            sync_queue = queue.lower()
        elif queue in EVENTS:
            instr = self._event(queue, rest.split())
            sync_queue = "ctrl"
        else:
            raise self.fail(f"unknown queue '{clip(queue)}' (one of {', '.join(PIPES + EVENTS)})")
        if bar and not sync.strip():
            raise self.fail("empty synchronisation after '|'")
        waits, sets = self._sync(sync, sync_queue, core)
        return Line(queue, instr, waits, sets, self.lineno)

    def _instr(self, queue: str, body: str, core: tuple[int, int]) -> Instr:
        try:
            instr, declared = parse_instr(body)
        except ParseError as exc:
            raise self.fail(str(exc)) from None
        self.check_instr(queue, instr, declared)
        if isinstance(instr, NocCopy):
            self.check_noc(instr, declared, core)
        else:
            self.checked[queue, body] = instr
        return instr

    def _event(self, kind: str, tokens: list[str]) -> Event:
        if kind == "barrier":
            if tokens:
                raise self.fail(f"barrier takes no operands, got '{clip(tokens[0])}'")
            return Event(kind)
        known = self.regions.get(tokens[0]) if len(tokens) == 2 else None
        if known is not None:
            buf = match_buf(tokens[1])
            if buf is not None:  # NOTE: what match_event matches, its region checked before
                return Event(kind, *known, buf)
        region = match_event(tokens)
        if region is None:
            raise self.fail(f"expected '{kind} TIER[0xADDR+BYTES] b=ID'")
        event = Event(kind, *region)
        self.check_event(event)
        self.regions[tokens[0]] = region[:3]
        return event

    def _sync(
        self, sync: str, queue: str, core: tuple[int, int]
    ) -> tuple[tuple[Flag, ...], tuple[Flag, ...]]:
        tokens = sync.split()
        if not tokens:
            return (), ()
        if len(tokens) % 2:
            raise self.fail(f"expected 'wait|set SRC>DST#N' pairs, got '{clip(tokens[-1])}'")
        waits: list[Flag] = []
        sets: list[Flag] = []
        flag_sets, flag_waits = self.flag_sets, self.flag_waits
        for i in range(0, len(tokens), 2):
            verb, spec = tokens[i], tokens[i + 1]
            m = match_flag(spec, core)
            waiting = verb == "wait"
            if m is None or not (waiting or verb == "set"):
                raise self.fail(f"bad synchronisation '{clip(verb)} {clip(spec)}'")
            src, src_at, dst, dst_at, num = m
            if (dst_at if waiting else src_at) != core:
                raise self.fail(f"{verb} '{clip(spec)}' names another core for this core's queue")
            if src not in QUEUE_NAMES or dst not in QUEUE_NAMES:
                flag = Flag(src, dst, num, src_at, dst_at)
                raise self.fail(f"flag {flag}: unknown queue (one of {', '.join(QUEUE_NAMES)})")
            mine, other = (flag_waits, flag_sets) if waiting else (flag_sets, flag_waits)
            if (dst if waiting else src) != queue:
                raise self.fail(f"{verb} {Flag(src, dst, num, src_at, dst_at)} on queue {queue}")
            key = (src_at, dst_at, num)
            if key in mine:
                raise self.fail(f"flag #{num} {verb} twice (first at line {mine[key][1]})")
            # NOTE: a flag's two lines share one Flag (its key holds the ends' cores and number)
            known = other.get(key)
            if known is not None and known[0].src == src and known[0].dst == dst:
                flag = known[0]
            else:
                flag = Flag(src, dst, num, src_at, dst_at)
                if known is not None:
                    raise self.fail(f"flag {flag} does not match {known[0]} at line {known[1]}")
            mine[key] = (flag, self.lineno)
            (waits if waiting else sets).append(flag)
        return tuple(waits), tuple(sets)
