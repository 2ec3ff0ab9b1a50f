"""The package's architecture: imports run one way, no module import cycles, modules stay small.

The layering (target -> ir -> frontend -> transforms -> backend -> codegen -> interp -> tools)
is written as import-linter contracts in pyproject.toml ([tool.importlinter]); these tests run
them on the package and on a copy of it with one violating import added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "npucc"
MAX_LINES = 800


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter's contracts of pyproject.toml on the npucc package under `root`."""
    script = (
        "import sys; from importlinter.cli import lint_imports;"
        " sys.exit(lint_imports('pyproject.toml', no_cache=True, no_logo=True))"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(root)},
    )


def test_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_violating_import_breaks_the_contracts(tmp_path: Path) -> None:
    """An ir module importing the interpreter (a later stage) is caught."""
    shutil.copytree(PACKAGE, tmp_path / "npucc", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    victim = tmp_path / "npucc" / "ir" / "graph.py"
    victim.write_text(victim.read_text() + "\nimport npucc.interp  # noqa: E402,F401\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "npucc.ir.graph -> npucc.interp" in result.stdout


def test_no_import_cycles_between_modules() -> None:
    graph = grimp.build_graph("npucc", exclude_type_checking_imports=True, cache_dir=None)
    imports = nx.DiGraph()
    for module in graph.modules:
        imports.add_node(module)
        imports.add_edges_from((module, m) for m in graph.find_modules_directly_imported_by(module))
    cycles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    assert cycles == []


def test_modules_stay_small() -> None:
    sizes = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    big = {str(p.relative_to(ROOT)): n for p, n in sizes.items() if n > MAX_LINES}
    assert big == {}
