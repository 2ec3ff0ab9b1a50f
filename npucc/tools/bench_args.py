"""Argument checks shared by the `npucc bench` commands: names from a known set, output paths."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from npucc.errors import NpuccError


def choose(text: str, known: Collection[str], what: str) -> list[str]:
    """The comma-separated names of `text`, each one of `known` (else a one-line error)."""
    names = [n for n in text.split(",") if n]
    for name in names:
        if name not in known:
            raise NpuccError(f"unknown {what} '{name}' (one of {', '.join(known)})")
    if not names:
        raise NpuccError(f"no {what} given")
    return names


def check_output_dir(path: Path) -> None:
    """Refuse an output file whose directory does not exist, before any work is done."""
    if not path.resolve().parent.is_dir():
        raise NpuccError(f"directory of the output file does not exist ({path})")
