"""The compile summary: what a compiled program costs, in one short table (docs/design.md).

`summarize(target, stats)` turns a program's statistics (`Program.stats`: the predicted
makespan, the roofline, the peak residency per tier, the energy, the host segments) into a
JSON-ready dict; `Program.summary()` returns it, `npucc MODEL` prints it on stderr as a table
(`format_summary`) and writes it with `--summary-json` / `--summary-csv` (`summary_csv`).
Every figure comes from its one home: cycles from the schedule, peaks from
`npucc.ir.residency`, DRAM bytes from the roofline's usage, energy from `isa_cost.instr_energy`.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from npucc.ir.residency import COMBINED
from npucc.target import TIERS, Target

SUMMARY_TIERS = (*TIERS, COMBINED)  # the on-chip rows, each against its capacity


def capacity(target: Target, tier: str) -> int:
    """Bytes of one core's `tier` (L1+UB: the sum of the two)."""
    if tier == COMBINED:
        return target.memory.capacity("L1") + target.memory.capacity("UB")
    return target.memory.capacity(tier)


def summarize(target: Target, stats: dict[str, Any]) -> dict[str, Any]:
    """The summary of a program for `target` from its statistics (see the module docstring)."""
    cycles = int(stats["predicted_makespan"])
    line = stats["roofline"]
    latency_us = cycles / (target.clock_ghz * 1e3)
    peaks = stats.get("peak", {})
    onchip = {}
    for tier in SUMMARY_TIERS:
        cap = capacity(target, tier)
        peak = int(peaks.get(tier, 0))
        onchip[tier] = {"peak": peak, "capacity": cap, "used": round(peak / cap, 6) if cap else 0}
    return {
        "target": target.name,
        "cores": target.cores,
        "precision": target.dtype,
        "clock_ghz": target.clock_ghz,
        "cycles": cycles,
        "latency_us": round(latency_us, 6),
        "inferences_per_s": round(1e6 / latency_us, 3) if cycles else None,
        "roofline_efficiency": round(line["efficiency"], 6),
        "roofline_work": stats.get("roofline_work", "model"),
        "bound_by": line["bound_by"],
        "mac_utilisation": round(line["cube"] / cycles, 6) if cycles else 0.0,
        "onchip": onchip,
        "dram_read": line["ddr_read"],
        "dram_write": line["ddr_write"],
        "energy_uj": round(stats["energy_pj"] * 1e-6, 6),
        "host_segments": [
            {k: seg[k] for k in ("node", "op", "line") if k in seg}
            for seg in stats.get("host_segments", ())
        ],
    }


def _bytes(n: int) -> str:
    return f"{n:,} B"


def format_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary as (figure, value) rows of text: the table's and the report page's."""
    s = summary
    cores = f"{s['cores']} core{'s' if s['cores'] != 1 else ''}"
    rate = "-" if s["inferences_per_s"] is None else f"{s['inferences_per_s']:,.1f}"
    rows = [
        ("target", f"{s['target']} ({cores}, {s['clock_ghz']:g} GHz, {s['precision']})"),
        ("predicted cycles", f"{s['cycles']:,}"),
        ("latency", f"{s['latency_us']:,.3f} us ({rate} inferences/s)"),
        (
            "roofline efficiency",
            f"{s['roofline_efficiency']:.3f} (bound by {s['bound_by']}; {s['roofline_work']} work)",
        ),
        ("MAC utilisation", f"{s['mac_utilisation']:.3f}"),
    ]
    for tier, row in s["onchip"].items():
        if row["peak"] or tier in ("L1", "UB", COMBINED):
            used = f"{_bytes(row['peak'])} of {_bytes(row['capacity'])} ({100 * row['used']:.1f} %)"
            rows.append((f"on-chip peak {tier}", used))
    rows.append(("DRAM read / written", f"{_bytes(s['dram_read'])} / {_bytes(s['dram_write'])}"))
    rows.append(("energy", f"{s['energy_uj']:,.3f} uJ"))
    for seg in s["host_segments"]:
        node = f" (node {seg['node']})" if "node" in seg else ""
        rows.append(("host segment", f"{seg['op']} at stream line {seg['line']}{node}"))
    return rows


def format_summary(summary: dict[str, Any], title: str = "") -> str:
    """The summary as a small text table (rich, no colour), one figure a row."""
    # NOTE: deferred: a compile imports this module, rich only when the table is printed (then
    # the compile's IR is freed: rich's modules do not raise its peak RSS)
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_header=True, title=title or None, title_justify="left")
    table.add_column("figure", no_wrap=True)
    table.add_column("value", no_wrap=True)
    for figure, value in format_rows(summary):
        table.add_row(figure, value)
    out = io.StringIO()
    Console(file=out, width=100, color_system=None, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n") + "\n"


def flat(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary as one flat row: on-chip figures as onchip_TIER_peak/_capacity/_used and the
    host segments as their count."""
    row = {k: v for k, v in summary.items() if k not in ("onchip", "host_segments")}
    for tier, figures in summary["onchip"].items():
        for key, value in figures.items():
            row[f"onchip_{tier}_{key}"] = value
    row["host_segments"] = len(summary["host_segments"])
    return row


def summary_csv(summary: dict[str, Any]) -> str:
    """The summary as CSV: a header line and one row (`flat`)."""
    row = flat(summary)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(row), lineterminator="\n")
    writer.writeheader()
    writer.writerow(row)
    return out.getvalue()
