"""Per layer run of a lowered plan (bench/meshfloor/nocreads.py's JSON): its NoC reads against
the least a split of that layer on its group needs, and the plan's floor.

Split of a cube layer on c cores: a grid of p M parts (pixels x images) by q N parts (output
channels, at least 16 each), p q <= c, each part reading its X rows (X / p, no halo) and its
W columns (W / q) whole, once: the operand kept on chip over the NoC (24 B/cycle on the
core's MTE2), the one in DDR through the shared channel (64 B/cycle) and the core's MTE2
(64 B/cycle); the output written once (MTE3); the layer's cube, MTE1 and vector cycles as
lowered, spread evenly. A layer's floor is the least over (p, q) of max(its busiest core's
MTE2, MTE3, cube, MTE1, vector, the channel). Relaxed: no L1 capacity, no DMA latency, no
halo, no dependency inside the layer. Any other layer (pool, add, ...) reads its inputs
once, spread over its cores.

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

    python bench/meshfloor/floor.py ROWS.json [--table] [--by-layer] [--layers]
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


def operands(row):
    """(X, X on chip, W with bias, W on chip, residual, residual on chip, output, output on
    chip, N) in bytes of the row's layer (any op but a cube's: its inputs as X, N = 1)."""
    ins, outs = row["inputs"], row["outputs"]
    staged = {k for k in row["noc_read"] if "@chip" in k}

    def onchip(t):
        return t["onchip"] or any(k.startswith(t["name"] + "@chip") for k in staged)

    o_b = sum(o["bytes"] for o in outs)
    o_on = all(o["onchip"] for o in outs)
    if row["op"] in CUBE_OPS:
        x, w, rest = ins[0], ins[1:3], ins[3:]
        n = w[1]["bytes"] // 4 if len(w) > 1 else 1  # the bias: one f32 per output channel
        return (
            x["bytes"],
            onchip(x),
            sum(t["bytes"] for t in w),
            all(onchip(t) for t in w),
            sum(t["bytes"] for t in rest),
            all(onchip(t) for t in rest),
            o_b,
            o_on,
            n,
        )
    return sum(t["bytes"] for t in ins), all(onchip(t) for t in ins), 0, True, 0, True, o_b, o_on, 1


def splits(row, c):
    """Every p x q split of the row's layer on c cores: (p, q, NoC bytes, DDR bytes, terms)."""
    x_b, x_on, w_b, w_on, r_b, r_on, o_b, o_on, n = operands(row)
    cube, mte1, vec = (csum(row[k]) for k in ("cube", "mte1", "vector"))
    grid = [(a, b) for a in range(1, min(c, max(1, n // 16)) + 1) for b in range(1, c // a + 1)]
    for q, p in grid:
        parts = p * q
        mte2 = x_b / p / (NOC if x_on else DDR) + w_b / q / (NOC if w_on else DDR)
        mte2 += r_b / parts / (NOC if r_on else DDR)
        mte3 = o_b / parts / (NOC if o_on else DDR)
        ddr = x_b * q * (not x_on) + w_b * p * (not w_on) + r_b * (not r_on) + o_b * (not o_on)
        noc = x_b * q * x_on + w_b * p * w_on + r_b * r_on
        terms = dict(mte2=mte2, mte3=mte3, chan=ddr / DDR, cube=cube / parts, mte1=mte1 / parts,
                     vector=vec / parts)  # fmt: skip
        yield p, q, noc, ddr, terms


def split_floor(row, c):
    """(floor cycles, binding term, p, q, NoC bytes, DDR bytes) of the row's layer on c cores."""
    best = min(splits(row, c), key=lambda s: (max(s[4].values()), s[2]))
    p, q, noc, ddr, terms = best
    return max(terms.values()), max(terms, key=terms.get), p, q, noc, ddr


def least_per_pipe(row, c):
    """Each pipe's least per-core cycles and the least DDR bytes over the splits on c cores."""
    out = collections.defaultdict(lambda: math.inf)
    for *_, ddr, terms in splits(row, c):
        for k, v in terms.items():
            out[k] = min(out[k], v)
        out["ddr"] = min(out["ddr"], ddr)
    return out


def layer_floor(x_b, w_b, r_b, o_b, cube, n_max, cores=64):
    """(cycles, c, p, q, how) of a cube layer alone on the mesh at its best: c cores in a p x q
    grid, W read from DDR once (staged: each core then reads W / q over the NoC) or once per M
    part straight from DDR, X, the residual and the output over the NoC or through DDR."""
    best = None
    for q in range(1, min(cores, n_max) + 1):
        for p in range(1, cores // q + 1):
            parts = c = p * q
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
    t, term, p, q, noc, ddr = split_floor(row, c)
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
print(
    f"program makespan {data['pred']:,}, roofline bound {bound:,} "
    f"(efficiency {bound / data['pred']:.3f})"
)
print(f"NoC read bytes: program {actual_noc:,}, at each layer's floor split {floor_noc:,.0f}")
print(f"steps floor {steps_floor:,.0f} (efficiency {bound / steps_floor:.3f})")
print(f"cores floor {cores_floor:,.0f} (efficiency {bound / cores_floor:.3f}): busiest core pipe "
      f"{pipe_floor:,.0f}, channel {chan_least:,.0f}")  # fmt: skip

by_layer: dict[str, list] = {}
for _s, _g, row, *_ in out_rows:
    x_b, _, w_b, _, r_b, _, o_b, _, n = operands(row)
    acc = by_layer.setdefault(row["layer"], [0, w_b, 0, 0, 0, max(1, n // 16)])
    acc[0] += x_b
    acc[2] += r_b
    acc[3] += o_b
    acc[4] += csum(row["cube"])
layers_floor = 0.0
for name, (x_b, w_b, r_b, o_b, cube, n_max) in by_layer.items():
    t, c, p, q, how = layer_floor(x_b, w_b, r_b, o_b, cube, n_max)
    layers_floor += t
    if "--layers" in sys.argv:
        print(f"  {name:40s} {t:>10,.0f} c {c} ({p}x{q}) {how}")
print(f"layers floor {layers_floor:,.0f} (efficiency {bound / layers_floor:.3f})")

if "--by-layer" in sys.argv:  # question 1's table: a layer's runs (sub-batch parts) summed
    print("| layer | step.group | cores used/rect | blocking | X MB (NoC?) | W MB (staged?) "
          "| NoC read MB: X, W, res | X read x | busiest core NoC MB | spatial split | "
          "channel split | at the floor split |")  # fmt: skip
    print("|" + "---|" * 12)
    agg: dict[str, dict] = {}
    for si, gi, row, c, _t, _term, _p, _q, noc, _got, _mte2 in out_rows:
        x_b, x_on, w_b, w_on, r_b, r_on, o_b, o_on, n = operands(row)
        a = agg.setdefault(row["layer"], dict(
            step=f"{si}.{gi}", c=c, used=set(), blk=None, x=0, w=w_b, w_on=w_on, x_on=x_on,
            r=0, reads=collections.Counter(), core=collections.Counter(), floor=0,
        ))  # fmt: skip
        a["used"] |= set(row["cores"])
        a["blk"] = a["blk"] or row["blocking"]
        a["x"] += x_b
        a["r"] += r_b
        a["floor"] += noc
        xk = row["inputs"][0]["key"] if row["inputs"] else ""
        for key, per in row["noc_read"].items():
            kind = "x" if key == xk else "w" if "@chip" in key else "r"
            a["reads"][kind] += csum(per)
            for core, v in per.items():
                a["core"][core] += v
    for name, a in agg.items():
        b = a["blk"]
        blk = (
            f"{b['order']} nb {b['nb']}/{b['n']} kb {b['kb']}/{b['k']} x{b['chunks']}" if b else "="
        )
        u = len(a["used"])
        w_noc = a["w"] * a["w_on"]
        spatial = a["x"] * a["x_on"] + w_noc * u + a["r"]
        channel = a["x"] * a["x_on"] * u + w_noc + a["r"]
        rd = a["reads"]
        xr = rd["x"] / a["x"] if a["x"] and a["x_on"] else 0
        print(f"| {name} | {a['step']} | {u}/{a['c']} | {blk} "
              f"| {a['x'] / 1e6:.1f} ({'y' if a['x_on'] else 'n'}) "
              f"| {a['w'] / 1e6:.2f} ({'y' if a['w_on'] else 'n'}) "
              f"| {rd['x'] / 1e6:.1f}, {rd['w'] / 1e6:.1f}, {rd['r'] / 1e6:.1f} | {xr:.1f} "
              f"| {max(a['core'].values(), default=0) / 1e6:.2f} | {spatial / 1e6:.1f} "
              f"| {channel / 1e6:.1f} | {a['floor'] / 1e6:.1f} |")  # fmt: skip
