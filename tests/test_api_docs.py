"""docs/api.md is generated from the docstrings (docs/gen_api.py, griffe) and kept current."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _generator(root: Path):
    spec = importlib.util.spec_from_file_location("gen_api", root / "docs" / "gen_api.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def text() -> str:
    """The page as the generator renders it from this checkout."""
    return _generator(ROOT).render()


def test_api_page_is_current(text):
    assert (ROOT / "docs" / "api.md").read_text(encoding="utf-8") == text, (
        "docs/api.md is stale: run python docs/gen_api.py"
    )


def test_api_page_documents_the_public_api_and_follows_the_docstrings(text, tmp_path):
    names = ("npucc.compile(", "class `npucc.Program", "#### `summary() -> dict[str, Any]`",
             "npucc.load(", "npucc.summary.summarize(", "npucc.report.write_report(")  # fmt: skip
    for name in names:
        assert name in text, name
    assert "(no docstring)" not in text
    # a changed docstring changes the page: generate from a copy of the package with one edited
    shutil.copytree(
        ROOT / "npucc", tmp_path / "npucc", ignore=shutil.ignore_patterns("__pycache__")
    )
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "gen_api.py", tmp_path / "docs" / "gen_api.py")
    summary = tmp_path / "npucc" / "summary.py"
    source = summary.read_text()
    assert '"""The summary of a program for' in source
    summary.write_text(source.replace('"""The summary of a program for', '"""EDITED: summary for'))
    edited = _generator(tmp_path).render()
    assert edited != text and "EDITED: summary for" in edited
    assert re.sub(r"EDITED: summary for", "The summary of a program for", edited) == text
