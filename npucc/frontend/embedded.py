"""Where each initializer's `raw_data` lies in an ONNX model file (protobuf wire format).

A model whose weights are stored in the file itself (no external data) need not be read and
parsed whole: its big initializers can be mapped from the file, as external data is
(npucc.ir.mapped), their pages coming into memory only when read (codegen gives them back as it
copies them into the image), and the rest parsed from the file's bytes without their raw data.
This walks the file's ModelProto.graph.initializer messages without parsing them, reading only
the bytes of their small fields (name, dims, type) and skipping over every payload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO, NamedTuple

# field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer, TensorProto's fields
_GRAPH, _INITIALIZER = 7, 5
_DIMS, _DATA_TYPE, _NAME, _RAW_DATA = 1, 2, 8, 9
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_MAX_VARINT = 10  # bytes of the longest varint (a 64-bit value)


class RawData(NamedTuple):
    """One initializer as the file holds it: its name, dims, element type and where its
    `raw_data` bytes lie (offset from the file's start, length; None without raw data)."""

    name: str
    dims: tuple[int, ...]
    data_type: int
    raw: tuple[int, int] | None


class WireError(ValueError):
    """The bytes are not a protobuf message as the walk reads it."""


def _varint(buf: bytes, at: int) -> tuple[int, int]:
    """The varint at `buf[at:]` and the index after it."""
    value = shift = 0
    while at < len(buf):
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise WireError("truncated varint")


def _fields(f: BinaryIO, start: int, end: int) -> list[tuple[int, int, int, int, int, int]]:
    """The fields of the message in bytes [start, end) of `f`: (number, wire type, value or
    payload offset, payload length, the field's first byte, the byte after it) each; a varint's
    or fixed field's payload length is 0."""
    out = []
    at = start
    while at < end:
        f.seek(at)
        head = f.read(2 * _MAX_VARINT)
        key, used = _varint(head, 0)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, used = _varint(head, used)
            out.append((number, wire, value, 0, at, at + used))
            at += used
        elif wire == _BYTES:
            length, used = _varint(head, used)
            out.append((number, wire, at + used, length, at, at + used + length))
            at += used + length
        elif wire in (_FIXED64, _FIXED32):
            stop = at + used + (8 if wire == _FIXED64 else 4)
            out.append((number, wire, 0, 0, at, stop))
            at = stop
        else:  # groups: not in ONNX's messages
            raise WireError(f"wire type {wire}")
    if at != end:
        raise WireError("a field runs past its message")
    return out


def _read(f: BinaryIO, start: int, end: int) -> bytes:
    """Bytes [start, end) of `f`."""
    f.seek(start)
    return f.read(end - start)


def _encode_varint(value: int) -> bytes:
    """`value` (not negative) as a varint."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _message(number: int, body: bytes) -> bytes:
    """Field `number` holding the message `body` (its key, length and bytes)."""
    return _encode_varint(number << 3 | _BYTES) + _encode_varint(len(body)) + body


def _tensor(f: BinaryIO, start: int, end: int) -> RawData:
    """The TensorProto in bytes [start, end): its name, dims, type and raw data's place."""
    name, dims, data_type, raw = "", [], 0, None
    for number, wire, value, length, _, _ in _fields(f, start, end):
        if number == _NAME and wire == _BYTES:
            f.seek(value)
            name = f.read(length).decode("utf-8", errors="replace")
        elif number == _DIMS and wire == _VARINT:
            dims.append(value)
        elif number == _DIMS and wire == _BYTES:  # packed
            f.seek(value)
            packed, at = f.read(length), 0
            while at < length:
                dim, at = _varint(packed, at)
                dims.append(dim)
        elif number == _DATA_TYPE and wire == _VARINT:
            data_type = value
        elif number == _RAW_DATA and wire == _BYTES:
            raw = (value, length)  # NOTE: the last occurrence wins, as when parsed
    return RawData(name, tuple(d - (1 << 64) if d >= 1 << 63 else d for d in dims), data_type, raw)


def without_raw_data(f: BinaryIO, strip: Callable[[RawData], bool]) -> tuple[bytes, list[RawData]]:
    """The model file `f`'s bytes without the raw data of the initializers `strip` picks, and
    every initializer as the file holds it, in the order parsing gives them (WireError where
    the bytes are not a model as read here).

    NOTE: every other field's bytes are kept as they lie, the messages around a left-out raw
    data re-framed with their new lengths: parsed, the bytes give the model the whole file
    gives but for those initializers' raw_data (a singular field: each occurrence left out, it
    is unset). Only the bytes kept are read.
    """
    size = f.seek(0, 2)
    out, places = [], []
    for number, wire, graph, length, first, after in _fields(f, 0, size):
        if number != _GRAPH or wire != _BYTES:
            out.append(_read(f, first, after))
            continue
        body = []  # NOTE: the graph field may repeat (the messages merge): each kept apart
        for field, kind, tensor, nbytes, at, end in _fields(f, graph, graph + length):
            if field != _INITIALIZER or kind != _BYTES:
                body.append(_read(f, at, end))
                continue
            place = _tensor(f, tensor, tensor + nbytes)
            places.append(place)
            if place.raw is None or not strip(place):
                body.append(_read(f, at, end))
                continue
            kept = [
                _read(f, start, stop)
                for n, w, _, _, start, stop in _fields(f, tensor, tensor + nbytes)
                if (n, w) != (_RAW_DATA, _BYTES)
            ]
            body.append(_message(_INITIALIZER, b"".join(kept)))
        out.append(_message(_GRAPH, b"".join(body)))
    return b"".join(out), places
