"""hcest17: the critical path back from a layer run's last node in a dumped mesh timing.

`python bench/hcest17/critical.py DAG.pkl NAME [STEPS]`: from NAME's latest-finishing node,
walk back to the predecessor that set each start (pipe order, a data edge in the core, a
cross-core flag) or the channel wait that stretched a finish; print the chain by layer run."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path


def chain(d: dict, v: int, steps: int = 40):
    """[(name, core, kind, start, finish, cause)] back from node v, one entry per layer change."""
    preds: list[list[tuple[int, int]]] | None = d.get("_preds")
    if preds is None:
        preds = [[] for _ in d["cycles"]]
        for u, succ in enumerate(d["succs"]):
            for w, lat in succ:
                preds[w].append((u, lat))
        d["_preds"] = preds
    start, finish, cycles, pipes = d["start"], d["finish"], d["cycles"], d["pipes"]
    out = []
    last = None
    while v is not None and len(out) < steps:
        wait = finish[v] - start[v] - cycles[v]  # the channel's wait (a DDR transfer)
        best, cause = None, "start 0"
        for u, lat in preds[v]:
            if finish[u] + lat == start[v]:
                same = pipes[u] is not None and pipes[u] == pipes[v]
                kind = "pipe" if same else ("flag" if d["core"][u] != d["core"][v] else "dep")
                if best is None or (kind != "pipe" and cause == "pipe"):
                    best, cause = u, kind
        key = (d["names"][v], d["core"][v])
        if key != last or wait > 0:
            out.append((d["names"][v], d["core"][v], d["kinds"][v], start[v], finish[v],
                        cause, wait))  # fmt: skip
            last = key
        if start[v] == 0:
            break
        v = best
    return out


if __name__ == "__main__":
    d = pickle.loads(Path(sys.argv[1]).read_bytes())
    name = sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    nodes = [v for v, n in enumerate(d["names"]) if n == name]
    v = max(nodes, key=lambda v: d["finish"][v])
    for row in chain(d, v, steps):
        print(*row)
