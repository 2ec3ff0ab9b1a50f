"""The `npucc` command line: compile, run, check, dan."""

from __future__ import annotations

import argparse
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from npucc.errors import CheckFailed, NpuccError

COMMANDS = ("run", "check", "dan")


def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Parse repeated `NAME=1x3x224x224` options."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, eq, dims = item.rpartition("=")
        if not eq or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
            raise NpuccError(f"bad --input-shape '{item}' (expected NAME=1x3x224x224)")
        shapes[name] = tuple(int(d) for d in dims.split("x"))
    return shapes


def safe_file_name(name: str) -> str:
    """A tensor name made safe as a file name: anything but [A-Za-z0-9._-] becomes '_'."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return "_" + safe if safe in ("", ".", "..") else safe


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="davinci-core", help="preset name or TOML path")
    p.add_argument("--schedule", default="original", help="per-core scheduler: original, dan")
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="fix the shape of a model input, e.g. input=1x3x224x224",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="npucc", description="ONNX compiler for tiled NPUs")
    p.add_argument("model", help="ONNX model to compile")
    p.add_argument("-o", "--output", required=True, help="command stream to write (+ .bin)")
    _add_compile_options(p)
    p.add_argument("--print-ir-after", default="", metavar="PASS[,PASS]")
    p.add_argument("--print-ir-before", default="", metavar="PASS[,PASS]")
    p.add_argument("--print-ir-after-all", action="store_true")
    p.add_argument("--dump-dir", help="write the IR after each pass, one numbered file each")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _sub_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="npucc")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="execute a command stream in the interpreter")
    run.add_argument("stream")
    run.add_argument("-i", "--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--out", required=True, help="directory for <output>.npy files")
    run.add_argument("--debug", action="store_true")
    check = sub.add_parser("check", help="compile, interpret and compare with onnxruntime")
    check.add_argument("model")
    _add_compile_options(check)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument(
        "--random-weights", action="store_true", help="replace weights by seeded random values"
    )
    check.add_argument("--debug", action="store_true")
    from npucc.backend.dan import command as dan_command

    dan_command.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `npucc` console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    try:
        if args_list and args_list[0] in COMMANDS:
            args = _sub_parser().parse_args(args_list)
            if args.command == "run":
                return cmd_run(args)
            if args.command == "check":
                return cmd_check(args)
            from npucc.backend.dan import command as dan_command

            return dan_command.main(args)
        return cmd_compile(_parser().parse_args(args_list))
    except NpuccError as exc:
        if debug:
            traceback.print_exc()
        print(f"npucc: error: {exc}", file=sys.stderr)
        return NpuccError.exit_code
    except CheckFailed as exc:
        if debug:
            traceback.print_exc()
        print(f"npucc: check failed: {exc}", file=sys.stderr)
        return CheckFailed.exit_code
    except KeyboardInterrupt:
        print("npucc: interrupted", file=sys.stderr)
        return 130


def _names(text: str) -> frozenset[str]:
    return frozenset(n for n in text.split(",") if n)


def cmd_compile(args: argparse.Namespace) -> int:
    """`npucc MODEL -o OUT.cmd`."""
    from npucc.compiler import compile as compile_model

    model, out = Path(args.model), Path(args.output)
    if out.resolve() == model.resolve():
        raise NpuccError(f"output would overwrite the input model ({out})")
    program = compile_model(
        model,
        args.target,
        args.schedule,
        parse_input_shapes(args.input_shape),
        print_before=_names(args.print_ir_before),
        print_after=_names(args.print_ir_after),
        print_after_all=args.print_ir_after_all,
        dump_dir=args.dump_dir,
    )
    program.save(out)
    stats = program.stats
    print(
        f"wrote {out} ({stats.get('stream_lines', 0)} lines, {stats.get('tile_ops', 0)} tile ops,"
        f" predicted makespan {stats.get('predicted_makespan', 0)} cycles)"
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """`npucc run OUT.cmd -i NAME=FILE.npy --out DIR`."""
    from npucc.interp import run_file

    inputs: dict[str, np.ndarray] = {}
    for item in args.input:
        name, eq, file = item.partition("=")
        if not eq or not name or not file:
            raise NpuccError(f"bad -i '{item}' (expected NAME=FILE.npy)")
        try:
            inputs[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise NpuccError(f"cannot read input '{name}': {exc} ({file})") from None
    result = run_file(args.stream, inputs)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, value in result.outputs.items():
        np.save(out_dir / f"{safe_file_name(name)}.npy", value)
    print(f"makespan {result.makespan} cycles")
    for pipe, cycles in result.pipe_cycles.items():
        print(f"  {pipe:<7} {cycles} busy cycles")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """`npucc check MODEL`: compile, interpret, compare with onnxruntime."""
    from npucc.checking import compare, random_inputs, randomize_weights, run_onnxruntime
    from npucc.compiler import compile as compile_model
    from npucc.frontend import load_model

    shapes = parse_input_shapes(args.input_shape)
    model = load_model(args.model, shapes)
    if args.random_weights:
        model = randomize_weights(model, args.seed)
    program = compile_model(model, args.target, args.schedule, shapes)
    inputs = random_inputs(program.inputs, args.seed)
    result = program.execute(inputs)
    reference = run_onnxruntime(model, inputs)
    ok = True
    for c in compare(result.outputs, reference):
        ok &= c.ok
        print(
            f"{c.name}: max abs error {c.max_abs:.3e}, max |ref| {c.max_ref:.3e},"
            f" relative {c.rel:.3e} {'PASS' if c.ok else 'FAIL'}"
        )
    predicted = program.stats.get("predicted_makespan")
    print(f"makespan: interpreted {result.makespan} cycles, predicted {predicted} cycles")
    if not ok:
        raise CheckFailed(f"outputs differ from onnxruntime ({args.model})")
    print("PASS")
    return 0
