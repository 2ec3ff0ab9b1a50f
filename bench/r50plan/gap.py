"""Per layer of a lowered plan (bench/meshfloor/nocreads.py's JSON): its executed share of the
makespan against its floors, and what its runs' busiest core spent.

Executed share: the runs (sub-batch parts) taken in the order they end, each run's end minus
the latest end before it, summed over the layer's runs (the shares sum to the makespan; a
sub-batch loop's layers share its span part by part). Floors (bench/meshfloor/floor.py's
rules): `rect`, the least over p x q splits on the layer's rectangle with the plan's placement
(what is on chip, which weights are staged), runs summed; `best`, the layer alone on its best
rectangle and split (floor.py's `layer_floor`). Per layer also: the cores its runs use, the
busiest core's MTE2 (NoC and DDR copies), CUBE cycles, the layer's DDR bytes over the channel
(64 B/cycle) and the most of those three (its own bound, had it the mesh alone); per core the
MTE2 cycles summed over the whole program.

    python bench/r50plan/gap.py ROWS.json
"""

import collections
import io
import runpy
import sys
from contextlib import redirect_stdout

path = sys.argv[1]
sys.argv = ["floor.py", path]
with redirect_stdout(io.StringIO()):
    fl = runpy.run_path(__file__.rsplit("/", 2)[0] + "/meshfloor/floor.py")
data, rect_of, group_of = fl["data"], fl["rect_of"], fl["group_of"]
split_floor, layer_floor, operands, csum = (
    fl[k] for k in ("split_floor", "layer_floor", "operands", "csum")
)
order = {}
for si, st in enumerate(data["steps"]):
    for g in st["groups"]:
        for name in g["layers"]:
            order[name] = si
runs = collections.defaultdict(list)
for row in data["rows"]:
    if row["end"] and row["layer"] in rect_of:
        runs[row["layer"]].append(row)
shares = collections.Counter()
latest = 0
for row in sorted((r for rs in runs.values() for r in rs), key=lambda r: (r["end"], r["start"])):
    shares[row["layer"]] += max(0, row["end"] - latest)
    latest = max(latest, row["end"])
core_mte2 = collections.Counter()
out = []
tot = collections.Counter()
for name in sorted(runs, key=lambda n: (order[n], min(r["start"] for r in runs[n]))):
    rs = runs[name]
    share = shares[name]
    c = rect_of[name]
    rect = sum(split_floor(r, c)[0] for r in rs)
    acc = [0, 0, 0, 0, 0, 1]
    for r in rs:
        x_b, _, w_b, _, r_b, _, o_b, _, n = operands(r)
        acc = [
            acc[0] + x_b,
            w_b,
            acc[2] + r_b,
            acc[3] + o_b,
            acc[4] + csum(r["cube"]),
            max(1, n // 16),
        ]
    best = layer_floor(*acc)[0]
    used = set()
    mte2 = cube = ddr = 0
    for r in rs:
        used |= set(r["cores"])
        per = collections.Counter()
        for k, v in r["noc_read_cyc"].items():
            per[k] += v
        for k, v in r["ddr_cyc"].items():
            per[k] += v
        for k, v in per.items():
            core_mte2[k] += v
        mte2 += max(per.values(), default=0)
        cube += max(r["cube"].values(), default=0)
        ddr += csum(r["ddr"])
    blk = next((r["blocking"] for r in rs if r["blocking"]), None)
    b = (
        f"{blk['order']} nb {blk['nb']}/{blk['n']} x{blk['chunks']}, {blk['m_blocks']} M"
        if blk
        else ""
    )
    out.append((name, len(rs), len(used), c, b, share, rect, best, mte2, cube, ddr / 64))
    for k, v in zip(("share", "rect", "best", "mte2", "cube", "chan"), out[-1][5:], strict=True):
        tot[k] += v
print(
    "| layer | runs | cores used/rect | blocking | executed share | busiest MTE2 (runs summed) "
    "| busiest CUBE | channel (DDR B / 64) | own bound | floor on rect | best floor "
    "| share / best |"
)
print("|" + "---|" * 12)
for name, n, u, c, b, share, rect, best, mte2, cube, chan in out:
    own = max((mte2, "MTE2"), (cube, "CUBE"), (chan, "chan"))
    tot["own"] += own[0]
    print(
        f"| {name} | {n} | {u}/{c} | {b} | {share:,} | {mte2:,} | {cube:,} | {chan:,.0f} "
        f"| {own[0]:,.0f} {own[1]} | {rect:,.0f} | {best:,.0f} | {share / best:.1f} |"
    )
print(
    f"| total | | | | {tot['share']:,} | {tot['mte2']:,} | {tot['cube']:,} | {tot['chan']:,.0f} "
    f"| {tot['own']:,.0f} | {tot['rect']:,.0f} | {tot['best']:,.0f} "
    f"| {tot['share'] / tot['best']:.2f} |"
)
print(
    "MTE2 cycles per core (copies over the NoC and from DDR), busiest 8:",
    ", ".join(f"{k}: {v:,}" for k, v in core_mte2.most_common(8)),
)
vals = sorted(core_mte2.values())
print(f"median {vals[len(vals) // 2]:,}, least {vals[0]:,}, cores with any {len(vals)}")
