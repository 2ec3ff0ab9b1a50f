"""The results of a sweep: one CSV row per point, the Pareto front, its table and its plot."""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from npucc import __version__
from npucc.errors import NpuccError
from npucc.report import render_template

RESULTS = "results.csv"
PLOT = "pareto.png"
PAGE = "report.html"
METRICS = (
    "status",  # ok, error (compile or run failed), mismatch (--check found wrong numbers)
    "latency_us",
    "energy_uj",
    "edp_uj_us",  # energy-delay product
    "latency_cycles",
    "energy_pj",
    "sram_bytes",  # L1+UB+L0A+L0B+L0C over all cores: area proxy
    "macs",  # cube MACs per cycle over all cores: area proxy
    "compile_s",
    "run_s",
    "error",
)
TIMING = ("compile_s", "run_s")  # wall-clock columns: the only ones that vary between runs
FRONT_METRICS = ("latency_us", "energy_uj", "edp_uj_us", "sram_bytes", "macs")


def columns(axes: list[str]) -> list[str]:
    """The CSV header of a sweep with these axis keys."""
    return ["key", "model", *axes, *METRICS]


def cell(value: Any) -> str:
    """A value as written in the CSV (floats round-trip exactly)."""
    return repr(value) if isinstance(value, float) else str(value)


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and complete rows of a results file (a torn last line is dropped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NpuccError(f"no results file ({path})") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise NpuccError(f"cannot read results: {reason} ({path})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    if header[:2] != ["key", "model"] or not set(METRICS) <= set(header):
        raise NpuccError(f"not a results file of npucc explore: bad header ({path})")
    rows = [dict(zip(header, r, strict=True)) for r in reader if len(r) == len(header)]
    return header, rows


@dataclass(slots=True)
class ResultsFile:
    """The results CSV of a sweep, appended row by row (flushed) as points finish."""

    path: Path
    header: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    handle: IO[str] | None = None

    @classmethod
    def open(cls, directory: Path, header: list[str]) -> ResultsFile:
        """Open (or create) DIRECTORY/results.csv; rows already there are kept."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / RESULTS
        rows: list[dict[str, str]] = []
        if path.exists():
            old, rows = read_rows(path)
            if old != header:
                raise NpuccError(
                    f"results were written by a sweep with other columns ({', '.join(old)}); "
                    f"use another results directory ({path})"
                )
        results = cls(path, header, rows)
        results.rewrite(rows)
        results.handle = path.open("a", encoding="utf-8", newline="")
        return results

    def keys(self) -> set[str]:
        """Content keys of the points already in the file."""
        return {row["key"] for row in self.rows}

    def append(self, row: dict[str, str]) -> None:
        """Write one row and flush it, so that an interrupted sweep keeps it."""
        assert self.handle is not None
        csv.writer(self.handle, lineterminator="\n").writerow([row[c] for c in self.header])
        self.handle.flush()
        self.rows.append(row)

    def rewrite(self, rows: list[dict[str, str]]) -> None:
        """Replace the file's rows (through a temporary file renamed into place)."""
        tmp = self.path.with_name(f".{RESULTS}.tmp")
        with tmp.open("w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(self.header)
            writer.writerows([row[c] for c in self.header] for row in rows)
        os.replace(tmp, self.path)
        self.rows = list(rows)

    def close(self, order: list[str] | None = None) -> None:
        """Close the file; with `order` (point keys), rewrite its rows in that order first."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if order is not None:
            rank = {key: i for i, key in enumerate(order)}
            self.rewrite(sorted(self.rows, key=lambda r: rank.get(r["key"], len(rank))))


def pareto_front(rows: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    """Per model, the ok rows no other ok row beats in both latency and energy, by latency."""
    # metrics compare to 9 significant digits (float sums differ in their last bits); of rows
    # with equal latency and energy only the one with the least SRAM, then MACs, stays
    fronts: dict[str, list[dict[str, str]]] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        ok = [r for r in rows if r["model"] == model and r["status"] == "ok"]
        ok.sort(key=_front_order)
        front: list[dict[str, str]] = []
        for row in ok:
            if not front or _rounded(row, "energy_uj") < _rounded(front[-1], "energy_uj"):
                front.append(row)
        fronts[model] = front
    return fronts


def _front_order(row: dict[str, str]) -> tuple[float, float, int, int]:
    return (
        _rounded(row, "latency_us"),
        _rounded(row, "energy_uj"),
        int(row["sram_bytes"]),
        int(row["macs"]),
    )


def _rounded(row: dict[str, str], column: str) -> float:
    """A metric to 9 significant digits: sums in another order compare equal."""
    return float(f"{float(row[column]):.9g}")


def summary(header: list[str], rows: list[dict[str, str]]) -> str:
    """The Pareto front of every model as a text table, after a count of points by status."""
    axes = header[2 : -len(METRICS)]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    lines = [f"{len(rows)} points ({counts or 'none'})"]
    table_header = ["model", *axes, *FRONT_METRICS]
    table = [table_header]
    for front in pareto_front(rows).values():
        table += [[row[c] if c in axes or c == "model" else _short(row[c], c) for c in
                   table_header] for row in front]  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(table_header))]
    lines.append("Pareto front (latency vs energy), per model:")
    for r in table:
        lines.append("  ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def _short(value: str, column: str) -> str:
    return value if column in ("sram_bytes", "macs") else f"{float(value):.6g}"


def plot(rows: list[dict[str, str]], path: Path) -> Path:
    """Latency vs energy of every ok point, one panel per model, the front marked; a PNG."""
    from matplotlib.figure import Figure

    fronts = pareto_front(rows)
    models = list(fronts)
    ncols = min(3, max(1, len(models)))
    nrows = max(1, -(-len(models) // ncols))
    fig = Figure(figsize=(4.5 * ncols, 3.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, model in zip(axes, models, strict=False):
        ok = [r for r in rows if r["model"] == model and r["status"] == "ok"]
        ax.scatter(
            [float(r["latency_us"]) for r in ok],
            [float(r["energy_uj"]) for r in ok],
            s=14,
            color="0.6",
            label="point",
        )
        front = fronts[model]
        ax.step(
            [float(r["latency_us"]) for r in front],
            [float(r["energy_uj"]) for r in front],
            where="post",
            color="tab:red",
            marker="o",
            markersize=5,
            label="Pareto front",
        )
        ax.set_title(model)
        ax.set_xlabel("latency (µs)")
        ax.set_ylabel("energy (µJ)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(models) :]:
        ax.set_visible(False)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    return path


def write_page(rows: list[dict[str, str]], header: list[str], directory: Path) -> Path:
    """A self-contained HTML page: the Pareto plot and, per model, its front as a table."""
    axes = header[2 : -len(METRICS)]
    columns = [*axes, *FRONT_METRICS]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    fronts = [
        (model, [[row[c] if c in axes else _short(row[c], c) for c in columns] for row in front])
        for model, front in pareto_front(rows).items()
    ]
    html = render_template(
        "explore.html.j2",
        title=directory.name,
        points=len(rows),
        statuses=", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none",
        version=__version__,
        plot=PLOT,
        header=columns,
        fronts=fronts,
    )
    path = directory / PAGE
    path.write_text(html, encoding="utf-8")
    return path
