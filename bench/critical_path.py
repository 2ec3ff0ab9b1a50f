"""Benchmark: what serialises a one-core program's DAN schedule (its critical chain, idle pipes).

Usage: python bench/critical_path.py [--model mobilenet_v2] [--until LAYER]

Compiles a bench/roofline.py model for davinci-core with dan and reads core 0's replay:
- each pipe's busy share up to the end of layer `--until` (default: the last layer);
- its idle cycles before that time, each gap charged to what bound the node ending it: the
  predecessor edge (through pipe-less ALLOC/FREE/BARRIER nodes) from which pipe, and whether
  from the same layer or an earlier one;
- the critical chain (walked back from the last finisher through the binding edge or the
  pipe's previous node): its cycles by pipe and by what bound each step;
- two what-ifs on the same DAG and memory plan (G2: graph and address-reuse edges): the
  longest path with unlimited pipes, and every pipe running any ready node (DAN's position
  first) instead of its queue in order; each also without the reuse edges.
"""

from __future__ import annotations

import argparse
import heapq
from collections import Counter

from roofline import MODELS, TARGET

from npucc.compiler import compile_until
from npucc.ir.replay import Replay


def _preds(r: Replay) -> list[list[tuple[int, str]]]:
    preds: list[list[tuple[int, str]]] = [[] for _ in r.nodes]
    for kind, edges in (
        ("edge", r.graph.edges()),
        ("spill", r.spill_edges),
        ("reuse", r.reuse_edges),
    ):
        for src, dst in edges:
            preds[dst].append((src, kind))
    return preds


def _binding(r: Replay, preds: list[list[tuple[int, str]]], v: int) -> tuple[int, str]:
    """The pipe node whose finish bound v's start (through pipe-less nodes), and the edge kind."""
    kind = "none"
    while True:
        u = next(((w, k) for w, k in preds[v] if r.finish[w] == r.start[v]), None)
        if u is None:
            return v, kind
        v, kind = u[0], (u[1] if kind in ("none", "edge") else kind)
        if r.nodes[v].pipe is not None or r.start[v] == 0:
            return v, kind


def idle(r: Replay, preds: list[list[tuple[int, str]]], until: int) -> None:
    """Each pipe's busy share and idle gaps before `until`, by cause."""
    for pipe in sorted({v.pipe for v in r.nodes if v.pipe is not None}):
        seq = [v for v in r.order if r.nodes[v].pipe == pipe and r.start[v] < until]
        busy = sum(min(r.finish[v], until) - r.start[v] for v in seq)
        causes: Counter[str] = Counter()
        last = 0
        for v in seq:
            if r.start[v] > last:
                u, kind = _binding(r, preds, v)
                where = "same layer" if r.nodes[u].layer == r.nodes[v].layer else "earlier layer"
                causes[f"{kind} from {r.nodes[u].pipe or r.nodes[u].op} ({where})"] += (
                    r.start[v] - last
                )
            last = r.finish[v]
        print(f"{pipe:6s} busy {busy:9,d} ({busy / until:.2f}), idle {until - busy:9,d}")
        for cause, cycles in causes.most_common(4):
            print(f"         {cycles:9,d}  {cause}")


def chain(r: Replay, preds: list[list[tuple[int, str]]]) -> None:
    """The critical chain's cycles by pipe and binding."""
    prev: dict[int, int] = {}
    last: dict[str, int] = {}
    for v in r.order:
        pipe = r.nodes[v].pipe
        if pipe is not None:
            if pipe in last:
                prev[v] = last[pipe]
            last[pipe] = v
    v = max(range(len(r.nodes)), key=lambda x: (r.finish[x], -x))
    steps: Counter[str] = Counter()
    while r.start[v] > 0:
        p = prev.get(v, -1)
        if p >= 0 and r.finish[p] == r.start[v]:
            u, kind = p, "its pipe's previous node"
        else:
            u, kind = next(((w, k) for w, k in preds[v] if r.finish[w] == r.start[v]), (-1, ""))
            if u < 0:
                break
            kind = f"{kind} ({'same' if r.nodes[u].layer == r.nodes[v].layer else 'other'} layer)"
        if r.nodes[v].pipe is not None:
            steps[f"{r.nodes[v].pipe} after {kind}"] += r.nodes[v].cycles
        v = u
    for step, cycles in steps.most_common(8):
        print(f"   {cycles:9,d}  {step}")


