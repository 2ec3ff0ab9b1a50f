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
import npucc.backend.planner  # noqa: F401  (registers hypercut)
import npucc.backend.schedule.schedule_pass  # noqa: F401  (registers schedule)
import npucc.codegen.emit  # noqa: F401  (registers codegen)
from npucc import progress
from npucc.errors import NpuccError
from npucc.frontend import FRONTEND_PIPELINE
from npucc.passes import PASSES, CompileContext, Pass, PassManager
from npucc.target import Target, load_target

BACKEND_PASSES = ("hypercut", "lower-tiles", "schedule", "codegen")
LEVEL_PASSES = {
    "graph": FRONTEND_PIPELINE[-1],
    "tiled": "lower-tiles",
    "schedule": "schedule",
    "cmd": "codegen",
}


def pipeline(schedule: str = "dan") -> list[Pass]:
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

    def execute(
        self, inputs: dict[str, np.ndarray], check: bool = True, timing_only: bool = False
    ) -> Any:
        """Run the stream in the interpreter; returns its full result (outputs, cycles, ...).

        `timing_only` times every instruction without computing data (no outputs, no checks).
        """
        from npucc.interp import parse_stream, run_stream

        stream = parse_stream(self.stream, "<program>")
        return run_stream(stream, self.image, inputs, check=check, timing_only=timing_only)

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the stream in the interpreter and return the model's outputs by name."""
        return dict(self.execute(inputs).outputs)


