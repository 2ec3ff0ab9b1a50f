"""hcest17: a plan's estimate against its execution run by run.

`python bench/hcest17/compare.py MODEL PLATFORM BATCH PLAN.txt OUT.json`: the plan text (the
hypercut pass's dump, as bench/hypercut_*.json's `plan_text`) parsed back onto the compiled
graph, priced by the estimate (each layer run's release, channel and end in the list schedule)
and lowered + scheduled (each layer's first start and last finish in the mesh timing, which
the interpreter equals)."""

from __future__ import annotations

import collections
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hypercut_sweep import SWEPT, symbolic_batch  # noqa: E402

from npucc.backend.estimate.exec_cost import ExecCostModel, LayerRun, _cost_of  # noqa: E402
from npucc.backend.estimate.list_schedule import Timeline  # noqa: E402
from npucc.backend.hypercut.workload import workload_from_graph  # noqa: E402
from npucc.backend.lower.subbatch import loop_parts  # noqa: E402
from npucc.compiler import batch_input_shapes, pipeline  # noqa: E402
from npucc.ir.isa_cost import instr_energy  # noqa: E402
from npucc.ir.plan import Cost, Group, MeshPlan, PlannedGraph, Rect, Step  # noqa: E402
from npucc.ir.scheduled_program import mesh_timing_dag  # noqa: E402
from npucc.options import CompileOptions  # noqa: E402
from npucc.passes import CompileContext, PassManager  # noqa: E402
from npucc.target import load_target  # noqa: E402
from npucc.target.timing import DdrChannel  # noqa: E402


def graph_and_target(model: str, platform: str, batch: int):
    """The compiled graph up to the hypercut pass, the target and the later passes."""
    onnx_model = symbolic_batch(onnx.load(SWEPT[model]))
    target = load_target(platform)
    options = CompileOptions(target=platform)
    passes = pipeline(replace(options, input_shapes=batch_input_shapes(onnx_model, None, batch)))
    split = [p.name for p in passes].index("hypercut")
    graph = PassManager(passes[:split]).run(onnx_model, CompileContext(target))
    return graph, target, passes[split + 1 :]


def parse_plan(graph, text: str) -> tuple[tuple[Step, ...], frozenset[str]]:
    """Steps and offchip of a plan's text form."""
    index = {layer.name: i for i, layer in enumerate(graph.layers)}
    steps, groups, offchip = [], [], frozenset()
    nsub, loop = 1, False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("offchip "):
            offchip = frozenset(re.findall(r"'([^']*)'", s))
        elif s.startswith("step "):
            if groups:
                steps.append(Step(tuple(groups), nsub, loop))
            groups = []
            nsub = int(re.search(r"sub-batches=(\d+)", s).group(1))
            loop = "(same loop)" in s
        elif re.match(r"\d+,\d+\+\d+x\d+ :", s):
            rect, names = s.split(" : ", 1)
            x, y, w, h = map(int, re.match(r"(\d+),(\d+)\+(\d+)x(\d+)", rect).groups())
            layers = tuple(index[n] for n in re.findall(r"'([^']*)'", names))
            groups.append(Group(layers, Rect(x, y, w, h)))
    steps.append(Step(tuple(groups), nsub, loop))
    return tuple(steps), offchip


def traced_schedule(target, runs):
    """`list_schedule.schedule` with each run's barrier, releases, channel start/end and end."""
    at = Timeline.start(target.cores)
    ends, core_free, mte2_free, channel = at.ends, at.core_free, at.mte2_free, at.channel
    shared = DdrChannel(target).shared
    trace = []
    for cost, spans, _, data, srcs, _ in runs:
        timings, _, _, lead_held, rest_held, after = cost
        barrier = max(max(core_free[a:b]) for a, b in spans)
        loaded = max(max(mte2_free[a:b]) for a, b in spans)
        releases = [loaded]
        for writers in srcs:
            release = barrier
            for k, flag in writers:
                release = max(release, ends[k] + flag)
            releases.append(release)
        end, tail = -1, 0
        for timing in timings:
            begin, t_end = -1, 0
            for c, t in timing.tails:
                r = releases[c]
                if begin < 0 or r < begin:
                    begin = r
                t_end = max(t_end, r + t)
            t_end = max(t_end, (barrier if begin < 0 else begin) + timing.cold)
            if t_end > end:
                end, tail = t_end, timing.mte2_tail
        compute_end = end
        ch0 = channel
        if shared:
            if lead_held:
                channel = max(channel, loaded) + lead_held
            if rest_held:
                ready = min((releases[c] for c in data), default=loaded)
                channel = max(channel, ready) + rest_held
            if channel + after > end:
                end, tail = channel + after, after
        for a, b in spans:
            core_free[a:b] = [end] * (b - a)
            mte2_free[a:b] = [end - tail] * (b - a)
        ends.append(end)
        trace.append(
            dict(barrier=barrier, loaded=loaded, releases=releases[1:], compute_end=compute_end,
                 ch_before=ch0, ch_after=channel, lead=lead_held, rest=rest_held, after=after,
                 end=end, cold=max(t.cold for t in timings))
        )  # fmt: skip
    return max(ends), trace


