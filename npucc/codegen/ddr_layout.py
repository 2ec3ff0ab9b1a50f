"""DDR layout of a tiled program (consts first: the image) and the const image's bytes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import NUMPY_DTYPES
from npucc.ir.program import TiledProgram


@dataclass(slots=True)
class DdrLayout:
    """Byte addresses of every DDR tensor; the image (consts) is loaded at address 0."""

    addr: dict[str, int] = field(default_factory=dict)  # key -> byte address
    image_size: int = 0  # bytes of the const image
    size: int = 0  # total DDR bytes used
    noc: dict[str, int] = field(default_factory=dict)  # on-chip key -> byte address in NOC


DDR_ALIGN = 64


def layout_ddr(program: TiledProgram, extra: dict[str, int] | None = None) -> DdrLayout:
    """Place consts first (the image), then inputs, then temps, then `extra` regions (bytes)."""
    layout = DdrLayout()
    eb = program.target.elem_bytes
    cursor = 0
    for role in ("const", "input", "temp"):
        for t in program.tensors.values():
            if t.role == role:
                layout.addr[t.key] = cursor
                cursor += _round_up(t.nbytes(eb), DDR_ALIGN)
        if role == "const":
            layout.image_size = cursor
    for key, nbytes in (extra or {}).items():
        layout.addr[key] = cursor
        cursor += _round_up(nbytes, DDR_ALIGN)
    noc = 0
    for t in program.tensors.values():
        if t.role == "onchip":
            layout.noc[t.key] = noc
            noc += _round_up(t.nbytes(eb), DDR_ALIGN)
    layout.size = max(cursor, DDR_ALIGN)
    if layout.size > program.target.memory.DDR:
        raise NpuccError(
            f"program needs {layout.size} bytes of DDR, target has {program.target.memory.DDR}"
        )
    return layout


def build_image(program: TiledProgram, layout: DdrLayout) -> bytes:
    """The const image: every const tensor's bytes (of the target's storage type, rounded to
    nearest even from float32) at its address, zero padding between.

    NOTE: joined from the tensors' own buffers where they hold the storage type already (one
    copy of the weights, not an image array and its bytes besides).
    """
    storage = np.dtype(NUMPY_DTYPES[program.target.dtype]).newbyteorder("<")
    consts = sorted(
        ((layout.addr[t.key], t.data) for t in program.tensors.values() if t.role == "const"),
        key=lambda c: c[0],
    )
    pieces: list[bytes | memoryview] = []
    cursor = 0
    for start, data in consts:
        assert data is not None and start >= cursor, f"const at {start} overlaps (at {cursor})"
        with np.errstate(over="ignore"):  # beyond float16's range: +-inf (IEEE rounding)
            values = data.reshape(-1).astype(storage, copy=False)  # converted, or itself
        pieces += [bytes(start - cursor), values.data]
        cursor = start + values.nbytes
    pieces.append(bytes(layout.image_size - cursor))
    return b"".join(pieces)


def _round_up(n: int, align: int) -> int:
    return max(align, -(-n // align) * align)
