"""The `npucc` command line: compile, run, check, dan."""

from __future__ import annotations

import argparse
import csv
import importlib
import os
import re
import sys
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from npucc import progress
from npucc.errors import CheckFailed, NpuccError
from npucc.options import CompileOptions

if TYPE_CHECKING:
    from npucc.interp import RunResult
    from npucc.ir.program import TiledProgram

# subcommands with a module of their own in npucc.tools: name -> module with add_parser and main
PLUGINS = {
    "dan": "npucc.tools.dan_command",
    "conformance": "npucc.tools.conformance",
    "explore": "npucc.tools.explore_command",
}
BENCHMARKS = {"dan": "npucc.tools.bench_dan", "hypercut": "npucc.tools.bench_hypercut"}
COMMANDS = ("run", "check", "ir", "report", "bench", *PLUGINS)


def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse repeated `NAME=1x3x224x224` options."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, eq, dims = item.rpartition("=")
        if not eq or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
            raise NpuccError(f"bad --input-shape '{item}' (expected NAME=1x3x224x224)")
        shapes[name] = tuple(int(d) for d in dims.split("x"))
    return shapes


def one_line(text: str) -> str:
    """Text with every non-printable character (newline, tab, ...) escaped: one line."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def safe_file_name(name: str) -> str:
    """A tensor name made safe as a file name: anything but [A-Za-z0-9._-] becomes '_'."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return "_" + safe if safe in ("", ".", "..") else safe


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse with npucc's error convention: one `npucc: error:` line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Report a usage error without the usage block."""
        self.exit(2, f"npucc: error: {message} (see {self.prog} --help)\n")


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="davinci-core", help="preset name or TOML path")
    p.add_argument("--schedule", default="dan", help="per-core scheduler: dan (default), original")
    p.add_argument(
        "--search",
        default="hypercut",
        choices=("hypercut", "sa", "layer-sequential", "layer-pipelined"),
        help="mesh plan search (mesh targets only)",
    )
    p.add_argument("--beam-width", type=int, default=256, help="HyperCut beam width")
    p.add_argument("--batch", type=int, help="fix the symbolic batch dimension of the inputs")
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="fix the shape of a model input, e.g. input=1x3x224x224",
    )


def compile_options(args: argparse.Namespace, **more: Any) -> CompileOptions:
    """The CompileOptions of the options `_add_compile_options` defines, and `more` fields."""
    return CompileOptions(
        target=args.target,
        schedule=args.schedule,
        input_shapes=parse_input_shapes(args.input_shape),
        batch=args.batch,
        search=args.search,
        beam_width=args.beam_width,
        **more,
    )


def _parser() -> argparse.ArgumentParser:
    from npucc.ir.formats import FORMATS, LEVELS

    p = OneLineErrorParser(prog="npucc", description="ONNX compiler for tiled NPUs")
    p.add_argument("model", help="ONNX model to compile")
    p.add_argument(
        "-o", "--output", help="file to write: the command stream (+ .bin), or the --emit IR"
    )
    _add_compile_options(p)
    p.add_argument("--print-ir-after", default="", metavar="PASS[,PASS]")
    p.add_argument("--print-ir-before", default="", metavar="PASS[,PASS]")
    p.add_argument("--print-ir-after-all", action="store_true")
    p.add_argument("--dump-dir", help="write the IR after each pass, one numbered file each")
    p.add_argument(
        "--emit", choices=LEVELS, default="cmd", help="stop at this IR level and write it"
    )
    p.add_argument("--format", choices=FORMATS, default="text", help="format of the --emit IR")
    p.add_argument(
        "--emit-trace",
        metavar="DIR",
        help="write each core's tiled IR as DAN trace JSON (DIR/MODEL_coreR_C.json) and stop",
    )
    p.add_argument(
        "--perf-csv", metavar="FILE", help="write the per-layer performance table as CSV"
    )
    _add_common_options(p)
    return p


