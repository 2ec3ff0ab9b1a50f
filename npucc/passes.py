"""Passes, their registry and the pass manager (MLIR-style print-IR options).

A pass is a small class with a kebab-case `name`, its options as dataclass fields and one
`run(ir, ctx)` method returning the (possibly new) IR. The registry serves the CLI and the API;
the pass manager verifies the IR after every pass and prints or dumps it on request.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

from npucc.errors import NpuccError
from npucc.target import Target

PASSES: dict[str, type[Pass]] = {}


@dataclass(slots=True)
class CompileContext:
    """What every pass may read: the target, compile options, and collected statistics."""

    target: Target
    options: dict[str, Any] = field(default_factory=dict)  # e.g. input_shapes, schedule
    stats: dict[str, Any] = field(default_factory=dict)  # figures passes report


class Pass:
    """Base class: subclasses set `name` and implement `run`."""

    name: ClassVar[str]

    def run(self, ir: Any, ctx: CompileContext) -> Any:
        """Transform `ir` and return the result."""
        raise NotImplementedError


def register(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass known to the CLI and the API by its name."""
    if cls.name in PASSES:
        raise ValueError(f"pass {cls.name!r} registered twice")
    PASSES[cls.name] = cls
    return cls


def ir_text(ir: Any) -> str:
    """The text form of any IR level (each IR class provides `to_text`)."""
    to_text: Callable[[], str] | None = getattr(ir, "to_text", None)
    return to_text() if to_text is not None else repr(ir)


@dataclass(slots=True)
class PassManager:
    """Runs passes in order, verifying after each and serving the print-IR options."""

    passes: Sequence[Pass]
    print_before: frozenset[str] = frozenset()
    print_after: frozenset[str] = frozenset()
    print_after_all: bool = False
    dump_dir: Path | None = None
    out: TextIO = field(default_factory=lambda: sys.stderr)
    on_pass: Callable[[str], None] | None = None  # progress hook, called before each pass
    stop_after: str | None = None  # the last pass to run (default: all)

    def check_names(self) -> None:
        """NpuccError unless every pass named by an option is in the pipeline."""
        known = [p.name for p in self.passes]
        named = self.print_before | self.print_after
        if self.stop_after is not None:
            named |= {self.stop_after}
        unknown = sorted(named - set(known))
        if unknown:
            raise NpuccError(f"unknown pass '{unknown[0]}' (passes: {', '.join(known)})")

    def run(self, ir: Any, ctx: CompileContext) -> Any:
        """Run the passes (up to `stop_after`) on `ir`; returns the last IR."""
        self.check_names()
        for index, p in enumerate(self.passes, start=1):
            if p.name in self.print_before:
                self._print(f"IR Dump Before {p.name}", ir)
            if self.on_pass is not None:
                self.on_pass(p.name)
            ir = p.run(ir, ctx)
            verify = getattr(ir, "verify", None)
            if verify is not None:
                verify()
            if self.print_after_all or p.name in self.print_after:
                self._print(f"IR Dump After {p.name}", ir)
            if self.dump_dir is not None:
                self.dump_dir.mkdir(parents=True, exist_ok=True)
                (self.dump_dir / f"{index:02d}-{p.name}.txt").write_text(ir_text(ir))
            if p.name == self.stop_after:
                break
        return ir

    def _print(self, title: str, ir: Any) -> None:
        self.out.write(f"// -----// {title} //----- //\n{ir_text(ir)}\n")
