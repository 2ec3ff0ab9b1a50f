"""sqz64: per layer run of each pickled plan (plans.py), the estimate's end and energy against
the scheduled program's (the mesh timing `mesh_makespan` replays, node by node); JSON to ARGV[2].

The executed end of a layer run is its last node's finish in the TimingDag of the scheduled
program (predicted = interpreted); its energy the sum of `instr_energy` of its nodes."""

from __future__ import annotations

import collections
import json
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plans import graph_and_target  # noqa: E402

from npucc.backend.estimate.exec_cost import ExecCostModel, LayerRun, _cost_of  # noqa: E402
from npucc.backend.estimate.list_schedule import Timeline, schedule  # noqa: E402
from npucc.backend.lower.subbatch import loop_parts  # noqa: E402
from npucc.ir.isa_cost import instr_energy  # noqa: E402
from npucc.ir.plan import PlannedGraph  # noqa: E402
from npucc.ir.scheduled_program import mesh_timing_dag  # noqa: E402
from npucc.passes import CompileContext, PassManager  # noqa: E402


def estimate_runs(graph, target, plan):
    """(name, end, energy, ddr, cores) per layer run of the estimate's list schedule."""
    m = ExecCostModel(graph, target)
    parts = loop_parts(graph, plan.steps, m.splits)
    onchip = m.onchip(plan.steps, plan.offchip, parts)
    priced = m._priced(plan.steps, parts, onchip)
    runs = m._linked(priced)
    at = Timeline.start(target.cores)
    latency = schedule(target, runs, at)
    out = []
    for item, end, r in zip(priced, at.ends[1:], runs, strict=True):
        if isinstance(item, LayerRun):
            name = "stage"
        else:
            p = item[0]
            name = graph.layers[p.layer].name + (f"@{p.part}/{p.parts}" if p.parts > 1 else "")
        c = _cost_of(item)
        out.append((name, end, c.energy, c.ddr, sum(b - a for a, b in r.spans)))
    return latency, out


def executed_layers(graph, target, later, plan):
    """Per program layer name: (first start, last finish, energy pJ); the makespan."""
    ctx = CompileContext(target)
    upto = [p.name for p in later].index("schedule") + 1
    sched = PassManager(later[:upto]).run(PlannedGraph(graph, plan), ctx)
    prog = sched.program
    replays = [r for _, r in sched.schedules]
    dag, _ = mesh_timing_dag(prog, replays)
    nodes = [node for r in replays for node in r.nodes]  # per dag node
    layer_of = [node.layer for node in nodes]
    pj = [0.0 if node.instr is None else instr_energy(target, node.instr) for node in nodes]
    start, finish = dag.times(target)
    first, last, energy = {}, collections.Counter(), collections.Counter()
    for v, layer in enumerate(layer_of):
        name = prog.layers[layer].name if layer >= 0 else "-"
        last[name] = max(last[name], finish[v])
        energy[name] += pj[v]
        if dag.pipes[v] is not None:
            first[name] = min(first.get(name, 1 << 62), start[v])
    layers = {n: (first.get(n, 0), last[n], energy[n]) for n in last}
    return layers, max(finish), ctx.stats["predicted_makespan"], sum(pj)


if __name__ == "__main__":
    plans = pickle.loads(Path(sys.argv[1]).read_bytes())
    graph, target, later = graph_and_target()
    result = {}
    for method, plan in plans.items():
        t = time.process_time()
        latency, runs = estimate_runs(graph, target, plan)
        layers, makespan, predicted, energy = executed_layers(graph, target, later, plan)
        step_of = {}
        for si, st in enumerate(plan.steps):
            for g in st.groups:
                for li in g.layers:
                    step_of[graph.layers[li].name] = (si, (g.rect.x, g.rect.y, g.rect.w, g.rect.h))
        result[method] = {
            "steps": [
                {
                    "nsub": s.nsub,
                    "loop": s.loop,
                    "groups": [
                        [graph.layers[i].name for i in g.layers]
                        + [[g.rect.x, g.rect.y, g.rect.w, g.rect.h]]
                        for g in s.groups
                    ],
                }
                for s in plan.steps
            ],
            "estimate": {"latency": latency, "energy": plan.cost.energy_pj, "runs": runs},
            "executed": {
                "makespan": makespan,
                "predicted": predicted,
                "energy": energy,
                "layers": layers,
            },
        }
        print(
            method,
            "est",
            latency,
            "exec",
            makespan,
            predicted,
            "energy",
            energy,
            f"{time.process_time() - t:.1f} CPU s",
            flush=True,
        )
    Path(sys.argv[2]).write_text(json.dumps(result, indent=0))
