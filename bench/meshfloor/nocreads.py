"""Where a pickled (graph, plan)'s program reads over the NoC, layer run by layer run.

Lowers and schedules the plan once (as bench/hypercut_sweep.py --executed does, without the
interpretation: interpreted = predicted on main), records each cube layer's blocking
(`choose_blocking`'s pick) and tallies per layer run and core: MTE2 NoC read bytes and cycles
by source tensor, MTE3 NoC write bytes, DDR bytes, cube cycles and the run's span in the mesh
timing. Writes the rows as JSON (bench/meshfloor/floor.py reads them).

    python bench/meshfloor/nocreads.py PLAN.pkl OUT.json [model] [batch]
"""

import collections
import json
import math
import pickle
import sys
from dataclasses import replace

import onnx

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import hypercut_sweep as hs

import npucc.backend.lower as lower_pkg
from npucc.backend.lower import conv, matmul
from npucc.compiler import batch_input_shapes, pipeline
from npucc.ir.isa import Copy, DdrRef, NocCopy
from npucc.ir.isa_cost import copy_bytes
from npucc.ir.plan import PlannedGraph
from npucc.ir.scheduled_program import mesh_timing_dag, node_ddr_bytes
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

pkl, out = sys.argv[1], sys.argv[2]
model_name = sys.argv[3] if len(sys.argv) > 3 else "resnet50"
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 8
graph, plan = pickle.load(open(pkl, "rb"))
target = load_target("mesh8x8")
model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
passes = pipeline(
    replace(CompileOptions(target="mesh8x8"), input_shapes=batch_input_shapes(model, None, batch))
)
split = [p.name for p in passes].index("hypercut")
later = passes[split + 1 :]
upto = [p.name for p in later].index("schedule") + 1

# the blocking each lowered layer picks (the last pick while that layer is lowered)
current = {"layer": None, "cores": ()}
seen: dict[str, tuple] = {}  # lowered layer -> (op, inputs, outputs)
picks: dict[str, dict] = {}
real_lower_layer = lower_pkg._lower_layer


def spy_lower_layer(lctx, layer, cores, parts, folds):
    current["layer"], current["cores"] = layer.name, tuple(cores)
    current["graph"] = lctx.graph
    seen[layer.name] = (layer.op, list(layer.inputs), list(layer.outputs))
    try:
        return real_lower_layer(lctx, layer, cores, parts, folds)
    finally:
        current["layer"] = None


def spy_choose(real):
    def choose(ctx, shape, *a, **k):
        plan_, blocks = real(ctx, shape, *a, **k)
        if current["layer"] is not None:
            picks[current["layer"]] = dict(
                order=plan_.order, nb=plan_.nb, kb=plan_.kb, mb=plan_.mb, chunks=plan_.chunks,
                m_blocks=len(blocks), n=shape.n, k=shape.k, instances=shape.instances,
                noc=list(shape.noc), x_onchip=shape.x_onchip,
            )  # fmt: skip
        return plan_, blocks

    return choose


lower_pkg._lower_layer = spy_lower_layer
conv.choose_blocking = spy_choose(conv.choose_blocking)
matmul.choose_blocking = spy_choose(matmul.choose_blocking)

ctx = CompileContext(target)
sched = PassManager(later[:upto]).run(PlannedGraph(graph, plan), ctx)
prog = sched.program
replays = [r for _, r in sched.schedules]
rf = ctx.stats["roofline"]
print("pred", ctx.stats["predicted_makespan"], "ddr", rf["ddr_bytes"], "min", rf["min_ddr_bytes"],
      "bound", rf["bound"], rf["bound_by"], flush=True)  # fmt: skip

dag, base = mesh_timing_dag(prog, replays)
info = [(c, r, node) for c, r in enumerate(replays) for node in r.nodes]  # per dag node
start, finish = dag.times(target)
print("makespan", max(finish), flush=True)

eb = target.elem_bytes
lname = {i: layer.name for i, layer in enumerate(prog.layers)}
step_of = {}
for si, st in enumerate(plan.steps):
    for gi, g in enumerate(st.groups):
        for li in g.layers:
            step_of[graph.layers[li].name] = (si, gi, st.nsub, bool(st.loop))


def whole(key):
    return prog.key(key) if key in prog.aliases or key in prog.slices else key


def size(name):
    """Bytes of lowering-graph tensor `name` (a sub-batch slice: its own)."""
    t = current["graph"].tensors.get(name)
    if t is not None:
        return math.prod(t.shape) * eb
    t = prog.tensors.get(whole(name))
    return t.nbytes(eb) if t is not None else 0