def _add_common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def _sub_parser() -> argparse.ArgumentParser:
    from npucc.ir.formats import FORMATS

    p = OneLineErrorParser(prog="npucc")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute a command stream in the interpreter")
    run.add_argument("stream")
    run.add_argument("-i", "--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--out", help="directory for <output>.npy files")
    run.add_argument(
        "--timing-only",
        action="store_true",
        help="time every instruction but compute no data (no outputs, no checks)",
    )
    _add_common_options(run)
    check = sub.add_parser("check", help="compile, interpret and compare with onnxruntime")
    check.add_argument("model")
    _add_compile_options(check)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument(
        "--random-weights", action="store_true", help="replace weights by seeded random values"
    )
    _add_common_options(check)
    ir = sub.add_parser("ir", help="parse an IR dump of any level and print it")
    ir.add_argument("file", help="a dump: graph, tiled, schedule or command stream")
    ir.add_argument("--format", choices=FORMATS, default="text")
    ir.add_argument("-o", "--output", help="file to write (default: stdout)")
    _add_common_options(ir)
    report = sub.add_parser("report", help="run a stream traced; write an HTML page with figures")
    report.add_argument("stream", help="command stream (its .bin next to it)")
    report.add_argument("-o", "--output", required=True, metavar="DIR", help="report directory")
    report.add_argument("-i", "--input", action="append", default=[], metavar="NAME=FILE.npy")
    report.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    report.add_argument(
        "--perf-csv", metavar="FILE", help="the compile's per-layer table (--perf-csv) to show"
    )
    _add_common_options(report)
    for module in PLUGINS.values():
        importlib.import_module(module).add_parser(sub).set_defaults(main=module)
    bench = sub.add_parser("bench", help="benchmarks: dan, hypercut")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for module in BENCHMARKS.values():
        importlib.import_module(module).add_parser(bench_sub).set_defaults(main=module)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `npucc` console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    try:
        with progress.bars(progress.should_show("--quiet" in args_list)):
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
    if not (args_list and args_list[0] in COMMANDS):
        return cmd_compile(_parser().parse_args(args_list))
    args = _sub_parser().parse_args(args_list)
    commands = {"run": cmd_run, "check": cmd_check, "ir": cmd_ir, "report": cmd_report}
    if args.command in commands:
        return commands[args.command](args)
    return int(importlib.import_module(args.main).main(args))


def _names(text: str) -> frozenset[str]:
    return frozenset(n for n in text.split(",") if n)


