"""Passes and the pass manager (MLIR-style print-IR options).

A pass is a small frozen dataclass with a kebab-case `name`, the IR type it reads
(`input_ir`) and the one it returns (`output_ir`), its options as dataclass fields and one
`run(ir, ctx)` method. The pass manager checks each pass's IR types, verifies the IR after
every pass and prints or dumps it on request.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

from npucc import progress
from npucc.errors import InternalError, NpuccError
from npucc.gcpause import gc_paused, trim_heap
from npucc.ir.graph import Graph
from npucc.target import Target

IRType = type | tuple[type, ...]  # what isinstance accepts


@dataclass(slots=True)
class CompileContext:
    """What every pass may read besides its fields: the target, the statistics collected and
    the work passes share."""

    target: Target
    stats: dict[str, Any] = field(default_factory=dict)  # figures passes report
    # what the lowerings of one compile compute alike per layer signature (lower.memo.once):
    # the planner's profiles and the lowering share it (emptied after lower-tiles)
    memo: dict[Any, Any] = field(default_factory=dict)


class Pass:
    """Base class: subclasses are frozen dataclasses that set `name`, `input_ir`, `output_ir`
    and implement `run`; their options are their dataclass fields."""

    __slots__ = ()
    name: ClassVar[str]
    input_ir: ClassVar[IRType]
    output_ir: ClassVar[IRType]

    def run(self, ir: Any, ctx: CompileContext) -> Any:
        """Transform `ir` (an `input_ir`) and return the result (an `output_ir`)."""
        raise NotImplementedError


class GraphPass(Pass):
    """A rewrite of the graph IR: Graph in, Graph out."""

    __slots__ = ()
    input_ir: ClassVar[IRType] = Graph
    output_ir: ClassVar[IRType] = Graph


def ir_text(ir: Any) -> str:
    """The text form of any IR level (each IR class provides `to_text`)."""
    to_text: Callable[[], str] | None = getattr(ir, "to_text", None)
    return to_text() if to_text is not None else repr(ir)


def _type_names(types: IRType) -> str:
    return " | ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def check_ir(p: Pass, ir: Any, declared: IRType, role: str) -> None:
    """InternalError unless `ir` is of the type `p` declares for its `role` (input, output)."""
    if not isinstance(ir, declared):
        raise InternalError(
            f"pass '{p.name}' {role} {_type_names(declared)}, got {type(ir).__name__}"
        )


@dataclass(slots=True)
class PassManager:
    """Runs passes in order, checking their IR types, verifying after each pass and serving
    the print-IR options."""

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
        """Run the passes (up to `stop_after`) on `ir`; returns the last IR.

        NOTE: Python's cyclic collector is paused meanwhile (`gc_paused`): ResNet-50 leaves
        under a thousand objects in cycles, and full collections cost 1.3 of its 11 s.
        """
        self.check_names()
        with gc_paused():
            return self._run(ir, ctx)

    def _run(self, ir: Any, ctx: CompileContext) -> Any:
        for index, p in enumerate(self.passes, start=1):
            check_ir(p, ir, p.input_ir, "expects")
            if p.name in self.print_before:
                self._print(f"IR Dump Before {p.name}", ir)
            if self.on_pass is not None:
                self.on_pass(p.name)
            with progress.stage(p.name):
                ir = p.run(ir, ctx)
                check_ir(p, ir, p.output_ir, "should return")
                verify = getattr(ir, "verify", None)
                if verify is not None:
                    verify()
            trim_heap()
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
