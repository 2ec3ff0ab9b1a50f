"""Progress bars (rich) on stderr, shown only on a terminal and silenced by `--quiet`.

The CLI opens `bars(show)` around a command; long loops anywhere below it ask for a bar with
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


def should_show(quiet: bool = False, stream: TextIO | None = None) -> bool:
    """Bars show unless `quiet`, and only when `stream` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    return not quiet and stream.isatty()


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
        """Set the number of finished steps (and optionally the description)."""
        if description is None:
            self.progress.update(self.id, completed=completed)
        else:
            self.progress.update(self.id, completed=completed, description=description)


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