def cmd_compile(args: argparse.Namespace) -> int:
    """`npucc MODEL -o OUT.cmd`, or `npucc MODEL --emit LEVEL [--format F] [-o FILE]`."""
    from npucc.compiler import compile_program, compile_to, level_pass
    from npucc.ir.formats import render

    stream = args.emit == "cmd" and args.format == "text" and args.emit_trace is None
    if args.output is None and stream:
        raise NpuccError("the command stream needs -o OUT.cmd (or --emit another level)")
    if args.perf_csv is not None and not stream:
        raise NpuccError("--perf-csv needs a full compile to a command stream (no --emit)")
    model, out = Path(args.model), Path(args.output or "-")
    if args.output not in (None, "-") and model.resolve() in (
        out.resolve(),
        Path(f"{out}.bin").resolve(),
    ):
        raise NpuccError(f"output would overwrite the input model ({out})")
    options = compile_options(
        args,
        print_before=_names(args.print_ir_before),
        print_after=_names(args.print_ir_after),
        print_after_all=args.print_ir_after_all,
        dump_dir=args.dump_dir,
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
    program.save(out)
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
    return 0


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
    """Write `text` to the file `output`, or to stdout when it is None or '-'."""
    if output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(output).write_text(text, encoding="utf-8")


def _load_inputs(items: Sequence[str]) -> dict[str, np.ndarray]:
    """Parse repeated `-i NAME=FILE.npy` options and load the arrays."""
    inputs: dict[str, np.ndarray] = {}
    for item in items:
        name, eq, file = item.partition("=")
        if not eq or not name or not file:
            raise NpuccError(f"bad -i '{item}' (expected NAME=FILE.npy)")
        try:
            inputs[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise NpuccError(f"cannot read input '{name}': {exc} ({file})") from None
    return inputs


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
    inputs = _load_inputs(args.input) or None
    page = write_report(args.stream, args.output, inputs, args.seed, layers)
    print(f"wrote {page}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """`npucc run OUT.cmd -i NAME=FILE.npy --out DIR`."""
    from npucc.backend.schedule.roofline import stream_roofline
    from npucc.interp import run_stream
    from npucc.interp.event_loop import load_program

    if args.out is None and not args.timing_only:
        raise NpuccError("run needs --out DIR for the outputs (or --timing-only)")
    stream, image = load_program(args.stream)
    inputs = _load_inputs(args.input)
    result = run_stream(stream, image, inputs, timing_only=args.timing_only)
    line = stream_roofline(stream, result.makespan)
    if args.out is not None and not args.timing_only:
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, value in result.outputs.items():
            np.save(out_dir / f"{safe_file_name(name)}.npy", value)
    print(run_summary(result))
    print(f"{line.summary()} (the stream's own work: cube MACs as issued)")
    return 0


def run_summary(result: RunResult) -> str:
    """Makespan, energy, DRAM bytes, busy cycles per pipe and the makespan of every core."""
    dram = sum(n for path, n in result.counters["bytes"].items() if "DDR" in path)
    lines = [
        f"makespan {result.makespan} cycles",
        f"energy {result.energy:.6g} pJ",
        f"DRAM traffic {dram} bytes",
    ]
    noc = sum(n for path, n in result.counters["bytes"].items() if "NOC" in path)
    if noc:
        hops = result.counters["noc_byte_hops"]
        lines.append(f"NoC traffic {noc} bytes, {hops} byte-hops")
    lines += [f"  {pipe:<7} {cycles} busy cycles" for pipe, cycles in result.pipe_cycles.items()]
    if len(result.core_makespan) > 1:
        lines += [f"  core {r},{c}: {t} cycles" for (r, c), t in result.core_makespan.items()]
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    """`npucc check MODEL`: compile, interpret, compare with onnxruntime."""
    from npucc.backend.schedule.roofline import at_makespan
    from npucc.checking import (
        ATOL,
        VACUOUS_SCALE,
        compare,
        random_inputs,
        randomize_weights,
        run_onnxruntime,
    )
    from npucc.compiler import batch_input_shapes, compile_program
    from npucc.frontend.onnx_import import load_model

    options = compile_options(args)
    shapes = batch_input_shapes(args.model, options.input_shapes, options.batch)
    options = replace(options, input_shapes=shapes, batch=None)  # the shapes hold the batch
    model = load_model(args.model, shapes)
    if args.random_weights:
        model = randomize_weights(model, args.seed)
    program = compile_program(model, options)
    inputs = random_inputs(program.inputs, args.seed, model)
    result = program.execute(inputs)
    reference = run_onnxruntime(model, inputs)
    ok = True
    for c in compare(result.outputs, reference):
        ok &= c.ok
        print(
            f"{c.name}: max abs error {c.max_abs:.3e}, max |ref| {c.max_ref:.3e},"
            f" relative {c.rel:.3e} {'PASS' if c.ok else 'FAIL'}"
        )
        if c.vacuous:
            print(
                f"npucc: warning: output '{c.name}' is within {VACUOUS_SCALE * ATOL:g} of zero,"
                " so this comparison tests little; try --random-weights",
                file=sys.stderr,
            )
    predicted = program.stats.get("predicted_makespan")
    print(f"makespan: interpreted {result.makespan} cycles, predicted {predicted} cycles")
    print(at_makespan(program.stats["roofline"], result.makespan).summary())
    if not ok:
        raise CheckFailed(f"outputs differ from onnxruntime ({args.model})")
    print("PASS")
    return 0
