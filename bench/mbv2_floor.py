"""Benchmark: two-region lower bounds on a conv net's one-core makespan (the head, then the tail).

Usage: python bench/mbv2_floor.py [--model mobilenet_v2] [--formulation any|blockdiag]
       [--onchip] [--vector-only] [--program] [--cuts 41,43]

A one-pipe floor (bench/pipe_floor.py) lets every pipe overlap all others; this one adds the
data dependences and the on-chip capacity. For a cut after layer k, let t_k be the time the
last element of layer k's output is computed. Every earlier layer's work is an ancestor of that
output (cuts where one is not are skipped), so t_k >= the floor of layers 0..k alone
(pipe_floor's LP with `until=k`). A tail
weight one of whose uses (a MAC) reads data that depends on that last element (below) is read
after t_k: it is either on chip at t_k or read from DDR after it. So

    T >= floor(0..k) + max(0, bytes(those weights) - on-chip capacity) / DDR bandwidth.

Which weights (sound, not exhaustive): from layer k on, a tensor's elements are known to depend
on that last element: ONE (some element: layer k's output itself), MIXED (in every channel some
element) or FULL (every element). A dense conv whose window covers every input pixel makes
MIXED from ONE or MIXED (each output channel sums every input channel); a grouped conv keeps the
state; a global spatial reduce makes FULL from MIXED; element-wise layers (and a fused residual)
take the strongest input. A layer's weights count when each of them meets a dependent element:
any conv or gemm reading a FULL input, and a 1x1 stride-1 conv reading a MIXED one (a weight
(o, c) meets channel c at every pixel). NOTE: assumes the lowering computes each layer's
MACs as the model defines them (no algebra across layers); capacity is every on-chip tier
(L1 + UB + L0A + L0B + L0C), more than can hold weights, so the bound stays below the truth.

`--program` bounds today's program (npucc's lowering, its instructions as they are) under any
scheduler and address plan. For a node X, each pipe runs one node at a time, so start(X) >=
any pipe's cycles over X's ancestors, and after finish(X) each pipe runs X's descendants (the
DAG's edges: any schedule keeps them). Besides, a layer whose every compute node (cube, vector;
not a copy) descends from X reads each of its constants after finish(X): a constant loaded
once (as npucc loads weights) is on chip at finish(X) or loaded after it, so MTE2 runs after
finish(X) those loads less the most cycles of them whose bytes fit on chip (a fractional
knapsack, the most cycles a byte first, over the capacity of the tiers the program ever puts
constants in: its loads' buffers and the copies' from them), with X's other descendant loads:

    T >= max_p anc_p(X) + cycles(X) + max(max_q desc_q(X), MTE2 after X).

Prints, per cut, the floor and the bound; with `--program`, the best X per layer.
"""

from __future__ import annotations

import argparse
import math

from pipe_floor import build
from roofline import MODELS, TARGET

from npucc.backend.lower.work import layer_work
from npucc.compiler import LEVEL_PASSES, compile_until
from npucc.ir.replay import Replay
from npucc.target import load_target
from npucc.target.cost import cube_bound, ddr_bound, vector_bound

GOAL = 0.35  # issue 15's MobileNet v2 efficiency goal
TIERS = ("L1", "UB", "L0A", "L0B", "L0C")
NONE, ONE, MIXED, FULL = range(4)  # what a tensor's elements are known to depend on (below)
GLOBAL_POOLS = ("globalavgpool", "globalmaxpool")
ELEMENTWISE = ("add", "sub", "mul", "div", "clip", "relu", "sigmoid", "tanh")


