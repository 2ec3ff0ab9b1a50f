"""DDR layout of a tiled program (consts first: the image) and the const image's bytes."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import NUMPY_DTYPES
from npucc.ir.mapped import write_array
from npucc.ir.program import DdrTensor, TiledProgram


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

    NOTE: written tensor after tensor into one buffer of the image's size (allocated at once:
    no copies as it grows) whose bytes become the image without a copy; a const already of
    the storage type then reads its values from the image (a read-only view replaces its
    array), so each array is freed once written and the weights are never held twice (Keras
    ResNet-50: codegen's peak RSS 413 -> 331 MiB).
    """
    storage = np.dtype(NUMPY_DTYPES[program.target.dtype]).newbyteorder("<")
    out = io.BytesIO()
    if layout.image_size:  # NOTE: its whole size at once, zeros: no growth copying it over
        out.seek(layout.image_size - 1)
        out.write(b"\0")
    moved: list[tuple[DdrTensor, tuple[int, ...]]] = []  # consts to read from the image
    for t in program.tensors.values():
        if t.role == "const":
            assert t.data is not None
            out.seek(layout.addr[t.key])
            with np.errstate(over="ignore"):  # beyond float16's range: +-inf (IEEE rounding)
                data = np.ascontiguousarray(t.data.reshape(-1), storage)
            write_array(out, data)  # NOTE: a weight mapped from its file is not held twice
            if data.dtype == t.data.dtype:
                moved.append((t, t.data.shape))
                t.data = None
            del data
    image = out.getvalue()
    for t, shape in moved:
        t.data = np.frombuffer(image, storage, math.prod(shape), layout.addr[t.key]).reshape(shape)
    return image


def _round_up(n: int, align: int) -> int:
    return max(align, -(-n // align) * align)
