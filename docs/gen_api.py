"""Generate docs/api.md, the API reference, from the package's docstrings and signatures.

griffe (the `[docs]` extra) reads the sources statically, without importing npucc; this script
lays the public API out as Markdown. tests/test_api_docs.py regenerates the page and compares.

    python docs/gen_api.py          # rewrite docs/api.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"

# (section, [(public name, the object's path in the package)])
API = [
    ("Compiling", [
        ("npucc.compile", "compiler.compile"),
        ("npucc.compile_until", "compiler.compile_until"),
        ("npucc.CompileOptions", "options.CompileOptions"),
        ("npucc.compiler.compile_program", "compiler.compile_program"),
    ]),
    ("Programs", [
        ("npucc.Program", "compiler.Program"),
        ("npucc.load", "compiler.load"),
        ("npucc.ir.stream.TensorSpec", "ir.stream.TensorSpec"),
    ]),
    ("The compile summary", [
        ("npucc.summary.summarize", "summary.summarize"),
        ("npucc.summary.format_summary", "summary.format_summary"),
        ("npucc.summary.summary_csv", "summary.summary_csv"),
        ("npucc.ir.residency.stream_residency", "ir.residency.stream_residency"),
    ]),
    ("Targets", [
        ("npucc.Target", "target.Target"),
        ("npucc.load_target", "target.load_target"),
    ]),
    ("Running and reporting", [
        ("npucc.interp.run_stream", "interp.event_loop.run_stream"),
        ("npucc.interp.event_loop.RunResult", "interp.event_loop.RunResult"),
        ("npucc.report.write_report", "report.write_report"),
        ("npucc.ir.formats.parse_ir", "ir.formats.parse_ir"),
        ("npucc.ir.formats.render", "ir.formats.render"),
    ]),
    ("Progress", [
        ("npucc.progress.mode", "progress.mode"),
        ("npucc.progress.reporting", "progress.reporting"),
        ("npucc.progress.stage", "progress.stage"),
        ("npucc.progress.task", "progress.task"),
    ]),
    ("Errors", [
        ("npucc.NpuccError", "errors.NpuccError"),
        ("npucc.CheckFailed", "errors.CheckFailed"),
    ]),
]  # fmt: skip


def _signature(func: griffe.Function) -> str:
    """`(a, b=1, *, c: int = 2) -> R` from griffe's parameters (self and cls left out)."""
    parts: list[str] = []
    star = False
    for p in func.parameters:
        if p.name in ("self", "cls"):
            continue
        kind = p.kind.value if p.kind is not None else ""
        if kind == "keyword-only" and not star:
            parts.append("*")
            star = True
        text = {"variadic positional": f"*{p.name}", "variadic keyword": f"**{p.name}"}.get(
            kind, p.name
        )
        if kind == "variadic positional":
            star = True
        if p.annotation is not None:
            text += f": {p.annotation}"
        if p.default is not None:
            text += f" = {p.default}" if p.annotation is not None else f"={p.default}"
        parts.append(text)
    returns = f" -> {func.returns}" if func.returns is not None else ""
    return f"({', '.join(parts)}){returns}"


def _cell(text: str) -> str:
    """Text for a Markdown table cell (a `|` of a union type would end the cell)."""
    return text.replace("|", "\\|")


def _doc(obj: griffe.Object) -> str:
    return obj.docstring.value.strip() if obj.docstring else "(no docstring)"


def _public(cls: griffe.Class) -> tuple[list[griffe.Attribute], list[griffe.Function]]:
    """A class's public fields (with their annotations) and methods, in source order."""
    fields, methods = [], []
    for name, member in cls.members.items():
        if name.startswith("_") or member.is_alias:
            continue
        if isinstance(member, griffe.Attribute) and member.annotation is not None:
            fields.append(member)
        elif isinstance(member, griffe.Function):
            methods.append(member)
    return fields, methods


def _entry(public: str, obj: griffe.Object) -> list[str]:
    if isinstance(obj, griffe.Function):
        return [f"### `{public}{_signature(obj)}`", "", _doc(obj), ""]
    assert isinstance(obj, griffe.Class), public
    bases = f"({', '.join(str(b) for b in obj.bases)})" if obj.bases else ""
    out = [f"### class `{public}{bases}`", "", _doc(obj), ""]
    fields, methods = _public(obj)
    if fields:
        out += ["| field | type |", "|---|---|"]
        out += [f"| `{f.name}` | `{_cell(str(f.annotation))}` |" for f in fields]
        out.append("")
    for m in methods:
        prop = " (property)" if "property" in m.labels else ""
        out += [f"#### `{m.name}{_signature(m)}`{prop}", "", _doc(m), ""]
    return out


def render() -> str:
    """The whole page."""
    package = griffe.load(
        "npucc", search_paths=[str(ROOT)], try_relative_path=False, resolve_aliases=False
    )
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py` (griffe, the `[docs]` extra);",
        "tests/test_api_docs.py checks it is current. The README's Python section shows the API",
        "in use.",
        "",
    ]
    for section, entries in API:
        lines += [f"## {section}", ""]
        for public, path in entries:
            lines += _entry(public, package[path])
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    """Rewrite docs/api.md (or with --check, exit 1 when it is stale)."""
    text = render()
    if "--check" in sys.argv[1:]:
        return 0 if PAGE.read_text(encoding="utf-8") == text else 1
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