def estimate_runs(graph, target, steps, offchip):
    """Latency and per layer run of the estimate's list schedule: name and trace."""
    m = ExecCostModel(graph, target)
    parts = loop_parts(graph, steps, m.splits)
    onchip = m.onchip(steps, offchip, parts)
    priced = m._priced(steps, parts, onchip)
    runs = m._linked(priced, onchip)
    latency, trace = traced_schedule(target, runs)
    out = []
    for item, tr, r in zip(priced, trace, runs, strict=True):
        if isinstance(item, LayerRun):
            name = "stage"
        else:
            p = item[0]
            name = graph.layers[p.layer].name + (f"@{p.part}/{p.parts}" if p.parts > 1 else "")
        c = _cost_of(item)
        tr.update(name=name, energy=c.energy, ddr=c.ddr, cores=sum(b - a for a, b in r.spans))
        out.append(tr)
    cost = m.evaluate(steps, offchip)
    return latency, cost, out


def executed_layers(graph, target, later, plan):
    """Per program layer name: (first start, last finish, energy pJ, ddr bytes, cores); the
    makespan, the predicted one, the energy."""
    ctx = CompileContext(target)
    upto = [p.name for p in later].index("schedule") + 1
    sched = PassManager(later[:upto]).run(PlannedGraph(graph, plan), ctx)
    prog = sched.program
    replays = [r for _, r in sched.schedules]
    dag, _ = mesh_timing_dag(prog, replays)
    core_of = [c for c, r in enumerate(replays) for _ in r.nodes]  # per dag node
    nodes = [node for r in replays for node in r.nodes]
    layer_of = [node.layer for node in nodes]
    pj = [0.0 if node.instr is None else instr_energy(target, node.instr) for node in nodes]
    start, finish = dag.times(target)
    first, last = {}, collections.Counter()
    energy, ddr, cores = collections.Counter(), collections.Counter(), collections.defaultdict(set)
    ddr_first, ddr_last = {}, collections.Counter()
    for v, layer in enumerate(layer_of):
        name = prog.layers[layer].name if layer >= 0 else "-"
        last[name] = max(last[name], finish[v])
        energy[name] += pj[v]
        b = dag.nbytes[v]
        if dag.pipes[v] is not None:
            first[name] = min(first.get(name, 1 << 62), start[v])
            cores[name].add(core_of[v])
        if b:
            ddr[name] += b
            ddr_first[name] = min(ddr_first.get(name, 1 << 62), start[v])
            ddr_last[name] = max(ddr_last[name], finish[v])
    if DUMP:
        import pickle

        names = [prog.layers[x].name if x >= 0 else "-" for x in layer_of]
        Path(DUMP).write_bytes(
            pickle.dumps(
                dict(
                    succs=dag.succs,
                    cycles=dag.cycles,
                    nbytes=dag.nbytes,
                    pipes=dag.pipes,
                    start=start,
                    finish=finish,
                    names=names,
                    core=core_of,
                    kinds=[n.op for r in replays for n in r.nodes],
                )
            )
        )
    layers = {
        n: dict(start=first.get(n, 0), end=last[n], energy=energy[n], ddr=ddr[n],
                cores=len(cores[n]), ddr_first=ddr_first.get(n), ddr_last=ddr_last.get(n))
        for n in last
    }  # fmt: skip
    return layers, max(finish), ctx.stats["predicted_makespan"], sum(pj)


DUMP = None

if __name__ == "__main__":
    if "--dump" in sys.argv:
        DUMP = sys.argv[sys.argv.index("--dump") + 1]
    model, platform, batch, plan_path, out = sys.argv[1:6]
    graph, target, later = graph_and_target(model, platform, int(batch))
    steps, offchip = parse_plan(graph, Path(plan_path).read_text())
    t = time.process_time()
    latency, cost, runs = estimate_runs(graph, target, steps, offchip)
    print("estimate", latency, cost, f"{time.process_time() - t:.1f} CPU s", flush=True)
    wl = workload_from_graph(graph, None)
    plan = MeshPlan(wl, target.mesh.rows, target.mesh.cols, steps, "hypercut", cost, Cost(),
                    "exec", 0.0, offchip)  # fmt: skip
    plan.verify()
    result = {"estimate": {"latency": latency, "energy": cost.energy_pj, "runs": runs}}
    if "--no-exec" not in sys.argv:
        layers, makespan, predicted, energy = executed_layers(graph, target, later, plan)
        print("executed", makespan, predicted, energy, f"{time.process_time() - t:.1f} CPU s")
        result["executed"] = dict(makespan=makespan, predicted=predicted, energy=energy,
                                  layers=layers)  # fmt: skip
    Path(out).write_text(json.dumps(result, indent=0))
