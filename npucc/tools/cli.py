"""The `npucc` command line: compile (the default), check, run, inspect, ops, ir, report, ..."""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from npucc import progress
from npucc.errors import CheckFailed, NpuccError
from npucc.options import SEARCHES, CompileOptions
from npucc.tools.cli_parsing import (
    COMMANDS,
    OneLineErrorParser,
    add_model_options,
    check_command,
    command_list,
    describe,
    make_dirs,
    parse_input_shapes,
    safe_file_name,
)
from npucc.tools.inspect_command import add_inspect_parsers, cmd_inspect, cmd_ops

if TYPE_CHECKING:
    from npucc.compiler import Program
    from npucc.ir.program import TiledProgram

# subcommands with a module of their own in npucc.tools: name -> module with add_parser and main
PLUGINS = {
    "dan": "npucc.tools.dan_command",
    "conformance": "npucc.tools.conformance",
    "explore": "npucc.tools.explore_command",
}
BENCHMARKS = {"dan": "npucc.tools.bench_dan", "hypercut": "npucc.tools.bench_hypercut"}


def one_line(text: str) -> str:
    """Text with every non-printable character (newline, tab, ...) escaped: one line."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    from npucc.backend.schedule.registry import SCHEDULERS
    from npucc.options import PRECISION_CHOICES

    p.add_argument(
        "--target",
        default="davinci-core",
        help="preset (davinci-core, mesh8x8, mesh16x16) or a target TOML file",
    )
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        help="element type of weights and activations (default: the target's, fp32 for the "
        "presets); auto: int8 for a quantized (QDQ/QOperator) model, else the target's",
    )
    p.add_argument(
        "--schedule",
        default="dan",
        choices=tuple(SCHEDULERS),
        help="per-core scheduler (default dan: MPAS order, DLR layout, CPE timing)",
    )
    p.add_argument(
        "--search",
        default="hypercut",
        choices=SEARCHES,
        help="mesh plan search (mesh targets only; default hypercut)",
    )
    p.add_argument(
        "--beam-width",
        type=int,
        default=256,
        metavar="N",
        help="HyperCut beam width (default 256; smaller plans faster)",
    )
    p.add_argument(
        "--overlap-peak",
        type=float,
        default=1.0,
        metavar="X",
        help="one core: DAN overlaps layers with at most X times its memory plan's live L1+UB "
        "bytes (default 1: the plan's peak; inf: as DLR's addresses allow)",
    )
    p.add_argument(
        "-j",
        "--jobs",
        type=_positive,
        metavar="N",
        help="worker processes for independent work (default: $NPUCC_JOBS, else the CPUs "
        "this process may use); the output is the same whatever N",
    )
    add_model_options(p)


def _positive(text: str) -> int:
    """An argparse type: a positive integer."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not '{text}'")
    return int(text)


def compile_options(args: argparse.Namespace, **more: Any) -> CompileOptions:
    """The CompileOptions of the options `_add_compile_options` defines, and `more` fields."""
    return CompileOptions(
        target=args.target,
        schedule=args.schedule,
        input_shapes=parse_input_shapes(args.input_shape),
        batch=args.batch,
        search=args.search,
        beam_width=args.beam_width,
        fallback=args.fallback,
        precision=args.precision,
        overlap_peak=args.overlap_peak,
        jobs=args.jobs,
        **more,
    )


