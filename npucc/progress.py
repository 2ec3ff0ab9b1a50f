"""Progress on stderr: bars (rich) on a terminal, one line per stage elsewhere, none with --quiet.

The CLI opens `reporting(mode(quiet))` around a command. A command's stages (each compile
pass, the interpreter, ...) run inside `stage(name)`: outside a terminal each prints one line,
`npucc: NAME 1.23 s`, when it ends. Long loops anywhere below ask for a bar with
`task(description, total)`, which yields None when no bars are shown, and update it every
`EVERY` steps, so the check costs one comparison per step:

    with progress.task("interpret", len(steps)) as bar:
        for i, step in enumerate(steps, 1):
            ...
            if bar is not None and i % progress.EVERY == 0:
                bar.update(i)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

EVERY = 1024  # steps between updates of a loop's bar

_active: list[Progress] = []  # the bars of the running command, if shown
_lines: list[TextIO] = []  # where stage lines go, while a command reports them


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
    lines on `out` (default stderr), or nothing."""
    if how == "bars":
        with bars(True, console):
            yield
    elif how == "lines" and not _lines:
        _lines.append(sys.stderr if out is None else out)
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
    start = time.perf_counter()
    yield
    out = _lines[-1]
    out.write(f"npucc: {name} {time.perf_counter() - start:.2f} s\n")
    out.flush()


@contextmanager
def bars(show: bool, console: Console | None = None) -> Iterator[None]:
    """Show progress bars (on `console`, default stderr) for the enclosed work when `show`."""
    if not show or _active:
        yield
        return
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
        transient=True,
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
        """Set the number of finished steps (and optionally the description, shown at once)."""
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
