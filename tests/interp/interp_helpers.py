"""Helpers to write small command streams by hand in the interpreter tests."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from npucc.interp import RunResult, run_stream
from npucc.ir.stream_parse import parse_stream
from npucc.target import Target, load_target

TARGET = load_target("davinci-core")
FILE = "t.cmd"


def stream_text(
    tensors: list[tuple[str, str, int, tuple[int, ...]]],
    body: str,
    image: bytes = b"",
    ddr_size: int = 1 << 16,
    target: Target = TARGET,
    cores: dict[tuple[int, int], str] | None = None,
) -> str:
    """A full stream: header with (kind, name, byte address, shape) tensors, one core `body`.

    `cores` maps (row, col) to a body instead, for several cores.
    """
    lines = [
        "npucc-stream 1",
        f"target {target.to_json()}",
        f"image size={len(image)} sha256={hashlib.sha256(image).hexdigest()}",
        f"ddr size={ddr_size}",
    ]
    for kind, name, addr, shape in tensors:
        nbytes = math.prod(shape) * 4
        dims = ",".join(map(str, shape))
        lines.append(f"tensor {kind} {json.dumps(name)} DDR[0x{addr:06x}+{nbytes}] f32[{dims}]")
    for (row, col), text in (cores or {(0, 0): body}).items():
        lines.append(f"core {row} {col}")
        lines += ["  " + line.strip() for line in text.strip().splitlines()]
        lines.append("end")
    return "\n".join(lines) + "\n"


def run_text(text: str, image: bytes = b"", inputs=None, **options) -> RunResult:
    """Parse and run stream text named FILE."""
    return run_stream(parse_stream(text, FILE), image, inputs or {}, **options)


def line_of(text: str, marker: str) -> int:
    """Line number of the first line containing marker."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return lineno
    raise AssertionError(marker)


def image_of(*arrays: np.ndarray) -> bytes:
    """Concatenated float32 bytes of arrays (the const image)."""
    return b"".join(np.asarray(a, np.float32).tobytes() for a in arrays)
