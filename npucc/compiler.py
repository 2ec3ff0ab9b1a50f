"""The compile pipeline and the `Program` it returns (the Python API behind the CLI)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from npucc import progress
from npucc.backend.lower import LowerTiles
from npucc.backend.planner import HypercutPass
from npucc.backend.schedule.roofline import stream_roofline
from npucc.backend.schedule.schedule_pass import SchedulePass
from npucc.codegen.debug_map import host_op_name
from npucc.codegen.emit import CodegenPass
from npucc.errors import NpuccError
from npucc.frontend.onnx_import import read_model
from npucc.ir.isa import HostOp
from npucc.ir.stream import Stream, TensorSpec
from npucc.ir.stream_text import STREAM_TYPES
from npucc.options import CompileOptions
from npucc.parallel import default_jobs
from npucc.passes import CompileContext, Pass, PassManager
from npucc.summary import summarize
from npucc.target import Target, load_target
from npucc.transforms.graph_pipeline import frontend_passes

if TYPE_CHECKING:
    from npucc.interp.event_loop import RunResult

LEVEL_PASSES = {  # the IR level -> the pass whose output it is
    "graph": frontend_passes()[-1].name,
    "tiled": LowerTiles.name,
    "schedule": SchedulePass.name,
    "cmd": CodegenPass.name,
}


def backend_passes(options: CompileOptions) -> list[Pass]:
    """The backend's pass instances, in order, their fields from `options`."""
    jobs = default_jobs() if options.jobs is None else options.jobs
    return [
        HypercutPass(search=options.search, seed=options.seed, beam_width=options.beam_width),
        LowerTiles(jobs=jobs),
        SchedulePass(
            method=options.schedule,
            overlap_peak=options.overlap_peak,
            peak_floor=options.peak_floor,
            jobs=jobs,
        ),
        CodegenPass(debug_map=options.debug_map is not None),
    ]


def pipeline(options: CompileOptions) -> list[Pass]:
    """The pass instances of a full compile, in order, their fields from `options`.

    NOTE: `options.input_shapes` is taken as given; `batch` is applied to them before (see
    `batch_input_shapes`), since that needs the model.
    """
    return [*frontend_passes(options.input_shapes, options.fallback), *backend_passes(options)]


