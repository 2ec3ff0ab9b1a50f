"""Forked worker processes for a compile's independent work (a mesh's per-core schedules, DAN's
tries on a big graph, a lowering's overlap trials): results come back in the order of the work,
so a compile writes the same bytes whatever the number of workers."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from npucc import progress
from npucc.errors import NpuccError

JOBS_ENV = "NPUCC_JOBS"  # the default number of worker processes, when set

# NOTE: a worker finds its function and items in these globals, copied into it by fork: neither
# is pickled, so they may hold anything (graphs, caches, closures); only results are pickled
_fn: Callable[[Any], Any] | None = None
_items: Sequence[Any] = ()


def default_jobs() -> int:
    """Worker processes a compile may use: $NPUCC_JOBS when set, else the CPUs this process may
    run on."""
    text = os.environ.get(JOBS_ENV, "").strip()
    if text:
        if not text.isdigit() or int(text) < 1:
            raise NpuccError(f"{JOBS_ENV} must be a positive integer, not '{text}'")
        return int(text)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # NOTE: not on every platform (macOS)
        return os.cpu_count() or 1


def forks(jobs: int, work: int) -> bool:
    """Whether `work` items at `jobs` workers go to forked processes: more than one of each, a
    platform that forks, not inside a pool's worker (no pools inside pools: a `multiprocessing`
    pool's workers, ours or a caller's, are daemonic and may not have children), and no other
    thread in this process.

    NOTE: a fork copies only the calling thread; a lock another thread held stays held in the
    child, so a caller's threads (a deployment script's, a server's) keep the work here
    (npucc's progress bars draw without a thread for this reason).
    """
    return (
        jobs > 1
        and work > 1
        and not multiprocessing.current_process().daemon
        and threading.active_count() == 1
        and "fork" in multiprocessing.get_all_start_methods()
    )


def _start_worker() -> None:
    """A new worker: no progress shown from it, and what it inherited kept out of the
    collector's walks (they would touch, and so copy, every inherited page)."""
    # NOTE: its copy of the parent's bars and stage lines would draw over the parent's: the
    # parent alone reports (through `fork_map`'s `done`)
    progress.silence()
    gc.freeze()


def _call_index(i: int) -> Any:
    assert _fn is not None
    return _fn(_items[i])


def fork_map(
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    jobs: int,
    weights: Sequence[float] | None = None,
    done: Callable[[int], None] | None = None,
    here: int | None = None,
) -> list[Any]:
    """[fn(item) for item in items], computed by up to `jobs` forked workers (in this process
    when `forks` says no); the heaviest items (by `weights`) are handed out first, and `done(i)`
    is called here as item i's result arrives. With `here`, item `here` is computed in this
    process while up to `jobs` - 1 workers compute the others: its result is not pickled.

    NOTE: `fn` must be a function of its item alone: a worker's side effects (caches it fills,
    objects it changes) are lost with it (those of item `here`'s call are kept).
    """
    global _fn, _items
    if not forks(jobs, len(items)):
        results = []
        for i, item in enumerate(items):
            results.append(fn(item))
            if done is not None:
                done(i)
        return results
    order = [i for i in range(len(items)) if i != here]
    if weights is not None:
        order.sort(key=lambda i: -weights[i])  # NOTE: stable: equal weights keep their order
    _fn, _items = fn, items
    out: list[Any] = [None] * len(items)
    try:
        context = multiprocessing.get_context("fork")
        workers = min(jobs if here is None else jobs - 1, len(order))
        with context.Pool(workers, initializer=_start_worker) as pool:
            running = pool.imap(_call_index, order)
            if here is not None:  # NOTE: after the fork: the workers never see its side effects
                out[here] = fn(items[here])
                if done is not None:
                    done(here)
            for i, result in zip(order, running, strict=True):
                out[i] = result
                if done is not None:
                    done(i)
    finally:
        _fn, _items = None, ()
    return out
