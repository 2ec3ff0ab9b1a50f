"""`npucc explore SWEEP.toml -o RESULTS_DIR` and `npucc explore --summary RESULTS_DIR`."""

from __future__ import annotations

import argparse
from pathlib import Path

from npucc.errors import NpuccError
from npucc.tools.cli_parsing import COMMANDS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the `explore` subcommand."""
    p = subparsers.add_parser("explore", help=COMMANDS["explore"])
    p.add_argument("sweep", nargs="?", type=Path, help="SWEEP.toml: models, base target, axes")
    p.add_argument("-o", "--output", type=Path, metavar="RESULTS_DIR", help="results directory")
    p.add_argument("--address", help="join the Ray cluster at ADDRESS (default: a local Ray)")
    p.add_argument(
        "--max-parallel", type=int, metavar="N", help="points run at once (default: every CPU)"
    )
    p.add_argument(
        "--check", action="store_true", help="run with data and compare with onnxruntime"
    )
    p.add_argument(
        "--summary", type=Path, metavar="RESULTS_DIR", help="print the Pareto front of results"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run a sweep (or print the summary of its results); exit code 0."""
    # NOTE: deferred: every npucc command builds this parser, and the results page pulls in
    # matplotlib and Ray's runner kahypar (start-up time)
    from npucc.explore.results import RESULTS, read_rows, summary
    from npucc.explore.runner import import_ray, run_sweep
    from npucc.explore.sweep import load_sweep

    if args.summary is not None:
        if args.sweep is not None or args.output is not None:
            raise NpuccError("--summary RESULTS_DIR takes no sweep file and no -o")
        header, rows = read_rows(args.summary / RESULTS)
        print(summary(header, rows), end="")
        return 0
    if args.sweep is None or args.output is None:
        raise NpuccError("explore needs a sweep file and -o RESULTS_DIR (or --summary DIR)")
    if args.max_parallel is not None and args.max_parallel < 1:
        raise NpuccError(f"--max-parallel must be at least 1, got {args.max_parallel}")
    import_ray()
    sweep = load_sweep(args.sweep)
    run = run_sweep(
        sweep,
        args.output,
        address=args.address,
        max_parallel=args.max_parallel,
        check=args.check,
    )
    print(
        f"{run.points} points: {run.computed} computed ({run.failed} not ok), "
        f"{run.skipped} already done; results {run.results}, Pareto plot {run.plot}"
    )
    return 0
