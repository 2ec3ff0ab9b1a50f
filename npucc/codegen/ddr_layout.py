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


def build_image(program: TiledProgram, layout: DdrLayout) -> bytearray:
    """The const image: every const tensor's bytes (of the target's storage type, rounded to
    nearest even from float32) at its address, zero padding between.

    NOTE: filled tensor by tensor, each const whose data already holds the storage type then
    reading its values from the image (a read-only view, the same values): its own array is
    freed as soon as it is packed, so the weights and the image are not held at once
    (VGG-19: 548 MB less at codegen's peak).
    """
    storage = np.dtype(NUMPY_DTYPES[program.target.dtype]).newbyteorder("<")
    image = bytearray(layout.image_size)
    for t in program.tensors.values():
        if t.role == "const":
            assert t.data is not None
            packed = np.frombuffer(image, storage, t.data.size, layout.addr[t.key])
            with np.errstate(over="ignore"):  # beyond float16's range: +-inf (IEEE rounding)
                packed[...] = t.data.reshape(-1)  # NOTE: no temporary (a bytearray slice makes one)
            if t.data.dtype == storage:
                packed.flags.writeable = False
                t.data = packed.reshape(t.data.shape)
    return image


def _round_up(n: int, align: int) -> int:
    return max(align, -(-n // align) * align)