@dataclass
class Program:
    """A compiled model: the command stream, its const image, and compile statistics."""

    stream: str  # the command stream text
    image: bytes  # weights and constants, loaded at DDR address 0
    target: Target
    inputs: dict[str, TensorSpec]  # model input name -> shape (a tuple) with `.dtype`
    outputs: dict[str, TensorSpec]  # model output name -> shape (a tuple) with `.dtype`
    stats: dict[str, Any] = field(default_factory=dict)
    # NOTE: the (stream, image) pair the compile (or `load`) checked against each other; while
    # `stream` and `image` are still those objects `execute` does not hash the image again
    # (VGG-19: 0.45 CPU s); not an init field, so `replace` leaves it None
    checked: tuple[str, bytes] | None = field(default=None, init=False, repr=False, compare=False)

    def _checked(self) -> bool:
        """Whether `image` is the one checked against `stream`'s header, both unchanged."""
        return self.checked is not None and (
            self.checked[0] is self.stream and self.checked[1] is self.image
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write PATH and PATH.bin, each through a temporary file renamed into place."""
        path = Path(path)
        _atomic_write(Path(f"{path}.bin"), self.image)
        _atomic_write(path, self.stream)

    def execute(
        self, inputs: dict[str, np.ndarray], check: bool = True, timing_only: bool = False,
        jobs: int | None = None,
    ) -> Any:  # fmt: skip
        """Run the stream in the interpreter; returns its full result (outputs, cycles, ...).

        `timing_only` times every instruction without computing data (no outputs, no checks).
        `jobs` (default `default_jobs()`): processes a big checked run may use (its checks in
        a forked worker; the same result whatever `jobs`).
        """
        from npucc.interp import run_stream  # NOTE: deferred: a compile needs no interpreter
        from npucc.ir.stream_parse import parse_stream  # (nor a stream parser)

        stream = parse_stream(self.stream, "<program>")
        return run_stream(stream, self.image, inputs, check=check, timing_only=timing_only,
                          image_checked=self._checked(),
                          jobs=default_jobs() if jobs is None else jobs)  # fmt: skip

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the stream in the interpreter and return the model's outputs by name."""
        return dict(self.execute(inputs).outputs)

    def summary(self) -> dict[str, Any]:
        """The compile summary (npucc.summary): target, cycles, latency, roofline, on-chip
        peaks against capacity, DRAM bytes, energy, host segments.

        A program reloaded by `load` has no compile statistics: the first call takes them
        from the stream and a timing-only run (its makespan is the predicted one), with the
        roofline of the work the stream issues (`roofline_work` "stream").
        """
        if "predicted_makespan" not in self.stats:
            from npucc.interp import run_stream
            from npucc.ir.stream_parse import parse_stream

            stream = parse_stream(self.stream, "<program>")
            result = run_stream(stream, self.image, {}, check=False, timing_only=True,
                                image_checked=self._checked())  # fmt: skip
            self.stats.update(stream_stats(stream, result))
        return summarize(self.target, self.stats)


def load(path: str | os.PathLike[str]) -> Program:
    """Reload a saved stream PATH and its image PATH.bin (size and sha256 checked against the
    stream's header) without compiling; `stats` holds only what the stream itself tells."""
    from npucc.interp import load_image
    from npucc.ir.stream_parse import parse_stream, read_stream_text

    text = read_stream_text(path)
    stream = parse_stream(text, os.fspath(path))
    image = load_image(path, stream)
    stats = {"stream_lines": text.count("\n"), "image_bytes": len(image)}
    program = Program(text, image, stream.target, stream.specs("input"), stream.specs("output"),
                      stats)  # fmt: skip
    program.checked = (text, image)
    return program


def stream_stats(stream: Stream, result: RunResult) -> dict[str, Any]:
    """The statistics a summary needs, from a stream and its (timing-only) run: makespan,
    energy, peak residency, the stream's roofline and its host records."""
    hosts = [
        {"op": host_op_name(line.instr.node), "line": line.lineno}
        for core in stream.cores
        for line in core.lines
        if isinstance(line.instr, HostOp)
    ]
    return {
        "predicted_makespan": result.makespan,
        "energy_pj": result.energy,
        "peak": result.peak,
        "roofline": stream_roofline(stream, result.makespan).as_dict(),
        "roofline_work": "stream",
        "host_segments": hosts,
    }


def write_debug_map(path: Path, mapping: dict[str, Any], model: Any) -> None:
    """Write the debug map (npucc.codegen.debug_map) with every ONNX node of the model: the
    layers it became, or none (folded into constants, or dropped)."""
    from npucc.frontend.graph_edit import node_names
    from npucc.frontend.onnx_import import read_model

    proto = read_model(model if isinstance(model, onnx.ModelProto) else Path(model), False)
    names = node_names(proto.graph)
    nodes = {}
    for name, node in zip(names, proto.graph.node, strict=True):
        layers = mapping["nodes"].get(name, [])
        op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
        nodes[name] = {"op": op, "layers": layers, "status": _status(mapping, layers)}
    for name, layers in mapping["nodes"].items():  # nodes of expanded control flow
        nodes.setdefault(name, {"op": "", "layers": layers, "status": _status(mapping, layers)})
    data = {**mapping, "nodes": nodes}
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, (json.dumps(data, indent=1) + "\n").encode())


def _status(mapping: dict[str, Any], layers: list[str]) -> str:
    """lowered (NPU), host (a host segment) or folded (no layer: constants, or dropped)."""
    if not layers:
        return "folded"
    ops = {mapping["layers"][name]["op"] for name in layers}
    return "host" if ops == {"host"} else "lowered"


WRITE_CHUNK = 1 << 20  # characters of a text `_atomic_write` encodes at a time


def _atomic_write(path: Path, data: bytes | str) -> None:
    """Write `data` (a text as UTF-8) to `path` through a temporary file renamed into place.

    NOTE: a text is encoded WRITE_CHUNK characters at a time, not held twice (a stream's
    encoded copy raised a compile's peak RSS at its end).
    """
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise NpuccError(f"cannot write: {exc.strerror} ({path})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp makes it 0600
            if isinstance(data, str):
                for at in range(0, len(data), WRITE_CHUNK):
                    f.write(data[at : at + WRITE_CHUNK].encode())
            else:
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


def _manager(options: CompileOptions, stop_after: str | None) -> PassManager:
    manager = PassManager(
        pipeline(options),
        print_before=options.print_before,
        print_after=options.print_after,
        print_after_all=options.print_after_all,
        dump_dir=Path(options.dump_dir) if options.dump_dir is not None else None,
        on_pass=options.on_pass,
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


def batch_input_shapes(
    model: str | os.PathLike[str] | onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None,
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
    options: CompileOptions,
) -> tuple[Any, CompileContext]:
    """Run the pipeline (up to `stop_after`, or all of it); the IR and the context."""
    if options.fallback not in ("error", "host"):
        raise NpuccError(f"fallback must be 'error' or 'host', not {options.fallback!r}")
    shapes = batch_input_shapes(model, options.input_shapes, options.batch)
    target = options.target
    loaded = target if isinstance(target, Target) else load_target(os.fspath(target))
    ctx = CompileContext(loaded.at_precision(choose_precision(model, loaded, options.precision)))
    manager = _manager(replace(options, input_shapes=shapes), stop_after)
    return _run(manager, model, ctx), ctx


QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
                           "QLinearAdd", "QLinearMul", "ConvInteger", "MatMulInteger"})  # fmt: skip


