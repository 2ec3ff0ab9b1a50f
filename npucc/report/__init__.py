"""Reports: run a command stream with a trace and draw where its time and memory go.

`write_report(cmd, out_dir)` writes `out_dir/index.html` (self-contained, images referenced
relatively) and its PNGs: the mesh, and per core a Gantt chart of the pipes, the buffer offsets
of each tier over time and the residency with its peak. The page shows the stream's roofline
and, given the compile's per-layer table (`--perf-csv`), that table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from npucc.backend.schedule.roofline import Roofline, stream_roofline
from npucc.errors import NpuccError
from npucc.interp.event_loop import RunResult, load_program, run_stream
from npucc.ir.dtypes import HOST_DTYPES
from npucc.ir.isa import PIPES
from npucc.ir.stream import Stream
from npucc.report import figures
from npucc.report.data import ReportData, collect
from npucc.target import TIERS, Target

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("npucc.report", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


@dataclass(frozen=True, slots=True)
class FigureRef:
    """An image of the page: its file (relative to the page), title and caption."""

    src: str
    title: str
    caption: str


F4 = np.dtype(np.float32)


def random_inputs(stream: Stream, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal inputs of the shapes and float types a stream's header declares."""
    rng = np.random.default_rng(seed)
    return {
        t.name: rng.standard_normal(t.shape).astype(np.float32).astype(HOST_DTYPES.get(t.dtype, F4))
        for t in stream.tensors.values()
        if t.kind == "input"
    }


def write_report(
    cmd_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    inputs: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    layers: list[dict[str, str]] | None = None,
) -> Path:
    """Run `cmd_path` (+ its .bin) traced on `inputs` (default: seeded random); returns the page.

    `layers` is the compile's per-layer table (rows of `--perf-csv`), shown when given.
    """
    cmd = Path(cmd_path)
    stream, image = load_program(cmd)
    feeds = random_inputs(stream, seed) if inputs is None else inputs
    result = run_stream(stream, image, feeds, trace=True)
    line = stream_roofline(stream, result.makespan)
    return render_report(cmd.name, stream.target, result, Path(out_dir), line, layers)


def render_report(
    title: str,
    target: Target,
    result: RunResult,
    out: Path,
    roofline: Roofline | None = None,
    layers: list[dict[str, str]] | None = None,
) -> Path:
    """Draw the figures of a traced run into `out` and write `out/index.html` (with the
    roofline and the per-layer table when given)."""
    data = collect(title, target, result)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NpuccError(f"cannot create report directory: {exc.strerror} ({out})") from None
    assert result.trace is not None
    refs: list[FigureRef] = []
    for (r, c), core in sorted(data.cores.items()):
        suffix = f"{r}-{c}"
        figures.gantt(result.trace, (r, c), out / f"gantt-{suffix}.png")
        figures.memory_map(core, out / f"memory-{suffix}.png")
        figures.residency(core, out / f"residency-{suffix}.png")
        refs += [
            FigureRef(f"gantt-{suffix}.png", f"Pipes of core {r},{c}",
                      "Each instruction from start to finish on its pipe, coloured by opcode."),
            FigureRef(f"memory-{suffix}.png", f"Buffer offsets of core {r},{c}",
                      "Each live buffer as a rectangle: time across, offset in its tier up."),
            FigureRef(f"residency-{suffix}.png", f"Residency of core {r},{c}",
                      "Live bytes per tier over time; the triangle marks the L1+UB peak."),
        ]  # fmt: skip
    busy = {coord: max(core.busy.values(), default=0) for coord, core in data.cores.items()}
    rows, cols = target.mesh.rows, target.mesh.cols
    figures.mesh(rows, cols, busy, result.makespan, out / "mesh.png")
    page = out / "index.html"
    page.write_text(_page(data, refs, roofline, layers or []), encoding="utf-8")
    return page


def render_template(name: str, **values: Any) -> str:
    """Render one of the report package's HTML templates."""
    return _TEMPLATES.get_template(name).render(**values)


def _page(
    data: ReportData,
    refs: list[FigureRef],
    roofline: Roofline | None,
    layers: list[dict[str, str]],
) -> str:
    from npucc import __version__

    result = data.result
    counters = result.counters
    return _TEMPLATES.get_template("report.html.j2").render(
        title=data.title,
        target=data.target.name,
        version=__version__,
        instructions=counters.get("instructions", 0),
        events=counters.get("events", 0),
        metrics=data.metrics(),
        latency_us=data.latency_us,
        clock_ghz=data.target.clock_ghz,
        energy_uj=result.energy * 1e-6,
        peaks=[(t, result.peak[t]) for t in TIERS if t in result.peak],
        pipes=[p for p in PIPES if any(p in c.busy for c in data.cores.values())],
        cores=[data.cores[k] for k in sorted(data.cores)],
        mesh_png="mesh.png",
        figures=refs,
        roofline=roofline,
        layers=layers,
        layer_columns=list(layers[0]) if layers else [],
    )
