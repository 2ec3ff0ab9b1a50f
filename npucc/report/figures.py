"""The report's figures (matplotlib, Agg backend), each written as a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PatchCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from npucc.interp.exec_trace import Trace  # noqa: E402
from npucc.ir.isa import PIPES  # noqa: E402
from npucc.ir.residency import COMBINED  # noqa: E402
from npucc.report.data import Coord, CoreData  # noqa: E402
from npucc.target import TIERS  # noqa: E402

OPCODE_COLORS = {
    "copy": "#80b1d3",
    "spill": "#e41a1c",
    "img2col": "#8dd3c7",
    "mmad": "#fb8072",
    "vunary": "#fdb462",
    "vbinary": "#b3de69",
    "vreduce": "#bc80bd",
    "vfill": "#ccebc5",
    "noc": "#ffed6f",
    "gather": "#d9d9d9",
    "host": "#a6cee3",
}
UNFILLED = "#bbbbbb"  # a buffer no instruction writes while it is live
DPI = 100


def _finish(fig: Figure, path: Path, title: str = "") -> list[str]:
    """Title (a suptitle, then a tight layout) and save `fig`; the entries of its legends."""
    if title:
        fig.suptitle(title)
        fig.tight_layout()
    labels = legend_labels(fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return labels


def gantt(trace: Trace, core: Coord, path: Path) -> list[str]:
    """Per pipe of one core, a bar per instruction from start to finish, coloured by opcode;
    returns the legend's entries."""
    pipes = [p for p in PIPES if any(i.queue == p and i.core == core for i in trace.instrs)]
    bars: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for ins in trace.instrs:
        if ins.core == core:
            bars.setdefault((ins.queue, ins.opcode), []).append((ins.start, ins.finish - ins.start))
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(pipes) + 1.6))
    shown: set[str] = set()
    for (pipe, opcode), spans in sorted(bars.items()):
        row = pipes.index(pipe)
        label = opcode if opcode not in shown else None
        shown.add(opcode)
        color = OPCODE_COLORS.get(opcode, "#999999")
        ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=color, label=label, linewidth=0)
    ax.set_yticks(range(len(pipes)), pipes)
    ax.invert_yaxis()
    ax.set_xlabel("cycle")
    ax.set_title(f"Pipes of core {core[0]},{core[1]}")
    if shown:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return _finish(fig, path)


def legend_labels(fig: Figure) -> list[str]:
    """The entries of every legend drawn in `fig`, in order (the page lists them too)."""
    labels: list[str] = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            labels += [t.get_text() for t in legend.get_texts() if t.get_text() not in labels]
    return labels


def memory_map(data: CoreData, path: Path, capacity: dict[str, int]) -> list[str]:
    """Per on-chip tier, each live buffer as a rectangle over time (x) and offset (y), coloured
    by the opcode that first fills it; returns the legend's entries."""
    tiers = [t for t in TIERS if any(i.tier == t for i in data.intervals)] or ["L1"]
    fig, axes = plt.subplots(len(tiers), 1, figsize=(12, 2.2 * len(tiers) + 0.6), squeeze=False)
    end = max(data.makespan, 1)
    fillers = sorted({i.filler for i in data.intervals}, key=lambda f: (f == "", f))
    for ax, tier in zip(axes[:, 0], tiers, strict=True):
        rects, colors = [], []
        top = 1
        for i in (x for x in data.intervals if x.tier == tier):
            rects.append(Rectangle((i.start, i.addr), max(i.end - i.start, end / 2000), i.size))
            colors.append(OPCODE_COLORS.get(i.filler, UNFILLED))
            top = max(top, i.addr + i.size)
        ax.add_collection(
            PatchCollection(rects, facecolors=colors, edgecolors="white", linewidths=0.3)
        )
        ax.set_xlim(0, end)
        ax.set_ylim(0, top)
        ax.set_ylabel(f"{tier} offset (B)")
        ax.set_title(f"{tier}: highest offset {top:,} B of {capacity.get(tier, 0):,} B", fontsize=9)
    handles = [
        Patch(
            color=OPCODE_COLORS.get(f, UNFILLED), label=f"filled by {f}" if f else "never written"
        )
        for f in fillers
    ]
    if handles:
        axes[0, 0].legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small"
        )
    axes[-1, 0].set_xlabel("cycle (as interpreted)")
    return _finish(fig, path, f"Buffer offsets over time, core {data.coord[0]},{data.coord[1]}")


