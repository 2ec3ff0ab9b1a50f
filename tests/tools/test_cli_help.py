"""A CLI people can discover: the command list, help on every option, suggestions."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from npucc.backend.planner import METHODS
from npucc.backend.schedule.registry import SCHEDULERS
from npucc.tools.cli import _parser, _sub_parser, main
from npucc.tools.cli_parsing import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the CLI (compile, each subcommand, each benchmark), by its prog."""
    todo = [_parser(), _sub_parser()]
    while todo:
        p = todo.pop()
        yield p.prog, p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += action.choices.values()


def test_help_lists_every_subcommand_with_its_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    sub = next(a for a in _sub_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for choice in sub._choices_actions:  # the subparsers' help is the listed line
        assert choice.help == COMMANDS[choice.dest]
        assert f"  {choice.dest} " in text and COMMANDS[choice.dest] in text
    for name, parser in sub.choices.items():
        assert parser.description == COMMANDS[name][0].upper() + COMMANDS[name][1:] + "."


def test_every_option_and_subcommand_has_help():
    missing = [
        f"{prog} {'/'.join(a.option_strings) or a.dest}"
        for prog, p in _parsers()
        for a in p._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
        and not (a.help and a.help != argparse.SUPPRESS)
    ]
    assert missing == []


def test_choices_in_help_are_what_is_accepted(capsys):
    actions = {a.dest: a for a in _parser()._actions}
    assert tuple(actions["schedule"].choices) == tuple(SCHEDULERS)
    assert tuple(actions["search"].choices) == METHODS
    with pytest.raises(SystemExit):
        main(["--help"])
    assert ",".join(SCHEDULERS) in capsys.readouterr().out.replace("\n", "").replace(" ", "")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["chek", "model.onnx"], "npucc: error: unknown command 'chek' (did you mean 'check'?)\n"),
        (["inspekt"], "npucc: error: unknown command 'inspekt' (did you mean 'inspect'?)\n"),
        (["frobnicate"], "unknown command 'frobnicate' (commands: check, run,"),
        (["models/x.onnx", "--quite"], "unknown option '--quite' (did you mean '--quiet'?)"),
        (["check", "m.onnx", "--randon-weights"], "(did you mean '--random-weights'?)"),
        (["run", "o.cmd", "--pre-core"], "(did you mean '--per-core'?)"),
        (["bench", "dna"], "invalid choice: 'dna'"),
        (["m.onnx", "--schedule", "dann"], "(did you mean 'dan'?)"),
    ],
)
def test_misspellings_suggest_the_closest(capsys, argv, message):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err == message if message.startswith("npucc:") else message in err


def test_chek_from_the_shell_exits_2():
    proc = subprocess.run(
        [sys.executable, "-m", "npucc", "chek", "model.onnx"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == "npucc: error: unknown command 'chek' (did you mean 'check'?)\n"


def test_help_starts_fast():
    """`npucc --help` imports neither the compiler nor onnx (deferred imports)."""
    code = (
        "import sys, time; t = time.perf_counter()\n"
        "from npucc.tools.cli import main\n"
        "try: main(['--help'])\n"
        "except SystemExit: pass\n"
        "heavy = [m for m in ('onnx', 'npucc.compiler', 'onnxruntime') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr)"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.strip() == "[]"
    assert time.perf_counter() - start < 20  # generous: the machine is shared


def test_a_command_builds_only_its_own_parser():
    """`npucc run` and `npucc ir` import neither onnx, the compiler nor the other commands'
    modules (`_sub_parser(command)`); every command's parser is the one of the full set."""
    code = (
        "import sys\n"
        "from npucc.tools.cli import main\n"
        "for argv in (['run', '--help'], ['ir', '--help']):\n"
        "    try: main(argv)\n"
        "    except SystemExit: pass\n"
        "heavy = ('onnx', 'npucc.compiler', 'npucc.backend.schedule.registry',\n"
        "         'npucc.tools.conformance', 'npucc.tools.bench_dan')\n"
        "print([m for m in heavy if m in sys.modules], file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stderr.strip() == "[]"
    every = next(a for a in _sub_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in COMMANDS:
        sub = _sub_parser(name)
        only = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction))
        assert name in only.choices
        assert only.choices[name].format_help() == every.choices[name].format_help()


def test_inspect_reads_a_model_with_the_compile_options():
    """--batch, --input-shape and --fallback are one definition (cli_parsing.add_model_options)."""
    sub = next(a for a in _sub_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parsers = {
        "compile": _parser(),
        "check": sub.choices["check"],
        "inspect": sub.choices["inspect"],
    }
    fields = ("option_strings", "default", "choices", "type", "metavar", "nargs")
    seen = {}
    for name, parser in parsers.items():
        actions = {a.dest: a for a in parser._actions}
        seen[name] = [tuple(getattr(actions[d], f) for f in fields)
                      for d in ("batch", "input_shape", "fallback")]  # fmt: skip
    assert seen["compile"] == seen["check"] == seen["inspect"]
    ok = main(["inspect", str(ROOT / "models" / "mlp.onnx"), "--batch", "2", "--json", "--quiet"])
    assert ok == 0
