"""The README's examples run: every ```sh line and ```python block, in a temporary directory.

A block preceded by `<!-- readme-test: slow -->` runs only with NPUCC_README_SLOW=1; the
`setup` block is checked against .ci/run instead of run. A shell line whose comment says
`# exit N` must exit with N, every other line and block with 0.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from npucc.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARK = re.compile(r"<!-- readme-test: (\w+)")
EXIT = re.compile(r"#\s*exit (\d+)")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced example: its language, mark (setup, slow or ''), first line and text."""

    lang: str
    mark: str
    line: int
    text: str


def blocks(markdown: str) -> list[Block]:
    """The ```sh and ```python blocks of a markdown text, each with the mark just above it."""
    found, lines, i = [], markdown.splitlines(), 0
    while i < len(lines):
        fence = re.fullmatch(r"```(\w*)\s*", lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        mark = MARK.match(lines[i - 1]) if i else None
        if fence.group(1) in ("sh", "python"):
            body = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(Block(fence.group(1), mark.group(1) if mark else "", i + 2, body))
        i = end + 1
    return found


def _workdir(tmp: Path) -> dict[str, str]:
    """A copy of models/, links to tests/ and bench/, and `npucc`/`python` on PATH running
    the package under test with this interpreter; the environment to run in."""
    shutil.copytree(ROOT / "models", tmp / "models", ignore=shutil.ignore_patterns("*.py"))
    for name in ("tests", "bench"):
        (tmp / name).symlink_to(ROOT / name)
    bin_dir = tmp / ".bin"
    bin_dir.mkdir()
    for name, command in (("npucc", f"{sys.executable} -m npucc"), ("python", sys.executable)):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PATH": path, "PYTHONPATH": pythonpath, "NO_COLOR": "1"}


def _commands(block: Block) -> list[tuple[int, str, int]]:
    """A shell block's commands (continued lines joined): first line, text, expected exit."""
    commands: list[tuple[int, str, int]] = []
    pending, start = "", 0
    for k, line in enumerate(block.text.splitlines()):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if not pending:
            start = block.line + k
        pending += line.removesuffix("\\") + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            code = EXIT.search(pending)
            commands.append((start, pending, int(code.group(1)) if code else 0))
            pending = ""
    return commands


def _npucc_in_process(line: str, cwd: Path) -> tuple[int, str] | None:
    """Run a plain `npucc ARGS [2> FILE]` line through `main` in this process (no interpreter
    start-up); its exit code and stderr, or None when the line needs a shell."""
    tokens = shlex.split(line, comments=True)
    if tokens[:1] != ["npucc"] or any(t in ("|", "&&", ";", ">", "<") for t in tokens):
        return None
    err_file = None
    if "2>" in tokens:
        at = tokens.index("2>")
        err_file, tokens = tokens[at + 1], tokens[:at] + tokens[at + 2 :]
    argv = []
    for t in tokens[1:]:  # globs expand as the shell does: sorted, or kept when nothing matches
        argv += sorted(str(p.relative_to(cwd)) for p in cwd.glob(t)) if "*" in t else []
        argv += [t] if "*" not in t or not list(cwd.glob(t)) else []
    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's --help and usage errors
                code = exc.code if isinstance(exc.code, int) else 1
        if err_file is not None:
            Path(err_file).write_text(err.getvalue())
    finally:
        os.chdir(old)
    return code, err.getvalue()


def run_blocks(found: list[Block], tmp: Path, slow: bool = False) -> list[str]:
    """Run the blocks in order in `tmp`; one message per failed command or block."""
    env, failures = _workdir(tmp), []
    for block in found:
        if block.mark == "setup" or (block.mark == "slow" and not slow):
            continue
        if block.lang == "python":
            commands = [(block.line, "python block", 0)]
        else:
            commands = _commands(block)
        for lineno, label, want in commands:
            done = _npucc_in_process(label, tmp) if block.lang == "sh" else None
            if done is None:
                argv = [sys.executable, "-c", block.text] if block.lang == "python" else None
                proc = subprocess.run(
                    argv or ["bash", "-c", label], cwd=tmp, env=env, capture_output=True,
                    text=True, timeout=900, check=False,
                )  # fmt: skip
                done = proc.returncode, proc.stderr
            if done[0] != want:
                tail = (done[1].strip().splitlines() or [""])[-1]
                failures.append(
                    f"README.md:{lineno}: {label.strip()}: exit {done[0]}, expected {want}: {tail}"
                )
    return failures


def test_readme_examples_run(tmp_path):
    found = blocks(README.read_text(encoding="utf-8"))
    assert {b.lang for b in found} == {"sh", "python"} and len(found) >= 8
    slow = os.environ.get("NPUCC_README_SLOW") == "1"
    assert run_blocks(found, tmp_path, slow) == []


def test_readme_set_up_is_what_ci_runs():
    """The set-up block holds the two commands of .ci/run (its pip adds only quiet flags)."""
    (setup,) = [b for b in blocks(README.read_text(encoding="utf-8")) if b.mark == "setup"]
    readme = [shlex.split(line) for line in setup.text.splitlines() if line.strip()]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    ci = [shlex.split(line) for line in ci_lines if line.startswith("python ")]
    ci_pip = next(c for c in ci if c[:3] == ["python", "-m", "pip"])
    quiet = ("--quiet", "--disable-pip-version-check")
    assert readme[0] == ["pip", *(a for a in ci_pip[3:] if a not in quiet)]
    assert readme[1] in ci and readme[1][:3] == ["python", "-m", "pytest"]
    assert len(readme) == 2


BROKEN = """
```sh
npucc models/small_cnn.onnx -o out.cmd --dump-dir dumps/
npucc ir dumps/09-schedule.txt
npucc ops --supported     # exit 2: (it does not fail)
```

```python
from npucc.ir.formats import parse_ir
level, ir = parse_ir(open("dumps/09-schedule.txt").read())
```
"""


def test_readme_test_fails_on_a_broken_example(tmp_path):
    """The README's old dump names (and a wrong exit code) are caught, with their lines."""
    failures = run_blocks(blocks(BROKEN), tmp_path)
    assert len(failures) == 3, failures
    assert failures[0].startswith("README.md:4: npucc ir dumps/09-schedule.txt: exit 2")
    assert "No such file" in failures[0]
    assert failures[1].startswith("README.md:5: npucc ops --supported") and "exit 0" in failures[1]
    assert failures[2].startswith("README.md:9: python block: exit 1")
    assert "FileNotFoundError" in failures[2]


@pytest.mark.parametrize("lang", ["sh", "python"])
def test_blocks_keep_their_marks(lang):
    text = f"<!-- readme-test: slow -->\n```{lang}\nx\n```\n```text\ny\n```\n"
    assert blocks(text) == [Block(lang, "slow", 3, "x\n")]
