"""DDR layout of a tiled program (consts first: the image) and the const image's bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import NUMPY_DTYPES
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


def build_image(program: TiledProgram, layout: DdrLayout) -> bytearray:
    """The const image: every const tensor's bytes (of the target's storage type, rounded to
    nearest even from float32) at its address, zero padding between.

    NOTE: appended tensor by tensor (a preallocated image would be zero-filled, all its pages
    touched, at once), each const already of the storage type letting go of its own array
    once appended and then reading its values from the image (a read-only view, the same
    values): only the tensor being appended is held twice (VGG-19: its 548 MB of weights and
    the image at once came to 2,374 MiB at codegen; now its largest weight, 411 MB, twice).
    """
    storage = np.dtype(NUMPY_DTYPES[program.target.dtype]).newbyteorder("<")
    image = bytearray()
    packed: list[tuple[DdrTensor, tuple[int, ...]]] = []  # consts to read from the image
    for t in program.tensors.values():
        if t.role == "const":
            assert t.data is not None
            image += bytes(layout.addr[t.key] - len(image))
            with np.errstate(over="ignore"):  # beyond float16's range: +-inf (IEEE rounding)
                data = np.ascontiguousarray(t.data.reshape(-1), storage)
            image += data.data.cast("B")
            if t.data.dtype == storage:
                packed.append((t, t.data.shape))
                t.data = None  # its array goes now; the image holds its values
            del data
    image += bytes(layout.image_size - len(image))
    for t, shape in packed:
        view = np.frombuffer(image, storage, math.prod(shape), layout.addr[t.key])
        view.flags.writeable = False
        t.data = view.reshape(shape)
    return image


def _round_up(n: int, align: int) -> int:
    return max(align, -(-n // align) * align)
