"""Per layer run of a lowered plan (bench/meshfloor/nocreads.py's JSON): its NoC reads against
the least a split of that layer on its group needs, and the plan's floor.

Split of a cube layer on c cores: a grid of p M parts (pixels x images) by q N parts (output
channels), p q <= c, each part reading its X rows (X / p, no halo) and its W columns (W / q)
whole, once: the operand kept on chip over the NoC (24 B/cycle on the core's MTE2), the one in
DDR through the shared channel (64 B/cycle) and the core's MTE2 (64 B/cycle); the output
written once (MTE3); the layer's cube, MTE1 and vector cycles as lowered, spread evenly. A
layer's floor is the least over (p, q) of max(its busiest core's MTE2, MTE3, cube, MTE1,
vector, the channel). Relaxed: no L1 capacity, no DMA latency, no halo, no dependency inside
the layer. Any other layer (pool, add, ...) reads its inputs once, spread over its cores.

Plan floors (efficiency = the roofline bound / floor):
  steps    each step's layers at their floors, a group's layers one after another, the step
           as long as its slowest group or its DDR bytes on the channel, steps in sequence;
  cores    each core's MTE2 (and every pipe) at least the sum over the layers it runs of that
           layer's least per-core cycles of the pipe (each pipe minimised on its own), the
           channel at least the sum of each layer's least DDR bytes: a bound on any blocking
           of the plan's layers on its groups, whatever their overlap.

  layers   any plan of today's lowering, layer by layer (`layer_floor`): each layer alone on
           the best rectangle and split for it, its weights read once from DDR or once per M
           part, its activations over the NoC or through DDR, as it pays; the layers' floors
           summed in graph order (ResNet-50: a chain but for its four branch1 convs, counted
           in the sum too): the floor of a plan that runs one layer after another; a plan
           overlapping layers (sub-batch pipelines, groups side by side) is bounded below only
           by the channel's floor (the roofline bound).

    python bench/meshfloor/floor.py ROWS.json [--table]
"""

import collections
import itertools
import json
import math
import re
import sys

NOC, DDR = 24, 64  # B/cycle: a NoC copy on one core's MTE2; the DDR channel (and a DDR DMA)
CUBE_OPS = ("conv2d", "matmul", "gemm", "conv")

data = json.load(open(sys.argv[1]))
table = "--table" in sys.argv
rows = data["rows"]
bound = data["roofline"]["bound"]
rect_of, group_of = {}, {}
for si, st in enumerate(data["steps"]):
    for gi, g in enumerate(st["groups"]):
        w, h = (int(v) for v in re.search(r"w=(\d+), h=(\d+)", g["rect"]).groups())
        for name in g["layers"]:
            rect_of[name], group_of[name] = w * h, (si, gi)


def csum(d):
    return sum(d.values())


def cmax(d):
    return max(d.values(), default=0)