def residency(data: CoreData, path: Path, capacity: dict[str, int]) -> list[str]:
    """Per tier (L1+UB first), its residency along the core's schedule order against the
    tier's capacity, the peak marked; returns the legend's entries."""
    tiers = [t for t in (COMBINED, *TIERS) if t in data.residency]
    fig, axes = plt.subplots(
        max(len(tiers), 1), 1, figsize=(12, 1.9 * max(len(tiers), 1) + 0.8), squeeze=False
    )
    last = max((s[-1][0] for s in data.residency.values()), default=1)
    for ax, tier in zip(axes[:, 0], tiers, strict=False):
        series = data.residency[tier]
        lines = [t for t, _ in series] + [last]
        values = [v for _, v in series] + [series[-1][1]]
        cap = capacity[tier]
        ax.step(lines, values, where="post", label="live bytes", linewidth=1.6)
        ax.axhline(cap, color="#d62728", linestyle="--", linewidth=1.2, label="capacity")
        peak_line, peak = max(series, key=lambda s: (s[1], -s[0]))
        if peak:
            ax.plot([peak_line], [peak], "v", color="black", markersize=8, label="peak")
            ax.annotate(
                f"peak {peak:,} B ({100 * peak / cap:.1f} %) at line {peak_line}",
                (peak_line, peak),
                textcoords="offset points",
                xytext=(8, -12),
                fontsize=8,
            )
        ax.set_ylim(0, cap * 1.08)
        ax.ticklabel_format(axis="y", style="plain")
        ax.set_ylabel(f"{tier} (B)")
    if tiers:
        axes[0, 0].legend(loc="upper right", fontsize="small")
    axes[-1, 0].set_xlabel("stream line (schedule order)")
    return _finish(fig, path, f"Residency against capacity, core {data.coord[0]},{data.coord[1]}")


def mesh(
    rows: int,
    cols: int,
    busy: dict[Coord, int],
    makespan: int,
    path: Path,
    links: dict[tuple[Coord, Coord], int] | None = None,
) -> list[str]:
    """The mesh: each core shaded by its busiest pipe's share of the makespan, and an arrow per
    link between neighbouring cores, its width by the NoC bytes it carries; returns the legend."""
    fig, ax = plt.subplots(figsize=(max(3.5, 1.1 * cols + 2.5), max(3.0, 1.1 * rows + 1.2)))
    util = [[busy.get((r, c), 0) / max(makespan, 1) for c in range(cols)] for r in range(rows)]
    image = ax.imshow(util, cmap="viridis", vmin=0, vmax=1)
    small = rows * cols > 16
    for (r, c), cycles in busy.items():
        text = f"{100 * cycles / max(makespan, 1):.0f}%" if small else f"{cycles}\ncycles"
        ax.text(c, r, text, ha="center", va="center", color="white", fontsize=6 if small else 8)
    if links:
        heaviest = max(links.values())
        for ((r0, c0), (r1, c1)), nbytes in links.items():
            # the two directions of a link side by side: shifted across it, by direction
            dx = 0.12 * ((r1 > r0) - (r1 < r0))
            dy = 0.12 * ((c0 > c1) - (c0 < c1))
            ax.annotate(
                "",
                (c1 + dx, r1 + dy),
                (c0 + dx, r0 + dy),
                arrowprops={
                    "arrowstyle": "->",
                    "color": "#ff7f0e",
                    "alpha": 0.8,
                    "lw": 0.4 + 3.5 * nbytes / heaviest,
                    "shrinkA": 8,
                    "shrinkB": 8,
                },
            )
        ax.plot([], [], color="#ff7f0e", label=f"NoC bytes per link (widest {heaviest:,} B)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06), fontsize="small")
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_title("Mesh: busiest pipe / makespan")
    fig.colorbar(image, ax=ax, fraction=0.046)
    return _finish(fig, path)
