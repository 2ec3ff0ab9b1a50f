"""Reports: run a command stream with a trace and draw where its time and memory go.

`write_report(cmd, out_dir)` writes `out_dir/index.html`, the summary page (self-contained,
images referenced relatively): the stream's compile summary (`npucc.summary`, the same figures
as `Program.summary()`), its roofline, the DAN metrics, the per-layer table when given
(`--perf-csv`) and the cores. Per core it draws a Gantt chart of the pipes, the buffer offsets
of each tier over time and the residency of each tier along the schedule order against its
capacity, each figure's legend also listed on the page. One core's figures are on the summary
page; on a mesh the page shows the mesh (busiest pipe per core, NoC bytes per link) and a grid
of the cores, each linking to its page `core-R-C.html` with its figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from npucc import progress
from npucc.backend.schedule.roofline import Roofline
from npucc.compiler import stream_stats
from npucc.errors import NpuccError
from npucc.interp.event_loop import RunResult, load_program, run_stream
from npucc.ir.dtypes import HOST_DTYPES
from npucc.ir.isa import PIPES
from npucc.ir.stream import Stream
from npucc.report import figures
from npucc.report.data import CoreData, ReportData, collect
from npucc.summary import SUMMARY_TIERS, format_rows, summarize
from npucc.summary import capacity as capacity_of

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("npucc.report", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


@dataclass(frozen=True, slots=True)
class FigureRef:
    """An image of a page: its file (relative to the page), title, caption and legend."""

    src: str
    title: str
    caption: str
    legend: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CorePage:
    """One core's row of the summary: its data, and its page when it has one of its own."""

    data: CoreData
    href: str  # its page ("" when its figures are on the summary page)
    figures: list[FigureRef]


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
    return render_report(cmd.name, stream, result, Path(out_dir), layers)


def render_report(
    title: str,
    stream: Stream,
    result: RunResult,
    out: Path,
    layers: list[dict[str, str]] | None = None,
) -> Path:
    """Draw the figures of a traced run of `stream` into `out` and write `out/index.html`: the
    summary page (the compile summary, roofline, DAN metrics, per-layer table when given, the
    cores); on a mesh each core's figures are on a page of their own, `core-R-C.html`."""
    data = collect(title, stream, result)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NpuccError(f"cannot create report directory: {exc.strerror} ({out})") from None
    assert result.trace is not None
    target = stream.target
    capacity = {tier: capacity_of(target, tier) for tier in SUMMARY_TIERS}
    mesh = target.cores > 1
    pages = []
    with progress.stage("report figures"), progress.task("report", len(data.cores)) as bar:
        for k, ((r, c), core) in enumerate(sorted(data.cores.items())):
            if bar is not None:
                bar.update(k, f"report: core {r},{c}")
            refs = _core_figures(result, core, out, capacity)
            href = f"core-{r}-{c}.html" if mesh else ""
            pages.append(CorePage(core, href, refs))
            if mesh:
                html = render_template("core.html.j2", title=title, core=core, figures=refs)
                (out / href).write_text(html, encoding="utf-8")
        mesh_ref = None
        if mesh:
            busy = {coord: max(cd.busy.values(), default=0) for coord, cd in data.cores.items()}
            legend = figures.mesh(target.mesh.rows, target.mesh.cols, busy, result.makespan,
                                  out / "mesh.png", data.links)  # fmt: skip
            mesh_ref = FigureRef("mesh.png", "Mesh",
                                 "Each core shaded by its busiest pipe's share of the makespan; "
                                 "an arrow is a link between neighbouring cores, its width the NoC "
                                 "bytes it carries (from a tensor's home core to the core that "
                                 "reads it, or back for a write; drawn row first, then column)."
                                 if data.noc else "Each core shaded by its busiest pipe's share "
                                 "of the makespan; this run moves nothing over the NoC.",
                                 tuple(legend))  # fmt: skip
    stats = stream_stats(stream, result)
    summary = summarize(target, stats)
    roofline = Roofline(**stats["roofline"])
    page = out / "index.html"
    page.write_text(_page(data, summary, pages, mesh_ref, roofline, layers or []), "utf-8")
    return page


def _core_figures(
    result: RunResult, core: CoreData, out: Path, capacity: dict[str, int]
) -> list[FigureRef]:
    """Draw one core's three figures into `out`."""
    assert result.trace is not None
    r, c = core.coord
    suffix = f"{r}-{c}"
    gantt = figures.gantt(result.trace, (r, c), out / f"gantt-{suffix}.png")
    memory = figures.memory_map(core, out / f"memory-{suffix}.png", capacity)
    live = figures.residency(core, out / f"residency-{suffix}.png", capacity)
    return [
        FigureRef(f"gantt-{suffix}.png", f"Pipes of core {r},{c}",
                  "Each instruction from start to finish on its pipe, coloured by opcode.",
                  tuple(gantt)),
        FigureRef(f"memory-{suffix}.png", f"Buffer offsets of core {r},{c}",
                  "Each live buffer as a rectangle: time across (as interpreted: an alloc is "
                  "issued as soon as its region is free), offset in its tier up; coloured by the "
                  "instruction that first fills it.", tuple(memory)),
        FigureRef(f"residency-{suffix}.png", f"Residency of core {r},{c}",
                  "Live bytes per tier along the core's schedule order (its stream lines), the "
                  "dashed line its capacity, the triangle its peak: the peak residency of the "
                  "compile summary (docs/design.md, \"Peak residency\").", tuple(live)),
    ]  # fmt: skip


def render_template(name: str, **values: Any) -> str:
    """Render one of the report package's HTML templates."""
    return _TEMPLATES.get_template(name).render(**values)


def _page(
    data: ReportData,
    summary: dict[str, Any],
    cores: list[CorePage],
    mesh: FigureRef | None,
    roofline: Roofline,
    layers: list[dict[str, str]],
) -> str:
    from npucc import __version__

    result = data.result
    counters = result.counters
    return render_template(
        "report.html.j2",
        title=data.title,
        target=data.target.name,
        version=__version__,
        instructions=counters.get("instructions", 0),
        events=counters.get("events", 0),
        metrics=data.metrics(),
        summary=summary,
        summary_rows=format_rows(summary),
        pipes=[p for p in PIPES if any(p in c.busy for c in data.cores.values())],
        cores=cores,
        grid={page.data.coord: page for page in cores},
        mesh_rows=data.target.mesh.rows,
        mesh_cols=data.target.mesh.cols,
        mesh=mesh,
        roofline=roofline,
        layers=layers,
        layer_columns=list(layers[0]) if layers else [],
    )
