"""sqz64: per step of each plan in compare.py's JSON (ARGV[1]): the estimate's end and span
against the executed end and span, and the energy per step (estimate, executed)."""

from __future__ import annotations

import json
import sys


def base(name: str) -> str:
    """A run's or program layer's graph layer name (no part suffix)."""
    return name.split("@")[0]


def per_step(d: dict) -> list[dict]:
    """Rows per step: layers, nsub, loop, est end/energy, executed end/energy."""
    step_of = {}
    for si, st in enumerate(d["steps"]):
        for g in st["groups"]:
            for name in g[:-1]:
                step_of[name] = si
    n = len(d["steps"])
    est_end, est_e = [0] * n, [0.0] * n
    pending = 0.0  # a stage run's energy joins the next layer run's step
    for name, end, energy, _, _ in d["estimate"]["runs"]:
        if name == "stage":
            pending += energy
            continue
        s = step_of[base(name)]
        est_end[s] = max(est_end[s], end)
        est_e[s] += energy + pending
        pending = 0.0
    ex_end, ex_e, other = [0] * n, [0.0] * n, 0.0
    for name, (_, end, energy) in d["executed"]["layers"].items():
        s = step_of.get(base(name))
        if s is None:
            s = step_of.get(name.split(".")[0])
        if s is None:
            other += energy
            continue
        ex_end[s] = max(ex_end[s], end)
        ex_e[s] += energy
    rows = []
    for s, st in enumerate(d["steps"]):
        rows.append(
            {
                "step": s,
                "nsub": st["nsub"],
                "loop": st["loop"],
                "groups": [(g[:-1], g[-1]) for g in st["groups"]],
                "est_end": est_end[s],
                "ex_end": ex_end[s],
                "est_e": est_e[s],
                "ex_e": ex_e[s],
            }
        )
    if other:
        rows.append({"step": "other", "ex_e": other})
    return rows


if __name__ == "__main__":
    data = json.load(open(sys.argv[1]))
    for method, d in data.items():
        print(
            f"== {method}: est {d['estimate']['latency']} exec {d['executed']['makespan']}"
            f" energy est {d['estimate']['energy']:.6g} exec-sum {d['executed']['energy']:.6g}"
        )
        pe = px = 0
        for r in per_step(d):
            if r["step"] == "other":
                print("other energy", r["ex_e"])
                continue
            gs = " | ".join(f"{'+'.join(g)}@{tuple(rc)}" for g, rc in r["groups"])
            print(
                f"{r['step']:3d} n{r['nsub']:<2d}{'L' if r['loop'] else ' '} est {r['est_end']:8d}"
                f" (+{r['est_end'] - pe:7d}) exec {r['ex_end']:8d} (+{r['ex_end'] - px:7d})"
                f" d {r['est_end'] - r['ex_end']:+7d} E {r['est_e']:.4e} {r['ex_e']:.4e} {gs}"
            )
            pe, px = r["est_end"], r["ex_end"]
