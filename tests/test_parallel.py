"""Forked worker processes (npucc.parallel): results in the work's order, whatever the workers."""

from __future__ import annotations

import os

import pytest

from npucc import parallel, progress
from npucc.errors import NpuccError

_seen: list[int] = []


def _square_and_note(x: int) -> tuple[int, int]:
    _seen.append(x)  # NOTE: a side effect, lost with a worker
    return x * x, os.getpid()


def test_fork_map_keeps_the_order_of_the_work_and_forks():
    _seen.clear()
    done: list[int] = []
    weights = [1, 5, 3, 5, 0, 2]
    out = parallel.fork_map(_square_and_note, list(range(6)), 2, weights=weights, done=done.append)
    assert [v for v, _ in out] == [x * x for x in range(6)]
    assert sorted(done) == list(range(6))
    assert {pid for _, pid in out} - {os.getpid()}, "no item ran in a worker"
    assert os.getpid() not in {pid for _, pid in out}
    assert _seen == []  # the workers' side effects stay in them


def test_fork_map_with_one_job_runs_here_in_order():
    _seen.clear()
    done: list[int] = []
    out = parallel.fork_map(_square_and_note, [3, 1, 2], 1, done=done.append)
    assert out == [(9, os.getpid()), (1, os.getpid()), (4, os.getpid())]
    assert done == [0, 1, 2] and _seen == [3, 1, 2]


def _nested(x: int) -> bool:
    return parallel.forks(2, 2)


def test_no_pool_inside_a_worker():
    assert parallel.forks(2, 2)
    assert parallel.fork_map(_nested, [0, 1], 2) == [False, False]


def test_worker_errors_reach_the_caller():
    with pytest.raises(ZeroDivisionError):
        parallel.fork_map(lambda x: 1 // x, [1, 0, 2], 2)


def test_default_jobs(monkeypatch):
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    assert parallel.default_jobs() == 3
    monkeypatch.delenv(parallel.JOBS_ENV)
    assert parallel.default_jobs() >= 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(parallel.JOBS_ENV, bad)
        with pytest.raises(NpuccError, match=parallel.JOBS_ENV):
            parallel.default_jobs()


def _report(x: int) -> bool:
    """A stage and a bar in a worker: whether the bar shows."""
    with progress.stage(f"worker {x}"):
        pass
    with progress.task("work", 1) as bar:
        return bar is not None


def test_workers_show_no_progress(tmp_path, monkeypatch):
    """Only the parent reports: a worker's copies of its bars and stage lines stay silent."""
    from io import StringIO

    from rich.console import Console

    monkeypatch.setenv("NPUCC_PROGRESS_DELAY", "0")
    with open(tmp_path / "lines", "w") as out, progress.reporting("lines", out=out):
        assert parallel.fork_map(_report, [0, 1], 2) == [False, False]
        with progress.stage("parent"):
            pass
    text = (tmp_path / "lines").read_text()
    assert text.startswith("npucc: parent ") and "worker" not in text
    with progress.bars(True, Console(file=StringIO(), force_terminal=True)):
        assert parallel.fork_map(_report, [0, 1], 2) == [False, False]
        assert _report(2)  # the parent's own bar shows


def test_no_fork_while_another_thread_runs():
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not parallel.forks(2, 2)
        assert [pid for _, pid in parallel.fork_map(_square_and_note, [1, 2], 2)] == [
            os.getpid()
        ] * 2
    finally:
        stop.set()
        other.join()
    assert parallel.forks(2, 2)


def _forks_in_a_pool_worker(_: int) -> tuple[bool, list[int]]:
    return parallel.forks(2, 2), [pid for _, pid in parallel.fork_map(_square_and_note, [1, 2], 2)]


def test_no_fork_inside_a_callers_multiprocessing_pool():
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        forked, pids = pool.map(_forks_in_a_pool_worker, [0])[0]
    assert not forked and len(set(pids)) == 1 and os.getpid() not in pids
