"""The CLI's argument parsing conventions: one-line errors, suggestions, the command list."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from npucc.errors import NpuccError

# every subcommand and its one-line description (`npucc --help` lists them; each subparser's
# help and description are these, tests/tools/test_cli_help.py checks they agree)
COMMANDS = {
    "check": "compile a model, interpret it and compare its outputs with onnxruntime",
    "run": "execute a command stream in the interpreter (outputs, cycles, energy)",
    "inspect": "a model's inputs, outputs, MACs, weights and which operators npucc supports",
    "ops": "the supported-operator table (the one docs/operators.md is generated from)",
    "ir": "parse an IR dump of any level (or a command stream) and print it",
    "report": "run a stream traced and write an HTML page with figures",
    "dan": "schedule an operator-level trace (DAN) and write its metrics",
    "bench": "benchmarks: dan (per-core schedulers), hypercut (mesh plans)",
    "conformance": "run the ONNX backend node tests and tabulate them per operator",
    "explore": "design-space exploration: sweep targets x models x options on Ray",
}


def closest(word: str, choices: Iterator[str] | list[str] | tuple[str, ...]) -> str | None:
    """The choice most like `word` (difflib), or None when none is close."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterator[str] | list[str] | tuple[str, ...]) -> str:
    """` (did you mean 'X'?)` for the closest choice, or ''."""
    match = closest(word, choices)
    return f" (did you mean '{match}'?)" if match else ""


def check_command(first: str) -> None:
    """Refuse a first argument that is neither a subcommand nor plausibly a model path."""
    if first.startswith("-") or first in COMMANDS:
        return
    if "." in first or "/" in first or "\\" in first or Path(first).exists():
        return  # a model to compile
    hint = did_you_mean(first, tuple(COMMANDS))
    if not hint:
        hint = f" (commands: {', '.join(COMMANDS)}; to compile a model, give its .onnx path)"
    raise NpuccError(f"unknown command '{first}'{hint}")


def command_list() -> str:
    """The `commands:` section of `npucc --help`."""
    width = max(map(len, COMMANDS)) + 2
    lines = ["commands (npucc COMMAND --help for each):"]
    lines += [f"  {name:<{width}}{text}" for name, text in COMMANDS.items()]
    return "\n".join(lines)


def _option_strings(parser: argparse.ArgumentParser) -> Iterator[str]:
    """Every option string of `parser` and of its subcommands' parsers."""
    for action in parser._actions:
        yield from action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _option_strings(sub)


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse with npucc's error convention: one `npucc: error:` line, exit code 2, and the
    closest option or choice suggested for a misspelled one."""

    def error(self, message: str) -> NoReturn:
        """Report a usage error without the usage block."""
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        choice = re.search(r"invalid choice: '(.*?)' \(choose from (.*)\)", message)
        if unknown:
            words = unknown.group(1).split()
            options = sorted(set(_option_strings(self)))
            for word in words:
                if word.startswith("-"):
                    hint = did_you_mean(word.partition("=")[0], options)
                    self.exit(
                        2, f"npucc: error: unknown option '{word}'{hint} (see {self.prog} --help)\n"
                    )
        elif choice:
            options = re.findall(r"'(.*?)'", choice.group(2))
            message += did_you_mean(choice.group(1), options)
        self.exit(2, f"npucc: error: {message} (see {self.prog} --help)\n")


def describe(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """Give subcommand `name`'s parser its description from COMMANDS; returns the parser."""
    parser.description = COMMANDS[name][0].upper() + COMMANDS[name][1:] + "."
    return parser


def add_model_options(p: argparse.ArgumentParser, fallback_help: str = "") -> None:
    """The options that say how a model is read: --batch, --input-shape and --fallback."""
    p.add_argument(
        "--batch", type=int, metavar="N", help="fix the symbolic batch dimension of the inputs"
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="fix the shape of a model input, e.g. input=1x3x224x224 (repeatable)",
    )
    p.add_argument(
        "--fallback",
        default="error",
        choices=("error", "host"),
        help=fallback_help
        or "an operator npucc cannot lower: refuse the model (error, default) or run it on "
        "the host with onnxruntime (host)",
    )


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


def make_dirs(directory: Path) -> None:
    """Create `directory` and its parents; an NpuccError naming it when that fails."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = "a file of that name exists" if isinstance(exc, FileExistsError) else exc.strerror
        raise NpuccError(f"cannot write: cannot create directory {directory}: {reason}") from None