def tail_weights(graph, k: int) -> tuple[int, list[str]]:  # noqa: ANN001
    """Elements of the weights after layer k that must be in L0 after layer k's last element."""
    layers, t = graph.layers, graph.tensors
    state = {layers[k].outputs[0]: ONE}
    count, named = 0, []
    for layer in layers[k + 1 :]:
        ins = [state.get(n, NONE) for n in layer.inputs if n and not graph.is_const(n)]
        if not ins or max(ins) == NONE:
            continue
        x, out, counted = ins[0], max(ins), False
        if layer.op == "conv2d":
            w = t[layer.inputs[1]].shape
            one = w[2] == w[3] == 1 and layer.attrs["strides"] == (1, 1)
            covers = _covers(layer, t[layer.inputs[0]].shape, w)
            if layer.attrs["group"] == 1:
                conv = MIXED if covers and x >= ONE else x
                counted = x == FULL or (one and x == MIXED)
            else:
                conv = x if covers else NONE
                counted = x == FULL
            out = max(conv, *ins[1:]) if len(ins) > 1 else conv
        elif layer.op in GLOBAL_POOLS or layer.op == "reduce":
            spatial = layer.op in GLOBAL_POOLS or tuple(layer.attrs["axes"]) == (2, 3)
            out = FULL if x == MIXED and spatial else x
        elif layer.op in ("gemm", "matmul"):
            counted = x == FULL
        elif layer.op not in ELEMENTWISE:
            out = FULL if x == FULL else NONE
        if counted:
            count += _weights(graph, layer)
            named.append(layer.name)
        state[layer.outputs[0]] = out
    return count, named


def _closed(graph, k: int) -> bool:  # noqa: ANN001
    """Every layer 0..k is layer k or one of its ancestors."""
    producer = {n: j for j, layer in enumerate(graph.layers) for n in layer.outputs}
    seen, stack = {k}, [k]
    while stack:
        for n in graph.layers[stack.pop()].inputs:
            j = producer.get(n)
            if j is not None and j not in seen:
                seen.add(j)
                stack.append(j)
    return seen >= set(range(k + 1))


def _covers(layer, x, w) -> bool:  # noqa: ANN001
    """Every input pixel is read by some output pixel (stride <= kernel, the last row read)."""
    s, p = layer.attrs["strides"], layer.attrs["pads"]
    for d in (0, 1):
        size, kern = x[2 + d], w[2 + d]
        out = (size + p[d] + p[d + 2] - kern) // s[d] + 1
        if s[d] > kern or (out - 1) * s[d] - p[d] + kern < size:
            return False
    return True


def _weights(graph, layer) -> int:  # noqa: ANN001
    """Elements of a layer's constant inputs."""
    return sum(math.prod(graph.tensors[n].shape) for n in layer.inputs[1:]
               if n and graph.is_const(n))  # fmt: skip