def split_floor(row, c):
    """(floor cycles, binding term, p, q, NoC bytes, DDR bytes) of the row's layer on c cores."""
    ins = row["inputs"]
    outs = row["outputs"]
    srcs = row["noc_read"]
    o_bytes = sum(o["bytes"] for o in outs)
    o_on = all(o["onchip"] for o in outs)
    cube, mte1, vec = (csum(row[k]) for k in ("cube", "mte1", "vector"))
    staged = {k for k in srcs if "@chip" in k}

    def onchip(t):
        return t["onchip"] or any(k.startswith(t["name"] + "@chip") for k in staged)

    if row["op"] in CUBE_OPS and row["blocking"]:
        x, w, rest = ins[0], ins[1:3], ins[3:]
        x_b, x_on = x["bytes"], onchip(x)
        w_b = sum(t["bytes"] for t in w)
        w_on = all(onchip(t) for t in w)
        r_b = sum(t["bytes"] for t in rest)
        r_on = all(onchip(t) for t in rest)
        b = row["blocking"]
        n_max = max(1, math.ceil(b["n"] / 16))
    else:  # read every input once, spread over the cores
        x_b, x_on = sum(t["bytes"] for t in ins), all(onchip(t) for t in ins)
        w_b, w_on, r_b, r_on, n_max = 0, True, 0, True, 1
    best = None
    for q in range(1, min(c, n_max) + 1):
        p = c // q
        parts = p * q
        mte2 = x_b / p / (NOC if x_on else DDR) + w_b / q / (NOC if w_on else DDR)
        mte2 += r_b / parts / (NOC if r_on else DDR)
        mte3 = o_bytes / parts / (NOC if o_on else DDR)
        ddr = x_b * q * (not x_on) + w_b * p * (not w_on) + r_b * (not r_on) + o_bytes * (not o_on)
        noc = x_b * q * x_on + w_b * p * w_on + r_b * r_on
        terms = dict(mte2=mte2, mte3=mte3, chan=ddr / DDR, cube=cube / parts, mte1=mte1 / parts,
                     vector=vec / parts)  # fmt: skip
        t = max(terms.values())
        key = (t, noc)
        if best is None or key < best[0]:
            best = (key, max(terms, key=terms.get), p, q, noc, ddr, terms)
    (t, _), term, p, q, noc, ddr, terms = best
    return t, term, p, q, noc, ddr, terms


def least_per_pipe(row, c):
    """Each pipe's least per-core cycles and the least DDR bytes over the splits on c cores."""
    out = collections.defaultdict(lambda: math.inf)
    for cc in range(1, c + 1):  # fewer cores than the group is a split too
        *_, ddr, terms = split_floor(row, cc)
        for k, v in terms.items():
            out[k] = min(out[k], v)
        out["ddr"] = min(out["ddr"], ddr)
    return out


def layer_floor(x_b, w_b, r_b, o_b, cube, n_max, cores=64):
    """(cycles, c, p, q, how) of a cube layer alone on the mesh at its best: c cores in a p x q
    grid, W read from DDR once (staged: each core then reads W / q over the NoC) or once per M
    part straight from DDR, X, the residual and the output over the NoC or through DDR."""
    best = None
    for c in range(1, cores + 1):
        for q in range(1, min(c, n_max) + 1):
            p = c // q
            parts = p * q
            for staged, x_on, o_on in itertools.product((False, True), repeat=3):
                if staged and p == 1:
                    continue
                mte2 = x_b / p / (NOC if x_on else DDR) + r_b / parts / (NOC if x_on else DDR)
                mte2 += w_b / q / (NOC if staged else DDR)
                mte3 = o_b / parts / (NOC if o_on else DDR)
                chan = w_b * (1 if staged else p) + (x_b * q + r_b) * (not x_on) + o_b * (not o_on)
                t = max(mte2, mte3, chan / DDR, cube / parts)
                if best is None or t < best[0]:
                    how = f"W {'staged' if staged else 'DDR'}, X {'NoC' if x_on else 'DDR'}"
                    best = (t, c, p, q, how)
    return best


per_step = collections.defaultdict(lambda: collections.defaultdict(float))
step_ddr = collections.defaultdict(float)
core_pipe = collections.defaultdict(lambda: collections.defaultdict(float))
chan_least = 0.0
actual_noc = floor_noc = 0
out_rows = []
for row in rows:
    if not row["end"] or row["layer"] not in rect_of:
        continue
    c = rect_of[row["layer"]]
    t, term, p, q, noc, ddr, _ = split_floor(row, c)
    si, gi = group_of[row["layer"]]
    per_step[si][gi] += t
    step_ddr[si] += ddr
    least = least_per_pipe(row, c)
    chan_least += least["ddr"] / DDR
    for core in row["cores"]:
        for k in ("mte2", "mte3", "cube", "mte1", "vector"):
            core_pipe[core][k] += least[k]
    got = sum(csum(v) for v in row["noc_read"].values())
    actual_noc += got
    floor_noc += noc
    mte2 = {k: row["noc_read_cyc"].get(k, 0) + row["ddr_cyc"].get(k, 0)
            for k in set(row["noc_read_cyc"]) | set(row["ddr_cyc"])}  # fmt: skip
    out_rows.append((si, gi, row, c, t, term, p, q, noc, got, cmax(mte2)))
