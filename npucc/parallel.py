"""Forked worker processes for a compile's independent work (each core's schedule, the prices of
a search round's plans): results come back in the order of the work, so a compile writes the same
bytes whatever the number of workers."""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable, Sequence
from typing import Any

from npucc import progress
from npucc.errors import NpuccError

JOBS_ENV = "NPUCC_JOBS"  # the default number of worker processes, when set

# NOTE: a worker finds its function (and `fork_map`'s items) in these globals, copied into it by
# fork: neither is pickled, so they may hold anything (graphs, caches, closures); only the
# items of `WorkerPool.map` and every result are pickled
_fn: Callable[[Any], Any] | None = None
_items: Sequence[Any] = ()
_in_worker = False


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
    platform that forks, and not already inside a worker (no pools inside pools)."""
    return (
        jobs > 1
        and work > 1
        and not _in_worker
        and "fork" in multiprocessing.get_all_start_methods()
    )


def _start_worker() -> None:
    """A new worker: no pools inside it, no progress shown from it, and what it inherited kept
    out of the collector's walks (they would touch, and so copy, every inherited page)."""
    global _in_worker
    _in_worker = True
    # NOTE: its copy of the parent's bars and stage lines would draw over the parent's: the
    # parent alone reports (through `fork_map`'s `done`)
    progress._active.clear()
    progress._lines.clear()
    gc.freeze()


def _call_index(i: int) -> Any:
    assert _fn is not None
    return _fn(_items[i])


def _call(item: Any) -> Any:
    assert _fn is not None
    return _fn(item)


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


class WorkerPool:
    """Workers forked once, each holding `fn` and whatever state it keeps (caches that fill across
    calls of `map`); each `map` pickles its items to them. In this process when `forks` says no."""

    def __init__(self, fn: Callable[[Any], Any], jobs: int) -> None:
        self.fn = fn
        self.jobs = jobs
        self._pool: Any = None

    def __enter__(self) -> WorkerPool:
        global _fn
        if forks(self.jobs, self.jobs):
            _fn = self.fn
            try:
                context = multiprocessing.get_context("fork")
                self._pool = context.Pool(self.jobs, initializer=_start_worker)
            finally:
                _fn = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def map(self, items: Sequence[Any], chunksize: int = 1) -> list[Any]:
        """[fn(item) for item in items], in their order.

        NOTE: `fn` must give the same answer for an item whatever it computed before (in the
        workers each sees only some of the items, in another order than this process would).
        """
        if self._pool is None or len(items) < 2:
            return [self.fn(item) for item in items]
        return list(self._pool.map(_call, items, chunksize=chunksize))