rows: dict[str, dict] = {}
for v, (c, r, node) in enumerate(info):
    nm = lname.get(node.layer, str(node.layer))
    row = rows.get(nm)
    if row is None:
        base_name = nm.split("@")[0]
        row = rows[nm] = dict(
            name=nm, layer=base_name, step=step_of.get(base_name), blocking=picks.get(nm),
            start=1 << 62, end=0, cores=collections.Counter(),
            noc_read=collections.defaultdict(collections.Counter),  # src -> core -> bytes
            noc_read_cyc=collections.Counter(), noc_write=collections.Counter(),
            noc_write_cyc=collections.Counter(), ddr=collections.Counter(),
            ddr_cyc=collections.Counter(), cube=collections.Counter(),
            mte1=collections.Counter(), vector=collections.Counter(),
        )  # fmt: skip
    if node.pipe is None:
        continue
    row["start"] = min(row["start"], start[v])
    row["end"] = max(row["end"], finish[v])
    row["cores"][c] += 1
    ins = node.instr
    if isinstance(ins, NocCopy):
        b = copy_bytes(target, ins)
        if node.pipe == "MTE2":
            row["noc_read"][whole(ins.src.key)][c] += b
            row["noc_read_cyc"][c] += node.cycles
        else:
            row["noc_write"][c] += b
            row["noc_write_cyc"][c] += node.cycles
    elif (
        node.pipe in ("MTE2", "MTE3")
        and isinstance(ins, Copy)
        and (isinstance(ins.src, DdrRef) or isinstance(ins.dst, DdrRef))
    ):
        row["ddr"][c] += node_ddr_bytes(target, r, node)
        row["ddr_cyc"][c] += node.cycles
    elif node.pipe == "CUBE":
        row["cube"][c] += node.cycles
    elif node.pipe == "MTE1":
        row["mte1"][c] += node.cycles
    elif node.pipe == "VECTOR":
        row["vector"][c] += node.cycles

pickle.dump(
    (
        {k: {f: (dict(v) if isinstance(v, dict) else v) for f, v in r.items() if f != "noc_read"}
         | {"noc_read": {a: dict(b) for a, b in r["noc_read"].items()}} for k, r in rows.items()},
        seen, picks,
        {n: math.prod(t.shape) * eb for n, t in current["graph"].tensors.items()},
        {k: None for k in prog.onchip}, {k: whole(k) for k in (*prog.aliases, *prog.slices)},
    ),
    open(out + ".raw.pkl", "wb"),
)  # fmt: skip
result = []
for nm, row in rows.items():
    layer = seen.get(nm)
    ins = []
    if layer is not None:
        op, inputs, outputs = layer
        for name in inputs:
            if not name:
                continue
            k = whole(name)
            ins.append(dict(name=name, key=k, bytes=size(name), onchip=k in prog.onchip))
        outs = [dict(name=o, key=whole(o), bytes=size(o), onchip=whole(o) in prog.onchip)
                for o in outputs]  # fmt: skip
    else:
        outs, op = [], "?"
    result.append(dict(
        name=nm, layer=row["layer"], op=op, step=row["step"], blocking=row["blocking"],
        start=row["start"] if row["end"] else 0, end=row["end"],
        cores=sorted(row["cores"]), inputs=ins, outputs=outs,
        noc_read={k: dict(v) for k, v in row["noc_read"].items()},
        noc_read_cyc=dict(row["noc_read_cyc"]), noc_write=dict(row["noc_write"]),
        noc_write_cyc=dict(row["noc_write_cyc"]), ddr=dict(row["ddr"]),
        ddr_cyc=dict(row["ddr_cyc"]), cube=dict(row["cube"]), mte1=dict(row["mte1"]),
        vector=dict(row["vector"]),
    ))  # fmt: skip
json.dump(dict(pred=ctx.stats["predicted_makespan"], roofline=rf, rows=result,
               steps=[dict(nsub=s.nsub, loop=bool(s.loop),
                           groups=[dict(layers=[graph.layers[i].name for i in g.layers],
                                        rect=str(getattr(g, "rect", ""))) for g in s.groups])
                      for s in plan.steps]),
          open(out, "w"), default=str)  # fmt: skip
tot = sum(sum(sum(c.values()) for c in r["noc_read"].values()) for r in result)
print("NoC read bytes", tot, "rows", len(result), flush=True)