steps_floor = sum(max(max(g.values()), step_ddr[s] / DDR) for s, g in per_step.items())
pipe_floor = max(max(v.values()) for v in core_pipe.values())
cores_floor = max(pipe_floor, chan_least)
if table:
    print("| step.group | layer run | cores used/rect | blocking (order nb kb chunks, M blocks) "
          "| X MB (chip?) | W MB (chip?) | NoC read MB | busiest MTE2 | span "
          "| NoC MB at floor (p x q) | floor | binds |")  # fmt: skip
    print("|" + "---|" * 12)
    for si, gi, row, c, t, term, p, q, noc, got, mte2 in out_rows:
        b = row["blocking"]
        blk = f"{b['order']} {b['nb']} {b['kb']} {b['chunks']}, {b['m_blocks']}" if b else "-"
        ins = row["inputs"]
        x = f"{ins[0]['bytes'] / 1e6:.2f} ({'y' if ins[0]['onchip'] else 'n'})" if ins else "-"
        staged = any("@chip" in k for k in row["noc_read"])
        w = (f"{sum(i['bytes'] for i in ins[1:3]) / 1e6:.2f} ({'y' if staged else 'n'})"
             if b and len(ins) > 1 else "-")  # fmt: skip
        print(f"| {si}.{gi} | {row['name']} | {len(row['cores'])}/{c} | {blk} | {x} | {w} "
              f"| {got / 1e6:.1f} | {mte2:,} | {row['end'] - row['start']:,} "
              f"| {noc / 1e6:.1f} ({p}x{q}) | {t:,.0f} | {term} |")  # fmt: skip
print(f"program makespan {data['pred']:,}, roofline bound {bound:,} "
      f"(efficiency {bound / data['pred']:.3f})")
print(f"NoC read bytes: program {actual_noc:,}, at each layer's floor split {floor_noc:,.0f}")
print(f"steps floor {steps_floor:,.0f} (efficiency {bound / steps_floor:.3f})")
print(f"cores floor {cores_floor:,.0f} (efficiency {bound / cores_floor:.3f}): busiest core pipe "
      f"{pipe_floor:,.0f}, channel {chan_least:,.0f}")  # fmt: skip

by_layer: dict[str, list] = {}
for _s, _g, row, *_ in out_rows:
    ins = row["inputs"]
    b = row["blocking"]
    cube = csum(row["cube"])
    o_b = sum(o["bytes"] for o in row["outputs"])
    if row["op"] in CUBE_OPS and b:
        x_b, w_b, r_b = ins[0]["bytes"], sum(t["bytes"] for t in ins[1:3]), sum(
            t["bytes"] for t in ins[3:]
        )
        n_max = max(1, math.ceil(b["n"] / 16))
    else:
        x_b, w_b, r_b, n_max = sum(t["bytes"] for t in ins), 0, 0, 1
    acc = by_layer.setdefault(row["layer"], [0, w_b, 0, 0, 0, n_max])
    acc[0] += x_b
    acc[2] += r_b
    acc[3] += o_b
    acc[4] += cube
layers_floor = 0.0
for name, (x_b, w_b, r_b, o_b, cube, n_max) in by_layer.items():
    t, c, p, q, how = layer_floor(x_b, w_b, r_b, o_b, cube, n_max)
    layers_floor += t
    if "--layers" in sys.argv:
        print(f"  {name:40s} {t:>10,.0f} c {c} ({p}x{q}) {how}")
print(f"layers floor {layers_floor:,.0f} (efficiency {bound / layers_floor:.3f})")
