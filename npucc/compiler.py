"""The compile pipeline and the `Program` it returns (the Python API behind the CLI)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import npucc.backend.lower  # noqa: F401  (registers lower-tiles)
import npucc.backend.schedule.schedule_pass  # noqa: F401  (registers schedule)
import npucc.codegen.emit  # noqa: F401  (registers codegen)
from npucc.frontend import FRONTEND_PIPELINE
from npucc.passes import PASSES, CompileContext, Pass, PassManager
from npucc.target import Target, load_target

FRONTEND_PASSES = (
    "import-onnx",
    "fold-constants",
    "fold-batchnorm",
    "fuse-activations",
    "drop-identity",
)
BACKEND_PASSES = ("lower-tiles", "schedule", "codegen")
SCHEDULES = ("original",)


def pipeline(schedule: str = "original") -> list[Pass]:
    """The pass instances of a full compile, in order."""
    passes: list[Pass] = [PASSES[name]() for name in (*FRONTEND_PIPELINE, *BACKEND_PASSES)]
    for p in passes:
        if p.name == "schedule":
            p.method = schedule  # type: ignore[attr-defined]
    return passes


@dataclass
class Program:
    """A compiled model: the command stream, its const image, and compile statistics."""

    stream: str  # the command stream text
    image: bytes  # weights and constants, loaded at DDR address 0
    target: Target
    inputs: dict[str, tuple[int, ...]]  # model input name -> shape
    outputs: dict[str, tuple[int, ...]]  # model output name -> shape
    stats: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write PATH and PATH.bin, each through a temporary file renamed into place."""
        path = Path(path)
        _atomic_write(Path(f"{path}.bin"), self.image)
        _atomic_write(path, self.stream.encode())

    def execute(self, inputs: dict[str, np.ndarray], check: bool = True) -> Any:
        """Run the stream in the interpreter; returns its full result (outputs, cycles, ...)."""
        from npucc.interp import parse_stream, run_stream

        stream = parse_stream(self.stream, "<program>")
        return run_stream(stream, self.image, inputs, check=check)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the stream in the interpreter and return the model's outputs by name."""
        return dict(self.execute(inputs).outputs)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def compile(
    model: str | os.PathLike[str] | onnx.ModelProto,
    target: str | os.PathLike[str] | Target = "davinci-core",
    schedule: str = "original",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    *,
    print_before: frozenset[str] = frozenset(),
    print_after: frozenset[str] = frozenset(),
    print_after_all: bool = False,
    dump_dir: str | os.PathLike[str] | None = None,
    on_pass: Callable[[str], None] | None = None,
) -> Program:
    """Compile an ONNX model (path or ModelProto) for `target` with the `schedule` method."""
    tgt = target if isinstance(target, Target) else load_target(target)
    ctx = CompileContext(tgt, {"input_shapes": dict(input_shapes or {}), "schedule": schedule})
    manager = PassManager(
        pipeline(schedule),
        print_before=print_before,
        print_after=print_after,
        print_after_all=print_after_all,
        dump_dir=Path(dump_dir) if dump_dir is not None else None,
        on_pass=on_pass,
    )
    source = model if isinstance(model, onnx.ModelProto) else Path(model)
    generated = manager.run(source, ctx)
    return Program(
        generated.stream, generated.image, tgt, generated.inputs, generated.outputs, ctx.stats
    )
