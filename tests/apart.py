"""Run a whole-network test's body in a fresh interpreter, so the pytest worker stays lean."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def run_apart(body: Callable[..., None], *args: Any) -> None:
    """Call `body(*args)` in a new interpreter (multiprocessing's spawn); what it raises is
    raised here. `body` is a module-level function of an importable (test) module.

    NOTE: a whole network's program, run and onnxruntime session (VGG-19: 1.7 to 2.3 GB) then
    never sit in the worker that runs the rest of the suite, nor the heap they leave fragmented
    behind them (VGG-19's check left its worker 480 MB larger), which the next network's test
    would add its own peak to.
    """
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(body, args)
