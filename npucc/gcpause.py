"""Pausing Python's cyclic garbage collector around work that builds many long-lived objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (re-enabled after, if it was enabled).

    NOTE: the compiler's passes and the schedulers build millions of long-lived objects and
    leave few cycles, and each full collection would traverse them all; reference counting
    still frees everything else at once.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