def machine(graph, target, cuts: list[int], formulation: str, rows: list[str]) -> float:  # noqa: ANN001
    """The two-region floor of any lowering, per cut, and the best; `rows` also pins choices
    (pipe_floor's --onchip, --vector-only)."""
    cap = sum(target.memory.capacity(tier) for tier in TIERS)
    bw = target.dma.path("DDR_L1").bandwidth
    elems = {n: math.prod(graph.tensors[n].shape) for n in (*graph.inputs, *graph.outputs)}
    work = layer_work(graph)
    read = 4 * (sum(w.weights for w in work) + sum(elems[n] for n in graph.inputs))
    bound = max(ddr_bound(target, read, 4 * sum(elems[n] for n in graph.outputs)),
                cube_bound(target, sum(w.macs for w in work)),
                vector_bound(target, sum(w.vector for w in work)))  # the roofline's  # fmt: skip
    print(f"on-chip capacity {cap:,d} B; DDR -> L1 {bw} B a cycle")
    print("| cut after layer | head floor | tail weights that follow it | bytes beyond capacity "
          "| cycles | T >= | efficiency at most |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    best: tuple[float, int, dict[str, float]] = (0.0, -1, {})
    for k in cuts:
        if not _closed(graph, k):
            continue  # a layer before k that layer k does not read from need not end by t_k
        f, extra = build(graph, target, formulation, True, k)
        if "onchip" in rows:
            extra += [([(i, 1.0)], 0.0) for i, tag in enumerate(f.tags) if "via DDR" in tag]
        if "vector-only" in rows:
            extra += [([(i, -1.0)], -1.0) for i, tag in enumerate(f.tags) if tag.endswith("share")]
        head, x = f.solve(extra)
        n, _named = tail_weights(graph, k)
        beyond = max(0, 4 * n - cap)
        total = head + beyond / bw
        print(f"| {k} {graph.layers[k].name} | {head:,.0f} | {4 * n:,d} B | {beyond:,d} | "
              f"{beyond / bw:,.0f} | {total:,.0f} | {bound / total:.3f} |")  # fmt: skip
        best = max(best, (total, k, f.loads(x)))
    total, k, loads = best
    if not total:
        return 0.0
    print(
        f"floor T >= {total:,.0f} (efficiency at most {bound / total:.3f}), cut after layer {k}; "
        "the head's pipes there: " + ", ".join(f"{p} {c:,.0f}" for p, c in loads.items())
    )
    print(f"(efficiency against the roofline's bound {bound:,.0f}; MobileNet v2's goal {GOAL} "
          f"asks T <= {bound / GOAL:,.0f})")  # fmt: skip
    return total


def program(r: Replay, graph, target) -> int:  # noqa: ANN001
    """The two-region bound of today's instructions, per layer its best node X, and the best."""
    g, n = r.graph, len(r.graph.nodes)
    nodes = g.nodes
    loads = _const_loads(graph, nodes)
    tiers = _tiers(g, loads)
    cap = sum(target.memory.capacity(tier) for tier in tiers)
    print(f"today's program: its constants live in {', '.join(sorted(tiers))}: {cap:,d} B")
    compute: dict[int, list[int]] = {}  # layer -> its nodes that compute (not copies)
    for v in nodes:
        if v.pipe in ("CUBE", "VECTOR") and v.layer >= 0 and type(v.instr).__name__ != "Copy":
            compute.setdefault(v.layer, []).append(v.id)
    pipes = sorted({v.pipe for v in nodes if v.pipe is not None})
    best: dict[int, tuple[int, int, str]] = {}
    last = {}
    for v in r.order:
        if v < n and nodes[v].layer >= 0 and nodes[v].pipe is not None:
            last[nodes[v].layer] = v
    candidates = sorted(set(last.values()) | {v for i, v in enumerate(r.order) if i % 97 == 0
                                               and v < n and nodes[v].layer >= 0
                                               and nodes[v].pipe is not None})  # fmt: skip
    for x in candidates:
        anc, desc = _reach(g.preds, x), _reach(g.succs, x)
        after_layers = {j for j, vs in compute.items() if all(v in desc for v in vs)}
        held = [v for v, j in loads.items() if j in after_layers]
        before, after = _sums(nodes, anc, pipes), _sums(nodes, desc, pipes)
        rest = sum(nodes[v].cycles for v in desc if nodes[v].pipe == "MTE2" and v not in held)
        tail = rest + sum(nodes[v].cycles for v in held) - _credit(nodes, held, desc, cap)
        p = max(before, key=before.get)  # type: ignore[arg-type]
        q = max(after, key=after.get)  # type: ignore[arg-type]
        after_x, why = (after[q], q) if after[q] >= tail else (tail, "MTE2 (with weights)")
        b = round(before[p] + nodes[x].cycles + after_x)
        layer = nodes[x].layer
        if b > best.get(layer, (0, 0, ""))[0]:
            best[layer] = (b, r.finish[x], f"{p} {before[p]:,d} before, {why} {after_x:,.0f} after")
    print("| layer of X | T >= | X finishes (DAN) | binding |")
    print("|---|---|---|---|")
    for layer in sorted(best):
        b, fin, why = best[layer]
        print(f"| {layer} {graph.layers[layer].name} | {b:,d} | {fin:,d} | {why} |")
    top = max(best.values())
    print(f"today's instructions: T >= {top[0]:,d} for any schedule ({top[2]}); "
          f"DAN {r.makespan:,d}")  # fmt: skip
    return top[0]


def _const_loads(graph, nodes) -> dict[int, int]:  # noqa: ANN001
    """Each MTE2 load of a layer's constant -> that layer, for the constants loaded exactly once
    (their loads' bytes sum to the tensor's size: disjoint, as npucc loads weights)."""
    by_key: dict[str, list[int]] = {}
    for v in nodes:
        key = getattr(getattr(v.instr, "src", None), "key", None)
        if v.pipe == "MTE2" and key in graph.tensors and graph.is_const(key):
            by_key.setdefault(key, []).append(v.id)
    owner = {n: j for j, layer in enumerate(graph.layers) for n in layer.inputs[1:] if n}
    loads = {}
    for key, vs in by_key.items():
        once = sum(_bytes(nodes[v]) for v in vs) == 4 * math.prod(graph.tensors[key].shape)
        if once and key in owner:
            loads.update(dict.fromkeys(vs, owner[key]))
    return loads


def _tiers(g, loads: dict[int, int]) -> set[str]:  # noqa: ANN001
    """The tiers the loaded constants' bytes can be in: the loads' own buffers' and those of
    every copy from them, transitively."""
    copies: dict[int, list[int]] = {}  # buffer -> the buffers copies from it write
    for v in g.nodes:
        src, dst = getattr(v.instr, "src", None), getattr(v.instr, "dst", None)
        if type(v.instr).__name__ == "Copy" and hasattr(src, "buf") and hasattr(dst, "buf"):
            copies.setdefault(src.buf, []).append(dst.buf)
    seen = {g.nodes[v].instr.dst.buf for v in loads}
    stack = list(seen)
    while stack:
        for b in copies.get(stack.pop(), ()):
            if b not in seen:
                seen.add(b)
                stack.append(b)
    return {g.buffers[b].tier for b in seen}


def _credit(nodes, held: list[int], desc: set[int], cap: int) -> float:  # noqa: ANN001
    """The most MTE2 cycles of `held` loads (not X's descendants) whose bytes fit in `cap`: a
    fractional knapsack, the most cycles a byte first."""
    room, credit = float(cap), 0.0
    for v in sorted((v for v in held if v not in desc),
                    key=lambda v: -nodes[v].cycles / _bytes(nodes[v])):  # fmt: skip
        take = min(1.0, room / _bytes(nodes[v]))
        credit += take * nodes[v].cycles
        room -= take * _bytes(nodes[v])
        if room <= 0:
            break
    return credit


def _bytes(node) -> int:  # noqa: ANN001
    """Bytes a copy moves."""
    return 4 * math.prod(node.instr.dims)


def _sums(nodes, vs: set[int], pipes: list[str]) -> dict[str, int]:  # noqa: ANN001
    """Each pipe's cycles over `vs`."""
    sums = dict.fromkeys(pipes, 0)
    for v in vs:
        if nodes[v].pipe is not None:
            sums[nodes[v].pipe] += nodes[v].cycles
    return sums


def _reach(adj: list[list[int]], x: int) -> set[int]:
    """Nodes reachable from x over adj, x excluded."""
    seen: set[int] = set()
    stack = list(adj[x])
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack.extend(adj[v])
    return seen


def main() -> int:
    """Print the two-region floor (and with --program today's bound) of one model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2", choices=sorted(MODELS))
    ap.add_argument("--formulation", default="any", choices=("any", "blockdiag"))
    ap.add_argument("--onchip", action="store_true", help="no activation through DDR")
    ap.add_argument("--vector-only", action="store_true", help="the depthwise convs all on VECTOR")
    ap.add_argument("--program", action="store_true", help="also today's program's bound")
    ap.add_argument("--cuts", help="comma-separated layers to cut after (default: every one)")
    args = ap.parse_args()
    model = MODELS[args.model]()
    target = load_target(TARGET)
    graph = compile_until(model, LEVEL_PASSES["graph"])
    cuts = ([int(c) for c in args.cuts.split(",")] if args.cuts
            else list(range(len(graph.layers) - 1)))  # fmt: skip
    rows = [r for r in ("onchip", "vector-only") if getattr(args, r.replace("-", "_"))]
    machine(graph, target, cuts, args.formulation, rows)
    if args.program:
        scheduled = compile_until(model, "schedule", TARGET, "dan")
        program(scheduled.schedules[0][1], graph, target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
