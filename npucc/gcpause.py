"""Pausing Python's cyclic garbage collector around work that builds many long-lived objects,
and giving freed memory back to the OS between big stages."""

from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import cast


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (re-enabled after, if it was enabled).

    NOTE: the compiler's passes and the schedulers build millions of long-lived objects and
    leave few cycles, and each full collection would traverse them all; reference counting
    still frees everything else at once. On leaving, what the block built is moved to the
    oldest generation untraversed (`gc.freeze` then `gc.unfreeze`), so the collections right
    after it do not walk it all (Keras ResNet-50's compile: a full one, ~0.2 s, in its
    summary); cyclic garbage among it is still found by the next full collection.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def release_memory() -> None:
    """Give the memory freed so far back to the OS: a full collection (it also empties
    Python's free lists) and, where the C library is glibc, `malloc_trim(0)` (which returns
    the free pages inside its heap, not only those at its top).

    NOTE: `npucc check` calls it between its big stages: after the compile (VGG-19: the
    lowering's freed 160 MiB) and after the run, before onnxruntime (190 MiB).
    """
    gc.collect()
    trim_heap()


def trim_heap() -> None:
    """Where the C library is glibc, `malloc_trim(0)`: the free pages inside its heap, not only
    those at its top, go back to the OS.

    NOTE: the pass manager calls it after each pass: what a pass freed (a lowering's trials,
    the scheduler's working state) is scattered through the heap between live objects, where
    a later big block (codegen's image) cannot reuse it; given back, it no longer counts in
    the peak RSS (MobileNet v2's compile: 130 -> 123 MiB).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return cast(Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (AttributeError, OSError):  # musl, or no C library to load
        return None
