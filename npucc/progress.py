"""Progress on stderr: bars (rich) on a terminal, one line per stage elsewhere, none with --quiet.

The CLI opens `reporting(mode(quiet))` around a command. A command's stages (each compile
pass, the interpreter, ...) run inside `stage(name)`: outside a terminal each prints one line,
`npucc: NAME 1.23 s`, when it ends (once its stages have used two CPU seconds: a short
command, and so an error found early, prints none). Long loops anywhere below ask for a bar with
`task(description, total)`, which yields None when no bars are shown, and update it every
`EVERY` steps, so the check costs one comparison per step:

    with progress.task("interpret", len(steps)) as bar:
        for i, step in enumerate(steps, 1):
            ...
            if bar is not None and i % progress.EVERY == 0:
                bar.update(i)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

EVERY = 1024  # steps between updates of a loop's bar

_active: list[Progress] = []  # the bars of the running command, if shown
_lines: list[_StageLines] = []  # where stage lines go, while a command reports them
DELAY = 2.0  # CPU seconds a command runs before its stage lines show (NPUCC_PROGRESS_DELAY)


@dataclass(slots=True)
class _StageLines:
    """A command's stage lines: held until its stages have used `delay` CPU seconds, then
    written as they come (each line gives its stage's wall-clock seconds).

    NOTE: like git's delayed progress, a short command prints none, so an error found early
    stays one `npucc: error:` line. The clock is the command thread's CPU time from its first
    stage on: not wall time, so that a loaded machine does not make a short command print them;
    not the process's, so that other threads (a library's thread pool) do not; not from the
    command's start, so that importing the compiler (slow on a fresh install, while Python
    writes its bytecode caches) does not. Once the delay has passed the held lines go out first.
    """

    out: TextIO
    delay: float
    start: float | None = None  # the thread's CPU clock when the first stage began
    held: list[str] | None = field(default_factory=list)  # None once they are written

    def begin(self) -> None:
        """A stage begins: the first one starts the delay's clock."""
        if self.start is None:
            self.start = time.thread_time()

    def add(self, line: str) -> None:
        """A finished stage's line: held, or written with the ones held before it."""
        if self.held is not None:
            self.held.append(line)
            assert self.start is not None  # NOTE: every added line's stage began
            if time.thread_time() - self.start < self.delay:
                return
            line, self.held = "".join(self.held), None
        self.out.write(line)
        self.out.flush()


def silence() -> None:
    """Show nothing more from this process (a forked worker): forget the bars and stage lines
    it inherited from the command that shows them."""
    _active.clear()
    _lines.clear()


def progress_delay() -> float:
    """The delay before stage lines show: NPUCC_PROGRESS_DELAY CPU seconds, default DELAY."""
    try:
        return max(0.0, float(os.environ.get("NPUCC_PROGRESS_DELAY", DELAY)))
    except ValueError:
        return DELAY


def mode(quiet: bool = False, stream: TextIO | None = None) -> str:
    """How a command reports progress: "off" when `quiet`, else "bars" when `stream` (default
    stderr) is a terminal and "lines" when it is not."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return "off"
    return "bars" if stream.isatty() else "lines"


def should_show(quiet: bool = False, stream: TextIO | None = None) -> bool:
    """Bars show unless `quiet`, and only when `stream` (default stderr) is a terminal."""
    return mode(quiet, stream) == "bars"


@contextmanager
def reporting(
    how: str, console: Console | None = None, out: TextIO | None = None
) -> Iterator[None]:
    """Report the enclosed command's progress as `how` (a `mode`): bars on `console`, stage
    lines on `out` (default stderr) once the command has run `progress_delay()` seconds, or
    nothing."""
    if how == "bars":
        with bars(True, console):
            yield
    elif how == "lines" and not _lines:
        _lines.append(_StageLines(sys.stderr if out is None else out, progress_delay()))
        try:
            yield
        finally:
            _lines.pop()
    else:
        yield


@contextmanager
def stage(name: str) -> Iterator[None]:
    """One stage of a command; while stage lines are reported, its line once it ends."""
    if not _lines:
        yield
        return
    _lines[-1].begin()
    start = time.perf_counter()
    yield
    _lines[-1].add(f"npucc: {name} {time.perf_counter() - start:.2f} s\n")


@contextmanager
def bars(show: bool, console: Console | None = None) -> Iterator[None]:
    """Show progress bars (on `console`, default stderr) for the enclosed work when `show`."""
    if not show or _active:
        yield
        return
    # NOTE: deferred: rich (~2.7 MB of modules) is imported only when bars show
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
        transient=True,
        auto_refresh=False,  # NOTE: no refresh thread: a compile forks only without threads
    )
    with progress:
        _active.append(progress)
        try:
            yield
        finally:
            _active.pop()


@dataclass(slots=True)
class Bar:
    """One task's bar; `update` moves it."""

    progress: Progress
    id: TaskID

    def update(self, completed: int, description: str | None = None) -> None:
        """Set the number of finished steps (and optionally the description); shown at once."""
        if description is None:
            self.progress.update(self.id, completed=completed)
        else:
            self.progress.update(self.id, completed=completed, description=description)
        self.progress.refresh()


@contextmanager
def task(description: str, total: int) -> Iterator[Bar | None]:
    """A bar for one loop of `total` steps while bars are shown, else None."""
    if not _active:
        yield None
        return
    progress = _active[-1]
    task_id = progress.add_task(description, total=total)
    try:
        yield Bar(progress, task_id)
    finally:
        progress.remove_task(task_id)
