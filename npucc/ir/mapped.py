"""Constant arrays mapped read-only from a file, and copying one out without holding its pages.

A big weight whose ONNX external data numpy reads as it lies is mapped from its file, not read
(`map_array`): its pages come into memory only when something reads them, and `write_array`
(codegen copying the weights into the image) gives each slice's pages back once copied, so a
weight is never in memory twice (VGG-19's fc6: 411 MB).
"""

from __future__ import annotations

import mmap
from typing import BinaryIO

import numpy as np

COPY_CHUNK = 1 << 24  # bytes `write_array` copies between giving pages back


def map_array(path: str, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The read-only array of `shape` whose values lie at byte `offset` of the file `path`, or
    None where the file is too short."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        f.seek(0, 2)
        if nbytes == 0 or f.tell() < offset + nbytes:
            return None
        region = mmap.mmap(f.fileno(), offset + nbytes - start, access=mmap.ACCESS_READ,
                           offset=start)  # fmt: skip
    count = nbytes // dtype.itemsize
    return np.frombuffer(region, dtype, count, offset - start).reshape(shape)


def _mapping(array: np.ndarray) -> mmap.mmap | None:
    """The file mapping `array`'s memory lies in, if any."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def write_array(out: BinaryIO, array: np.ndarray) -> None:
    """Write a C-contiguous array's bytes to `out`; a file-mapped one's pages go back to the
    OS after each COPY_CHUNK bytes (they are read again from the file if needed)."""
    data = array.data.cast("B")
    region = _mapping(array)
    if region is None or not hasattr(region, "madvise"):
        out.write(data)
        return
    first = array.ctypes.data - np.frombuffer(region, np.uint8).ctypes.data
    given = 0  # bytes of the mapping given back so far (whole pages)
    for at in range(0, len(data), COPY_CHUNK):
        out.write(data[at : at + COPY_CHUNK])
        done = first + min(at + COPY_CHUNK, len(data))
        done -= done % mmap.PAGESIZE
        if done > given:
            region.madvise(mmap.MADV_DONTNEED, given, done - given)
            given = done