def what_ifs(r: Replay, preds: list[list[tuple[int, str]]], until_layer: int) -> None:
    """Unlimited pipes, and any-ready dispatch, each with and without the reuse edges."""
    nodes, n = r.nodes, len(r.nodes)
    for reuse in (True, False):
        edges = [[u for u, k in preds[v] if reuse or k != "reuse"] for v in range(n)]
        finish = [0] * n
        for v in r.order:
            finish[v] = max((finish[u] for u in edges[v]), default=0) + nodes[v].cycles
        head = max(finish[v] for v in range(n) if 0 <= nodes[v].layer <= until_layer)
        succs: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            for u in edges[v]:
                succs[u].append(v)
        ends = _dispatch(r, edges, succs)
        head2 = max(ends[v] for v in range(n) if 0 <= nodes[v].layer <= until_layer)
        label = "with" if reuse else "without"
        print(
            f"{label} reuse edges: unlimited pipes {max(finish):,d} (to layer {until_layer}: "
            f"{head:,d}); any-ready pipes {max(ends):,d} ({head2:,d})"
        )


def _dispatch(r: Replay, edges: list[list[int]], succs: list[list[int]]) -> list[int]:
    """Finish times with each pipe running any ready node, the lowest DAN position first."""
    nodes, n = r.nodes, len(r.nodes)
    waiting = [len(e) for e in edges]
    finish, ready_at = [0] * n, [0] * n
    queues: dict[str, list[tuple[int, int]]] = {}
    events: list[tuple[int, int]] = []
    running: set[str] = set()

    def release(v: int, t: int) -> None:
        pipe = nodes[v].pipe
        ready_at[v] = t
        if pipe is None:
            finish[v] = t
            heapq.heappush(events, (t, v))
        else:
            heapq.heappush(queues.setdefault(pipe, []), (r.position[v], v))

    for v in range(n):
        if not waiting[v]:
            release(v, 0)
    now = 0
    while True:
        for pipe, queue in queues.items():
            if pipe not in running and queue:
                _, v = heapq.heappop(queue)
                finish[v] = max(now, ready_at[v]) + nodes[v].cycles
                running.add(pipe)
                heapq.heappush(events, (finish[v], v))
        if not events:
            return finish
        now, v = heapq.heappop(events)
        running.discard(nodes[v].pipe)  # type: ignore[arg-type]
        for w in succs[v]:
            waiting[w] -= 1
            if not waiting[w]:
                release(w, now)


def main() -> None:
    """Print the figures for one model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2", choices=sorted(MODELS))
    ap.add_argument("--until", type=int, default=-1, help="last layer of the head measured")
    args = ap.parse_args()
    scheduled = compile_until(MODELS[args.model](), "schedule", TARGET, "dan")
    r = scheduled.schedules[0][1]
    layers = scheduled.program.layers
    last = args.until if args.until >= 0 else len(layers) - 1
    until = max(r.finish[v] for v in range(len(r.graph.nodes)) if 0 <= r.nodes[v].layer <= last)
    print(
        f"{args.model}: makespan {r.makespan:,d}, layers 0-{last} "
        f"({layers[last].name}) end at {until:,d}"
    )
    preds = _preds(r)
    idle(r, preds, until)
    print("critical chain:")
    chain(r, preds)
    what_ifs(r, preds, last)


if __name__ == "__main__":
    main()