def _parser() -> argparse.ArgumentParser:
    from npucc.ir.formats import FORMATS, LEVELS

    p = OneLineErrorParser(
        prog="npucc",
        usage="npucc MODEL.onnx [-o OUT.cmd] [options]\n       npucc COMMAND ...",
        description="ONNX compiler for tiled NPUs: compile MODEL.onnx into a command stream\n"
        "(OUT.cmd and its weight image OUT.cmd.bin), or run one of the commands below.",
        epilog=command_list(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", help="ONNX model to compile")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the command stream to write (default: MODEL.cmd here; + .bin), "
        "or the --emit IR (default: stdout)",
    )
    _add_compile_options(p)
    p.add_argument(
        "--print-ir-after",
        default="",
        metavar="PASS[,PASS]",
        help="print the IR after these passes on stderr",
    )
    p.add_argument(
        "--print-ir-before",
        default="",
        metavar="PASS[,PASS]",
        help="print the IR before these passes on stderr",
    )
    p.add_argument(
        "--print-ir-after-all", action="store_true", help="print the IR after every pass on stderr"
    )
    p.add_argument(
        "--dump-dir", metavar="DIR", help="write the IR after each pass, DIR/NN-PASS.txt"
    )
    p.add_argument(
        "--debug-map",
        metavar="FILE.json",
        help="write the map ONNX node -> graph-IR layers -> tile operations per core -> stream "
        "lines (and line -> node)",
    )
    p.add_argument("--emit", choices=LEVELS, help="stop at this IR level and write it")
    p.add_argument("--format", choices=FORMATS, help="format of the --emit IR (default text)")
    p.add_argument(
        "--emit-trace",
        metavar="DIR",
        help="write each core's tiled IR as DAN trace JSON (DIR/MODEL_coreR_C.json) and stop",
    )
    p.add_argument(
        "--perf-csv", metavar="FILE", help="write the per-layer performance table as CSV"
    )
    p.add_argument(
        "--summary-json",
        metavar="FILE",
        help="write the compile summary (the table printed on stderr) as JSON",
    )
    p.add_argument(
        "--summary-csv", metavar="FILE", help="write the compile summary as CSV (header + 1 row)"
    )
    _add_common_options(p)
    return p


def _add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress, stage times or summary on stderr (a compile keeps its 'wrote' lines)",
    )
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")


def _add_inputs_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-i",
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="a model input from a .npy file (repeatable)",
    )


