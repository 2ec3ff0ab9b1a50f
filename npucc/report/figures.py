"""The report's figures (matplotlib, Agg backend), each written as a PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PatchCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from npucc.interp.exec_trace import Trace  # noqa: E402
from npucc.ir.isa import PIPES  # noqa: E402
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
}
DPI = 100


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def gantt(trace: Trace, core: Coord, path: Path) -> Path:
    """Per pipe of one core, a bar per instruction from start to finish, coloured by opcode."""
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
    return _save(fig, path)


def memory_map(data: CoreData, path: Path) -> Path:
    """Per on-chip tier, each live buffer as a rectangle over time (x) and offset (y)."""
    tiers = [t for t in TIERS if any(i.tier == t for i in data.intervals)] or ["L1"]
    fig, axes = plt.subplots(len(tiers), 1, figsize=(12, 2.2 * len(tiers) + 0.6), squeeze=False)
    cmap = matplotlib.colormaps["tab20"]
    end = max(data.makespan, 1)
    for ax, tier in zip(axes[:, 0], tiers, strict=True):
        rects, colors = [], []
        top = 1
        for k, i in enumerate(x for x in data.intervals if x.tier == tier):
            rects.append(Rectangle((i.start, i.addr), max(i.end - i.start, end / 2000), i.size))
            colors.append(cmap(k % 20))
            top = max(top, i.addr + i.size)
        ax.add_collection(PatchCollection(rects, facecolors=colors, edgecolors="none"))
        ax.set_xlim(0, end)
        ax.set_ylim(0, top)
        ax.set_ylabel(f"{tier} offset (B)")
    axes[-1, 0].set_xlabel("cycle")
    axes[0, 0].set_title(f"Buffer offsets over time, core {data.coord[0]},{data.coord[1]}")
    return _save(fig, path)


def residency(data: CoreData, path: Path) -> Path:
    """Live bytes per tier and of L1+UB over time, with the L1+UB peak marked."""
    fig, ax = plt.subplots(figsize=(12, 3.6))
    for tier, series in data.residency.items():
        times = [t for t, _ in series] + [max(data.makespan, series[-1][0])]
        values = [v for _, v in series] + [series[-1][1]]
        width = 2.2 if tier == "L1+UB" else 1.0
        ax.step(times, values, where="post", label=tier, linewidth=width)
    if data.peak:
        ax.plot([data.peak_time], [data.peak], "v", color="black", markersize=9)
        ax.annotate(
            f"peak {data.peak} B at cycle {data.peak_time}",
            (data.peak_time, data.peak),
            textcoords="offset points",
            xytext=(8, 6),
        )
    ax.set_xlabel("cycle")
    ax.set_ylabel("live bytes")
    ax.set_title(f"Residency, core {data.coord[0]},{data.coord[1]}")
    if data.residency:
        ax.legend(loc="upper right", fontsize="small")
    return _save(fig, path)


def mesh(
    rows: int,
    cols: int,
    busy: dict[Coord, int],
    makespan: int,
    path: Path,
    links: dict[tuple[Coord, Coord], int] | None = None,
) -> Path:
    """The mesh: each core shaded by its busiest pipe's share of the makespan.

    `busy` gives per core the busiest pipe's cycles; `links` (NoC bytes per directed pair of
    neighbouring cores) are drawn as arrows of proportional width when more than one core exists.
    """
    fig, ax = plt.subplots(figsize=(max(3.0, 1.2 * cols + 1.5), max(2.6, 1.2 * rows + 1)))
    util = [[busy.get((r, c), 0) / max(makespan, 1) for c in range(cols)] for r in range(rows)]
    image = ax.imshow(util, cmap="viridis", vmin=0, vmax=1)
    for (r, c), cycles in busy.items():
        ax.text(c, r, f"{cycles}\ncycles", ha="center", va="center", color="white", fontsize=8)
    if rows * cols > 1 and links:
        heaviest = max(links.values())
        for ((r0, c0), (r1, c1)), nbytes in links.items():
            ax.annotate(
                "",
                (c1, r1),
                (c0, r0),
                arrowprops={"arrowstyle": "->", "lw": 0.5 + 4 * nbytes / heaviest},
            )
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_title("Mesh: busiest pipe / makespan")
    fig.colorbar(image, ax=ax, fraction=0.046)
    return _save(fig, path)