def _atomic_write(path: Path, data: bytes) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise NpuccError(f"cannot write: {exc.strerror} ({path})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes it 0600
            f.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # disk full, output is a directory, ...
            raise NpuccError(f"cannot write: {exc.strerror} ({path})") from None
        raise


def _umask() -> int:
    """The process umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _manager(
    schedule: str,
    print_before: frozenset[str],
    print_after: frozenset[str],
    print_after_all: bool,
    dump_dir: str | os.PathLike[str] | None,
    on_pass: Callable[[str], None] | None,
    stop_after: str | None,
) -> PassManager:
    manager = PassManager(
        pipeline(schedule),
        print_before=print_before,
        print_after=print_after,
        print_after_all=print_after_all,
        dump_dir=Path(dump_dir) if dump_dir is not None else None,
        on_pass=on_pass,
        stop_after=stop_after,
    )
    manager.check_names()
    return manager


def _run(
    manager: PassManager,
    model: str | os.PathLike[str] | onnx.ModelProto,
    ctx: CompileContext,
) -> Any:
    """Run the manager's passes on `model`, with a progress bar over them when bars show."""
    names = [p.name for p in manager.passes]
    total = names.index(manager.stop_after) + 1 if manager.stop_after else len(names)
    hook = manager.on_pass
    with progress.task("compile", total) as bar:
        if bar is not None:
            done = iter(range(total))

            def on_pass(name: str) -> None:
                bar.update(next(done), description=f"compile: {name}")
                if hook is not None:
                    hook(name)

            manager.on_pass = on_pass
        source = model if isinstance(model, onnx.ModelProto) else Path(model)
        return manager.run(source, ctx)


def _context(
    target: str | os.PathLike[str] | Target,
    schedule: str,
    input_shapes: dict[str, tuple[int, ...]] | None,
    search: str,
    beam_width: int,
) -> CompileContext:
    tgt = target if isinstance(target, Target) else load_target(os.fspath(target))
    options = {
        "input_shapes": dict(input_shapes or {}),
        "schedule": schedule,
        "search": search,
        "beam_width": beam_width,
    }
    return CompileContext(tgt, options)


def batch_input_shapes(
    model: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: dict[str, tuple[int, ...]] | None,
    batch: int | None,
) -> dict[str, tuple[int, ...]]:
    """Input shapes with the leading dimension of every other input fixed to `batch`.

    Only a symbolic leading dimension can be set; a static one must already equal `batch`.
    """
    shapes = dict(input_shapes or {})
    if batch is None:
        return shapes
    if batch <= 0:
        raise NpuccError(f"--batch must be positive, got {batch}")
    if isinstance(model, onnx.ModelProto):
        proto = model
    else:
        try:  # only the input declarations are needed: no external data is read
            proto = onnx.load(os.fspath(model), load_external_data=False)
        except Exception as exc:  # the frontend reports unreadable models properly
            raise NpuccError(f"cannot read model: {exc} ({model})") from None
    inits = {i.name for i in proto.graph.initializer}
    for value in proto.graph.input:
        if value.name in inits or value.name in shapes:
            continue
        dims = list(value.type.tensor_type.shape.dim)
        if not dims:
            continue
        if dims[0].dim_value not in (0, batch):
            raise NpuccError(
                f"input '{value.name}' has a static batch of {dims[0].dim_value}; --batch {batch}"
                " needs a symbolic batch dimension"
            )
        rest = [d.dim_value if d.HasField("dim_value") else -1 for d in dims[1:]]
        if any(d < 0 for d in rest):  # a static 0 (a zero-size input) is fine
            raise NpuccError(
                f"input '{value.name}' has symbolic dimensions besides the batch; "
                "give its shape with --input-shape"
            )
        shapes[value.name] = (batch, *rest)
    return shapes


def _compile(
    model: str | os.PathLike[str] | onnx.ModelProto,
    stop_after: str | None,
    target: str | os.PathLike[str] | Target,
    schedule: str,
    input_shapes: dict[str, tuple[int, ...]] | None,
    options: dict[str, Any],
) -> tuple[Any, CompileContext]:
    """Run the pipeline (up to `stop_after`, or all of it); the IR and the context."""
    shapes = batch_input_shapes(model, input_shapes, options.pop("batch", None))
    ctx = _context(
        target, schedule, shapes, options.pop("search", "hypercut"), options.pop("beam_width", 256)
    )
    manager = _manager(
        schedule,
        options.get("print_before", frozenset()),
        options.get("print_after", frozenset()),
        options.get("print_after_all", False),
        options.get("dump_dir"),
        options.get("on_pass"),
        stop_after,
    )
    return _run(manager, model, ctx), ctx


def compile(
    model: str | os.PathLike[str] | onnx.ModelProto,
    target: str | os.PathLike[str] | Target = "davinci-core",
    schedule: str = "dan",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    *,
    print_before: frozenset[str] = frozenset(),
    print_after: frozenset[str] = frozenset(),
    print_after_all: bool = False,
    dump_dir: str | os.PathLike[str] | None = None,
    on_pass: Callable[[str], None] | None = None,
    search: str = "hypercut",
    beam_width: int = 256,
    batch: int | None = None,
) -> Program:
    """Compile an ONNX model (path or ModelProto) for `target` with the `schedule` method.

    On a mesh target, `search` (hypercut, sa, layer-sequential, layer-pipelined) plans which
    layers run when and on which cores; `beam_width` is HyperCut's beam. `batch` fixes the
    symbolic batch dimension of every input (the mesh plan is made for that graph).
    """
    options = dict(locals())
    for name in ("model", "target", "schedule", "input_shapes"):
        options.pop(name)
    generated, ctx = _compile(model, None, target, schedule, input_shapes, options)
    return Program(
        generated.stream,
        generated.image,
        ctx.target,
        generated.inputs,
        generated.outputs,
        ctx.stats,
    )


def compile_until(
    model: str | os.PathLike[str] | onnx.ModelProto,
    stop_after: str,
    target: str | os.PathLike[str] | Target = "davinci-core",
    schedule: str = "dan",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    *,
    print_before: frozenset[str] = frozenset(),
    print_after: frozenset[str] = frozenset(),
    print_after_all: bool = False,
    dump_dir: str | os.PathLike[str] | None = None,
    on_pass: Callable[[str], None] | None = None,
    search: str = "hypercut",
    beam_width: int = 256,
    batch: int | None = None,
) -> Any:
    """Run the pipeline up to and including pass `stop_after`; returns the IR it produced.

    The IR is a `Graph` after a frontend pass, a `TiledProgram` after `lower-tiles`, a
    `ScheduledProgram` after `schedule` and a `Generated` stream after `codegen`; each has
    `to_text()`, and `npucc.ir.formats.render(ir, "json" | "dot")` gives the other formats.
    """
    options = dict(locals())
    for name in ("model", "stop_after", "target", "schedule", "input_shapes"):
        options.pop(name)
    return _compile(model, stop_after, target, schedule, input_shapes, options)[0]


def level_pass(level: str) -> str:
    """The pass whose output is the IR at `level` (graph, tiled, schedule, cmd)."""
    if level not in LEVEL_PASSES:
        raise NpuccError(f"unknown IR level '{level}' (one of {', '.join(LEVEL_PASSES)})")
    return LEVEL_PASSES[level]
