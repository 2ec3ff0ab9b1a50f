"""Text form of the graph IR: MLIR-generic-like, one line per input, constant, layer and output.

Graph.to_text (npucc.ir.graph) prints it; graph_from_text here parses it back:

    graph "main" opset=13 {
      input %"x" : f32[1,3,32,32]
      const %"w" : f32[8,3,3,3] sha256=9f86d0...
      %"y" = conv2d(%"x", %"w", none) {group = 1, pads = [1, 1, 1, 1]} : f32[1,8,32,32] loc("c0")
      output %"y"
    }

Names are JSON strings (ASCII-escaped, so any name fits on one line); `none` is an absent
optional input; attributes are printed in sorted key order with exact float reprs (`inf`, `nan`
included), lists as `[a, b]` (parsed back as tuples) and arrays as `dense<f32[2]>[0.5, 1.0]`.
Constant data is not printed: parsing makes zero-filled arrays that remember the digest, so
printing a parsed graph reproduces the text exactly.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import HOST_INTS, NUMPY_DTYPES, zero_data
from npucc.ir.graph import Graph, Layer, Tensor

_TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:[^"\\]|\\.)*")
    |(?P<num>-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?![\w.]))
    |(?P<id>[\w.]+)
    |(?P<punct>[%=:,(){}\[\]<>]))""",
    re.VERBOSE,
)


class _Line:
    """Token cursor over one line of graph text."""

    __slots__ = ("tokens", "pos", "lineno")

    def __init__(self, text: str, lineno: int) -> None:
        self.lineno = lineno
        self.tokens: list[tuple[str, str]] = []
        pos, end = 0, len(text.rstrip())
        while pos < end:
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise self.error(f"unexpected text {text[pos:].strip()[:20]!r}")
            kind = m.lastgroup
            assert kind is not None
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.pos = 0

    def error(self, message: str) -> NpuccError:
        return NpuccError(f"graph text line {self.lineno}: {message}")

    def peek(self) -> str:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else ""

    def take(self, kind: str | None = None, text: str | None = None) -> str:
        if self.pos >= len(self.tokens):
            raise self.error(f"expected {text or kind}, found end of line")
        k, v = self.tokens[self.pos]
        if (kind is not None and k != kind) or (text is not None and v != text):
            raise self.error(f"expected {text or kind}, found {v!r}")
        self.pos += 1
        return v

    def accept(self, text: str) -> bool:
        if self.peek() == text and self.tokens[self.pos][0] != "str":
            self.pos += 1
            return True
        return False

    def done(self) -> None:
        if self.pos != len(self.tokens):
            raise self.error(f"unexpected {self.peek()!r}")

    def string(self) -> str:
        return json.loads(self.take("str"))

    def ref(self) -> str:
        if self.accept("none"):
            return ""
        self.take("punct", "%")
        return self.string()

    def type(self) -> tuple[str, tuple[int, ...]]:
        dtype = self.take("id")
        if dtype not in NUMPY_DTYPES and dtype not in HOST_INTS:
            raise self.error(f"unknown element type {dtype!r}")
        self.take("punct", "[")
        dims: list[int] = []
        while not self.accept("]"):
            if dims:
                self.take("punct", ",")
            dims.append(int(self.take("num")))
        return dtype, tuple(dims)

    def value(self) -> Any:
        kind, text = self.tokens[self.pos] if self.pos < len(self.tokens) else ("", "")
        if kind == "str":
            return self.string()
        if kind == "num":
            self.pos += 1
            is_float = any(c in text for c in ".eE") or text.lstrip("-") in ("inf", "nan")
            return float(text) if is_float else int(text)
        if self.accept("true") or self.accept("false"):
            return text == "true"
        if self.accept("["):
            items: list[Any] = []
            while not self.accept("]"):
                if items:
                    self.take("punct", ",")
                items.append(self.value())
            return tuple(items)
        if self.accept("dense"):
            self.take("punct", "<")
            dtype, shape = self.type()
            self.take("punct", ">")
            flat = self.value()
            return np.array(flat, dtype=NUMPY_DTYPES[dtype]).reshape(shape)
        raise self.error(f"expected an attribute value, found {text!r}")

    def attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        if not self.accept("{"):
            return attrs
        while not self.accept("}"):
            if attrs:
                self.take("punct", ",")
            key = self.string() if self.tokens[self.pos][0] == "str" else self.take("id")
            self.take("punct", "=")
            attrs[key] = self.value()
        return attrs


def _parse_line(g: Graph, line: _Line) -> None:
    head = line.peek()
    if line.accept("input"):
        name = line.ref()
        line.take("punct", ":")
        dtype, shape = line.type()
        g.add_tensor(Tensor(name, shape, dtype))
        g.inputs.append(name)
    elif line.accept("const"):
        name = line.ref()
        line.take("punct", ":")
        dtype, shape = line.type()
        line.take("id", "sha256")
        line.take("punct", "=")
        digest = line.take()
        g.add_tensor(Tensor(name, shape, dtype, zero_data(dtype, shape, digest)))
    elif line.accept("output"):
        g.outputs.append(line.ref())
    elif head == "%":
        outs = [line.ref()]
        while line.accept(","):
            outs.append(line.ref())
        line.take("punct", "=")
        op = line.take("id")
        line.take("punct", "(")
        ins: list[str] = []
        if not line.accept(")"):
            ins.append(line.ref())
            while line.accept(","):
                ins.append(line.ref())
            line.take("punct", ")")
        attrs = line.attrs()
        line.take("punct", ":")
        for i, out in enumerate(outs):
            if i:
                line.take("punct", ",")
            dtype, shape = line.type()
            g.add_tensor(Tensor(out, shape, dtype))
        line.take("id", "loc")
        line.take("punct", "(")
        name = line.string()
        line.take("punct", ")")
        g.add_layer(Layer(name, op, ins, outs, attrs))
    else:
        raise line.error(f"unexpected {head!r}")
    line.done()


def graph_from_text(text: str) -> Graph:
    """Parse the text form back into a Graph (constants zero-filled); NpuccError on bad text."""
    lines = [(i, s) for i, s in enumerate(text.split("\n"), start=1) if s.strip()]
    if not lines:
        raise NpuccError("graph text line 1: empty text")
    first = _Line(lines[0][1], lines[0][0])
    first.take("id", "graph")
    g = Graph(first.string())
    first.take("id", "opset")
    first.take("punct", "=")
    g.opset = int(first.take("num"))
    first.take("punct", "{")
    first.done()
    last = _Line(lines[-1][1], lines[-1][0])
    last.take("punct", "}")
    last.done()
    for lineno, s in lines[1:-1]:
        try:
            _parse_line(g, _Line(s, lineno))
        except ValueError as exc:  # duplicate tensor, bad dimension
            raise NpuccError(f"graph text line {lineno}: {exc}") from None
    try:
        g.verify()
    except NpuccError as exc:
        raise NpuccError(f"graph text: {exc}") from None
    return g