def choose_precision(
    model: str | os.PathLike[str] | onnx.ModelProto, target: Target, precision: str | None
) -> str:
    """The precision a compile runs at: `precision`, or the target's own (None, or auto for a
    float model); auto is int8 for a quantized (QDQ or QOperator) model."""
    if precision == "auto":
        source = model if isinstance(model, onnx.ModelProto) else Path(os.fspath(model))
        proto = read_model(source, external_data=False)
        quantized = any(n.op_type in QUANTIZED_OPS for n in proto.graph.node)
        precision = "int8" if quantized else None
    if precision is None:
        precision = target.precision
    chosen = target.at_precision(precision)  # an unsupported precision is refused by the target
    if (chosen.dtype, chosen.acc_dtype) not in STREAM_TYPES:
        raise NpuccError(f"target '{target.name}': {chosen.dtype} data into a "
                         f"{chosen.acc_dtype} accumulator is not compiled (f32, f16 into f32, "
                         "or i8 into i32)")  # fmt: skip
    return precision


def compile_program(
    model: str | os.PathLike[str] | onnx.ModelProto, options: CompileOptions
) -> Program:
    """Compile an ONNX model (path or ModelProto) as `options` say."""
    generated, ctx = _compile(model, None, options)
    mapping = ctx.stats.pop("debug_map", None)
    if options.debug_map is not None:
        write_debug_map(Path(options.debug_map), mapping, model)
    program = Program(
        generated.stream,
        generated.image,
        ctx.target,
        generated.inputs,
        generated.outputs,
        ctx.stats,
    )
    program.checked = (generated.stream, generated.image)  # NOTE: codegen hashed it in
    return program


def compile_to(
    model: str | os.PathLike[str] | onnx.ModelProto, stop_after: str, options: CompileOptions
) -> Any:
    """Run the pipeline as `options` say up to and including pass `stop_after`; its IR."""
    return _compile(model, stop_after, options)[0]


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
    seed: int = 0,
    fallback: str = "error",
    debug_map: str | os.PathLike[str] | None = None,
    precision: str | None = None,
    overlap_peak: float = 1.0,
    peak_floor: bool = False,
    jobs: int | None = None,
) -> Program:
    """Compile an ONNX model (path or ModelProto) for `target` with the `schedule` method.

    On a mesh target, `search` (hypercut, sa, layer-sequential, layer-pipelined) plans which
    layers run when and on which cores; `beam_width` is HyperCut's beam and `seed` the
    search's seed. `batch` fixes the symbolic batch dimension of every input (the mesh plan
    is made for that graph). `fallback="host"` runs what npucc cannot lower on the host (host
    segments, run by onnxruntime); `debug_map` writes the ONNX node -> layer -> tile
    operation -> stream line map as JSON. `precision` (fp32, fp16, int8, auto) is the element
    type of weights and activations (default: the target's). `overlap_peak` bounds, on one
    core, DAN's live L1+UB bytes to that multiple of its memory plan's peak while it overlaps
    layers (default 1: no more than the plan's own; inf: the plan's addresses alone bound
    them). `peak_floor` adds `stats["peak_floor"]`, lower bounds on the L1+UB peak of every
    order of the program's DAGs (docs/roofline.md "Peak floor"). `jobs` is the number of
    worker processes for independent work (default: $NPUCC_JOBS, else the CPUs this process
    may use; the same bytes whatever it is). The keywords are `CompileOptions`' fields.
    """
    return compile_program(model, _options(locals()))


def _options(keywords: dict[str, Any]) -> CompileOptions:
    """The CompileOptions named by an API call's keywords (they are its fields)."""
    fields = {name: keywords[name] for name in CompileOptions.__dataclass_fields__}
    fields["input_shapes"] = dict(fields["input_shapes"] or {})
    return CompileOptions(**fields)


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
    seed: int = 0,
    fallback: str = "error",
    debug_map: str | os.PathLike[str] | None = None,
    precision: str | None = None,
    overlap_peak: float = 1.0,
    peak_floor: bool = False,
    jobs: int | None = None,
) -> Any:
    """Run the pipeline up to and including pass `stop_after`; returns the IR it produced.

    The IR is a `Graph` after a frontend pass, a `PlannedGraph` after `hypercut`, a
    `TiledProgram` after `lower-tiles`, a `ScheduledProgram` after `schedule` and a
    `Generated` stream after `codegen`; each has `to_text()`, and
    `npucc.ir.formats.render(ir, "json" | "dot")` gives the other formats.
    """
    return compile_to(model, stop_after, _options(locals()))


def level_pass(level: str) -> str:
    """The pass whose output is the IR at `level` (graph, tiled, schedule, cmd)."""
    if level not in LEVEL_PASSES:
        raise NpuccError(f"unknown IR level '{level}' (one of {', '.join(LEVEL_PASSES)})")
    return LEVEL_PASSES[level]