def _sub_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `npucc COMMAND ...`: with every command's parser, or only `command`'s.

    NOTE: a command's parser imports what its options need (check's the schedulers, ir's the
    IR formats, each plugin and benchmark its module, onnx among them): a command builds only
    its own (`npucc ir --help`: 0.52 -> 0.29 CPU s).
    """
    p = OneLineErrorParser(prog="npucc")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str) -> argparse.ArgumentParser:
        return describe(sub.add_parser(name, help=COMMANDS[name]), name)

    def wanted(*names: str) -> bool:
        return command is None or command in names

    if wanted("check"):
        check = add("check")
        check.add_argument("model", help="ONNX model to check")
        check.add_argument(
            "-o",
            "--output",
            metavar="OUT.cmd",
            help="also keep the compiled stream (OUT.cmd and OUT.cmd.bin)",
        )
        _add_compile_options(check)
        check.add_argument(
            "--seed", type=int, default=0, help="seed of the random inputs (and weights)"
        )
        check.add_argument(
            "--random-weights", action="store_true", help="replace weights by seeded random values"
        )
        _add_common_options(check)
    if wanted("run"):
        run = add("run")
        run.add_argument("stream", help="command stream (OUT.cmd, its OUT.cmd.bin next to it)")
        _add_inputs_option(run)
        run.add_argument("--out", metavar="DIR", help="directory for the OUTPUT.npy files")
        run.add_argument(
            "--timing-only",
            action="store_true",
            help="time every instruction but compute no data (no outputs, no checks)",
        )
        run.add_argument("--per-core", action="store_true", help="also print each core's makespan")
        _add_common_options(run)
    if wanted("inspect", "ops"):
        add_inspect_parsers(add, _add_common_options)
    if wanted("ir"):
        from npucc.ir.formats import FORMATS

        ir = add("ir")
        ir.add_argument("file", help="a dump: graph, tiled, schedule or command stream")
        ir.add_argument("--format", choices=FORMATS, default="text", help="output format")
        ir.add_argument("-o", "--output", help="file to write (default: stdout)")
        _add_common_options(ir)
    if wanted("report"):
        report = add("report")
        report.add_argument("stream", help="command stream (its .bin next to it)")
        report.add_argument("-o", "--output", required=True, metavar="DIR", help="report directory")
        _add_inputs_option(report)
        report.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
        report.add_argument(
            "--perf-csv", metavar="FILE", help="the compile's per-layer table (--perf-csv) to show"
        )
        _add_common_options(report)
    for name, module in PLUGINS.items():
        if wanted(name):
            parser = importlib.import_module(module).add_parser(sub)
            describe(parser, name).set_defaults(main=module)
    if wanted("bench"):
        bench = add("bench")
        bench_sub = bench.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
        for module in BENCHMARKS.values():
            importlib.import_module(module).add_parser(bench_sub).set_defaults(main=module)
    return p


def run() -> NoReturn:
    """`npucc` as a program: `main`, then exit at once, leaving the heap to the OS.

    NOTE: the objects a compile leaves (the IRs of every pass, the const image) are not torn
    down one by one at exit (Keras ResNet-50: 0.12 of 5.1 CPU s), as mypy's fast exit; every
    file is written and closed by then, the standard streams are flushed here.
    """
    if _compiles(sys.argv[1:]):
        _idle_blas_threads()  # before anything imports numpy
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


def _compiles(args_list: Sequence[str]) -> bool:
    """Whether a command line is a compile: no COMMAND first."""
    return not (args_list and args_list[0] in COMMANDS)


def _idle_blas_threads() -> None:
    """Let OpenBLAS's worker threads sleep as soon as they are idle, unless the user set it.

    NOTE: by default each worker spins ~2**28 cycles after its last job before it sleeps: at
    numpy's import, which starts them, ~50-70 ms of CPU a process on a 2-core machine, while a
    compile does no BLAS-sized work (a folded constant MatMul at most). Only the wait changes:
    the threads, and so how a product is split and rounded, stay the same. Read by OpenBLAS
    when it loads: a no-op once numpy is imported. Only `run`, the program, sets it (a compile
    only: the interpreter's products may want their threads awake), not `main`, which callers
    run in their own process.
    """
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")  # 2**4 cycles, OpenBLAS's least


def main(argv: Sequence[str] | None = None) -> int:
    """The `npucc` command line on `argv` (default: the process's arguments); returns the exit
    code (`run`, the console script, exits with it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    try:
        with progress.reporting(progress.mode("--quiet" in args_list)):
            return _dispatch(args_list)
    except NpuccError as exc:
        if debug:
            traceback.print_exc()
        print(f"npucc: error: {one_line(str(exc))}", file=sys.stderr)
        return NpuccError.exit_code
    except CheckFailed as exc:
        if debug:
            traceback.print_exc()
        print(f"npucc: check failed: {one_line(str(exc))}", file=sys.stderr)
        return CheckFailed.exit_code
    except BrokenPipeError:  # stdout closed early (`npucc ... | head`): stop quietly, like SIGPIPE
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (nothing more may reach the pipe)
        return 141
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"npucc: error: {one_line(exc.strerror or str(exc))}{where}", file=sys.stderr)
        return NpuccError.exit_code
    except KeyboardInterrupt:
        print("npucc: interrupted", file=sys.stderr)
        return 130


def _dispatch(args_list: list[str]) -> int:
    if args_list:
        check_command(args_list[0])
    if _compiles(args_list):
        return cmd_compile(_parser().parse_args(args_list))
    args = _sub_parser(args_list[0]).parse_args(args_list)
    from npucc.tools.run_command import cmd_run  # NOTE: deferred: a compile needs no interpreter

    commands = {
        "run": cmd_run,
        "check": cmd_check,
        "ir": cmd_ir,
        "report": cmd_report,
        "inspect": cmd_inspect,
        "ops": cmd_ops,
    }
    if args.command in commands:
        return commands[args.command](args)
    return int(importlib.import_module(args.main).main(args))


def _names(text: str) -> frozenset[str]:
    return frozenset(n for n in text.split(",") if n)


def cmd_compile(args: argparse.Namespace) -> int:
    """`npucc MODEL -o OUT.cmd`, or `npucc MODEL --emit LEVEL [--format F] [-o FILE]`."""
    from npucc.compiler import compile_program, compile_to, level_pass
    from npucc.ir.formats import render

    stream = _output_paths(args)
    for flag in ("perf_csv", "summary_json", "summary_csv"):
        if getattr(args, flag) is not None and not stream:
            option = "--" + flag.replace("_", "-")
            raise NpuccError(f"{option} needs a full compile to a command stream (no --emit)")
    model, out = Path(args.model), Path(args.output or "-")
    options = compile_options(
        args,
        print_before=_names(args.print_ir_before),
        print_after=_names(args.print_ir_after),
        print_after_all=args.print_ir_after_all,
        dump_dir=args.dump_dir,
        debug_map=args.debug_map,
    )
    if args.emit_trace is not None:
        tiled = compile_to(model, "lower-tiles", options)
        for path in write_core_traces(tiled, Path(args.emit_trace), model.stem):
            print(f"wrote {path}")
        return 0
    if not stream:
        ir = compile_to(model, level_pass(args.emit), options)
        _write_text(render(ir, args.format), args.output)
        return 0
    program = compile_program(model, options)
    save_program(program, out)
    stats = program.stats
    efficiency = stats["roofline"]["efficiency"]
    print(
        f"wrote {out} ({stats.get('stream_lines', 0)} lines, {stats.get('tile_ops', 0)} tile ops,"
        f" predicted makespan {stats.get('predicted_makespan', 0)} cycles,"
        f" roofline efficiency {efficiency:.3f})"
    )
    if args.perf_csv is not None:
        from npucc.backend.schedule.perf_table import to_csv

        _write_text(to_csv(stats["layers"]), args.perf_csv)
        print(f"wrote {args.perf_csv} ({len(stats['layers'])} layers)")
    if not args.quiet:
        _print_host_segments(stats)
    if args.debug_map is not None:
        print(f"wrote {args.debug_map}")
    _write_summary(args, program)
    return 0


def _write_summary(args: argparse.Namespace, program: Program) -> None:
    """The compile summary: on stderr unless --quiet, and the --summary-json/-csv files."""
    from npucc.summary import format_summary, summary_csv

    summary = program.summary()
    json_path = getattr(args, "summary_json", None)  # check has no summary files
    csv_path = getattr(args, "summary_csv", None)
    if json_path is not None:
        _write_text(json.dumps(summary, indent=1) + "\n", json_path)
        print(f"wrote {json_path}")
    if csv_path is not None:
        _write_text(summary_csv(summary), csv_path)
        print(f"wrote {csv_path}")
    if not args.quiet:
        sys.stderr.flush()
        sys.stdout.flush()
        sys.stderr.write(format_summary(summary, f"npucc summary: {Path(args.model).name}"))


def _print_host_segments(stats: dict[str, Any]) -> None:
    """One line per host segment a compile made (--fallback host)."""
    for seg in stats.get("host_segments", ()):
        print(f"host segment: node '{seg['node']}' ({seg['op']}) at stream line {seg['line']}")


def _output_paths(args: argparse.Namespace) -> bool:
    """Settle `-o` for a compile: whether it writes the stream; its default is MODEL.cmd here.

    NOTE: `--format` belongs to `--emit` (alone it would write JSON into a `.cmd` file).
    """
    if args.format is not None and args.emit is None:
        raise NpuccError(f"--format {args.format} needs --emit LEVEL (the stream is only text)")
    args.emit, args.format = args.emit or "cmd", args.format or "text"
    stream = args.emit == "cmd" and args.format == "text" and args.emit_trace is None
    if args.output is None and stream:
        args.output = f"{Path(args.model).stem}.cmd"
    if args.output not in (None, "-"):
        _refuse_overwriting_model(Path(args.model), Path(args.output))
    return stream


def _refuse_overwriting_model(model: Path, out: Path) -> None:
    if model.resolve() in (out.resolve(), Path(f"{out}.bin").resolve()):
        raise NpuccError(f"output would overwrite the input model ({out})")


def save_program(program: Program, out: Path) -> None:
    """Write OUT and OUT.bin, creating OUT's directory."""
    make_dirs(out.parent)
    program.save(out)


def write_core_traces(program: TiledProgram, directory: Path, stem: str) -> list[Path]:
    """Each core's DAG as DAN trace JSON (shared/dan-traces.md), cores without work skipped."""
    from npucc.backend.schedule.trace_json import write_trace

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for core in program.cores:
        if len(core.graph):
            path = directory / f"{safe_file_name(stem)}_core{core.row}_{core.col}.json"
            write_trace(core.graph, path)
            paths.append(path)
    return paths


def _write_text(text: str, output: str | None) -> None:
    """Write `text` to the file `output` (its directory created), or to stdout for None or '-'."""
    if output in (None, "-"):
        sys.stdout.write(text)
    else:
        make_dirs(Path(output).parent)
        Path(output).write_text(text, encoding="utf-8")


def cmd_ir(args: argparse.Namespace) -> int:
    """`npucc ir FILE [--format text|json|dot]`: parse a dump of any level and print it."""
    from npucc.ir.formats import parse_ir, render

    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise NpuccError(f"cannot read IR dump: {reason} ({args.file})") from None
    _, ir = parse_ir(text, args.file)
    out = render(ir, args.format)
    if args.output is None and args.format == "text" and sys.stdout.isatty():
        from npucc.ir.highlight import print_highlighted

        print_highlighted(out)
    else:
        _write_text(out, args.output)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """`npucc report OUT.cmd -o DIR`: run traced, write DIR/index.html and its PNGs."""
    from npucc.report import write_report

    layers = None
    if args.perf_csv is not None:
        try:
            with open(args.perf_csv, encoding="utf-8", newline="") as f:
                layers = list(csv.DictReader(f))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise NpuccError(f"cannot read the per-layer table: {exc} ({args.perf_csv})") from None
    from npucc.tools.run_command import load_inputs

    inputs = load_inputs(args.input) or None
    page = write_report(args.stream, args.output, inputs, args.seed, layers)
    print(f"wrote {page}")
    return 0


def _print_timing(program: Any, result: Any) -> None:
    """`npucc check`'s makespan and roofline lines."""
    from npucc.backend.schedule.roofline import at_makespan

    predicted = program.stats.get("predicted_makespan")
    print(f"makespan: interpreted {result.makespan} cycles, predicted {predicted} cycles")
    print(at_makespan(program.stats["roofline"], result.makespan).summary())


def _check_int8(
    args: argparse.Namespace, program: Any, result: Any, run: tuple[Any, dict, dict]
) -> int:
    """`npucc check` of an int8 program: each output against onnxruntime's run of the same
    quantized model (`run`: the model's file, the inputs, its outputs), in quantization steps
    (npucc.checking.compare_steps); for comparison, against onnxruntime's optimized run too."""
    from npucc.checking import compare_steps, run_onnxruntime
    from npucc.ir.stream_parse import parse_stream

    tensors = parse_stream(program.stream, "<program>").tensors.values()
    scales = {t.name: t.quant[0] for t in tensors if t.kind == "output" and t.quant is not None}
    model, inputs, reference = run
    comparisons = compare_steps(result.outputs, reference, scales)
    with progress.stage("onnxruntime (optimized)"):
        fused = run_onnxruntime(model, inputs, optimized=True)
    kernels = {c.name: c for c in compare_steps(result.outputs, fused, scales)}
    itself = {c.name: c for c in compare_steps(reference, fused, scales)}
    for c in comparisons:
        print(f"{c.name}: vs onnxruntime (the same quantized model) {c.equal}/{c.elements} "
              f"equal ({c.exact:.6f}), max {c.max_steps:g} steps of {c.scale:.6g} "
              f"{'PASS' if c.ok else 'FAIL'}")  # fmt: skip
        k, o = kernels[c.name], itself[c.name]
        print(f"{c.name}: vs onnxruntime optimized (its integer kernels) {k.equal}/{k.elements} "
              f"equal, max {k.max_steps:g} steps; onnxruntime optimized vs as written "
              f"{o.equal}/{o.elements} equal, max {o.max_steps:g} steps")  # fmt: skip
    _print_timing(program, result)
    if not all(c.ok for c in comparisons):
        raise CheckFailed(f"outputs differ from onnxruntime ({args.model})")
    print("PASS")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """`npucc check MODEL`: compile, interpret, compare with onnxruntime.

    NOTE: a model is checked from a file holding its weights apart (`model_file`): its own
    when nothing changes it (no random weights, no fixed input shapes) and it already holds
    them so (`holds_weights_apart`; VGG-19: 548 MB not read and written again, 2.6 CPU s)."""
    from npucc.checking import holds_weights_apart, model_file
    from npucc.compiler import batch_input_shapes
    from npucc.frontend.onnx_import import load_model

    options = compile_options(args)
    shapes = batch_input_shapes(args.model, options.input_shapes, options.batch)
    options = replace(options, input_shapes=shapes, batch=None)  # the shapes hold the batch
    if args.output is not None:
        _refuse_overwriting_model(Path(args.model), Path(args.output))
    if not args.random_weights and not shapes and holds_weights_apart(args.model):
        return _check_file(args, options, Path(args.model))
    model = load_model(args.model, shapes, options.fallback)
    with tempfile.TemporaryDirectory(prefix="npucc-check-") as folder:
        # NOTE: random weights are drawn into the file, one at a time (model_file)
        path = model_file(model, folder, args.seed if args.random_weights else None)
        del model  # NOTE: not held in memory while it compiles and runs (model_file)
        return _check_file(args, options, path)


def _check_file(args: argparse.Namespace, options: CompileOptions, path: Path) -> int:
    """`npucc check` of the model file at `path`, its weights apart (npucc.checking.model_file)."""
    import onnx

    from npucc.checking import (
        ATOL,
        RTOL,
        VACUOUS_SCALE,
        compare,
        fp16_reference,
        fp16_rtol,
        ill_conditioned,
        random_inputs,
        reduction_length,
        reference_spread,
        run_onnxruntime,
        within_spread,
    )
    from npucc.compiler import compile_program
    from npucc.gcpause import release_memory

    program = compile_program(path, options)
    if args.output is not None:
        save_program(program, Path(args.output))
        print(f"wrote {args.output}")
    _print_host_segments(program.stats)
    _write_summary(args, program)
    inputs = random_inputs(program.inputs, args.seed, onnx.load(path, load_external_data=False))
    release_memory()  # NOTE: what the compile freed goes back to the OS before the run
    result = program.execute(inputs, jobs=options.jobs)
    # NOTE: the image is not needed after the run: it goes before onnxruntime loads the model
    # (VGG-19: 548 MB less at that stage), and so does what the run freed
    program = replace(program, image=b"")
    release_memory()
    with progress.stage("onnxruntime"):
        reference = run_onnxruntime(path, inputs)
    if program.target.dtype == "i8":
        return _check_int8(args, program, result, (path, inputs, reference))
    half = program.target.dtype == "f16"
    model = onnx.load(path) if half else None  # with its weights, for the fp16 references
    rtol = fp16_rtol(reduction_length(model)) if model is not None else RTOL
    second = fp16_reference(model, inputs) if model is not None else {}
    if isinstance(second, str):
        print(f"npucc: note: no fp16 onnxruntime reference: {second}", file=sys.stderr)
    second_errors = compare(result.outputs, second) if isinstance(second, dict) else []
    ok = True
    comparisons = compare(result.outputs, reference, rtol)
    spread = None
    if not all(c.ok for c in comparisons):  # is the reference itself stable under rounding?
        with progress.stage("conditioning"):
            spread = reference_spread(model or onnx.load(path), inputs, reference, args.seed)
    for c in comparisons:
        verdict = "PASS" if c.ok else "FAIL"
        if (
            not c.ok
            and spread is not None
            and c.name in spread
            and ill_conditioned(c, spread[c.name])
        ):
            moved = float(spread[c.name].max(initial=0.0))
            explained = within_spread(c, result.outputs.get(c.name), reference[c.name],
                                      spread[c.name])  # fmt: skip
            verdict = "ILL-CONDITIONED" if explained else "FAIL (ill-conditioned)"
            print(
                f"npucc: warning: output '{c.name}' is ill-conditioned: onnxruntime's own result"
                f" moves by up to {moved:.3e} when the inputs move by one rounding step, more"
                f" than the tolerance {c.rtol * c.max_ref + ATOL:.3e};"
                + (" npucc's difference is within that spread, not a mismatch"
                   if explained else " npucc's difference exceeds it somewhere: a mismatch"),
                file=sys.stderr,
            )  # fmt: skip
            c_ok = explained
        else:
            c_ok = c.ok
        ok &= c_ok
        against = " vs float32 onnxruntime" if half else ""
        bound = f", tolerance {c.rtol:.3e}" if half else ""
        print(
            f"{c.name}:{against} max abs error {c.max_abs:.3e}, max |ref| {c.max_ref:.3e},"
            f" relative {c.rel:.3e}{bound} {verdict}"
        )
        for d in (d for d in second_errors if d.name == c.name):
            print(f"{d.name}: vs fp16 onnxruntime (onnxconverter-common) max abs error "
                  f"{d.max_abs:.3e}, relative {d.rel:.3e}")  # fmt: skip
        if c.vacuous:
            print(
                f"npucc: warning: output '{c.name}' is within {VACUOUS_SCALE * ATOL:g} of zero,"
                " so this comparison tests little; try --random-weights",
                file=sys.stderr,
            )
    _print_timing(program, result)
    if not ok:
        raise CheckFailed(f"outputs differ from onnxruntime ({args.model})")
    print("PASS")
    return 0
