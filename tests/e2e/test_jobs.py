"""Worker processes in a compile (npucc.parallel): a mesh's cores scheduled in workers give the
same bytes as in one process, the pool is used where the work is large enough and only there,
and the outer pools (conformance, explore) compile with one job."""

from __future__ import annotations

import os
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from batched import compile_with_plan, symbolic_batch
from onnx import TensorProto, helper

import npucc
from npucc.backend.schedule import schedule_pass
from npucc.compiler import compile_until
from npucc.explore import point
from npucc.ir.plan import Group, MeshPlan, Rect, Step
from npucc.ir.replay import Replay
from npucc.tools import conformance

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture
def pids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each schedule carries the id of the process that made it (`seconds["pid"]`, pickled
    back with it from a worker)."""
    real = schedule_pass.schedule_graph

    def traced(*args: object, **kw: object):
        schedule, replay = real(*args, **kw)
        schedule.seconds["pid"] = os.getpid()
        return schedule, replay

    monkeypatch.setattr(schedule_pass, "schedule_graph", traced)


def _made_in(scheduled) -> set[int]:
    return {int(schedule.seconds["pid"]) for schedule, _ in scheduled.schedules}


def _same_schedules(one, two) -> None:
    """Two ScheduledPrograms of one model hold equal schedules and replays, each replay on its
    program's own graph objects."""
    assert len(one.schedules) == len(two.schedules)
    for scheduled in (one, two):
        for core, (_, replay) in zip(scheduled.program.cores, scheduled.schedules, strict=True):
            assert replay.graph is core.graph
            assert all(a is b for a, b in zip(replay.nodes, core.graph.nodes, strict=False))
    for (s1, r1), (s2, r2) in zip(one.schedules, two.schedules, strict=True):
        assert (s1.order, s1.offsets, s1.spills) == (s2.order, s2.offsets, s2.spills)
        for f in fields(Replay):
            if f.name != "graph":
                assert getattr(r1, f.name) == getattr(r2, f.name), f.name


def test_a_mesh_scheduled_in_workers_gives_the_same_bytes(pids, monkeypatch):
    model = str(MODELS / "residual_block.onnx")
    tiled = compile_until(model, "lower-tiles", target="mesh8x8", jobs=1)
    assert sum(len(core.graph) for core in tiled.cores) < schedule_pass.FORK_NODES
    # below the threshold the cores are scheduled here, whatever the jobs
    assert _made_in(compile_until(model, "schedule", target="mesh8x8", jobs=2)) == {os.getpid()}
    monkeypatch.setattr(schedule_pass, "FORK_NODES", 0)
    here = compile_until(model, "schedule", target="mesh8x8", jobs=1)
    there = compile_until(model, "schedule", target="mesh8x8", jobs=2)
    assert _made_in(here) == {os.getpid()}
    # NOTE: two shares of the cores: this process schedules one, a worker the other
    assert os.getpid() in _made_in(there) and len(_made_in(there)) == 2
    _same_schedules(here, there)
    assert here.makespan == there.makespan
    one, two = (npucc.compile(model, "mesh8x8", jobs=j) for j in (1, 2))
    assert (one.stream, one.image) == (two.stream, two.image)
    assert one.stats["peak"] == two.stats["peak"] and one.stats["layers"] == two.stats["layers"]


def _two_steps(plan: MeshPlan) -> MeshPlan:
    """residual_block in one loop of 8 sub-batches over two steps that share cores."""
    first = tuple(Group((i,), Rect(i, 0, 1, 1)) for i in range(4))
    second = tuple(Group((4 + i,), Rect(i, 0, 1, 1)) for i in range(2))
    return replace(plan, steps=(Step(first, 8), Step(second, 8, loop=True)), offchip=frozenset())


def test_a_plan_of_two_steps_gives_the_same_bytes_in_workers(pids, monkeypatch):
    model = symbolic_batch(onnx.load(MODELS / "residual_block.onnx"))
    monkeypatch.setattr(schedule_pass, "FORK_NODES", 0)
    streams = []
    for jobs in ("1", "2"):
        monkeypatch.setenv("NPUCC_JOBS", jobs)  # NOTE: compile_with_plan's default jobs
        program, planned = compile_with_plan(model, "mesh8x8", 8, _two_steps)
        assert len(planned.plan.steps) == 2
        streams.append((program.stream, program.image, program.stats["predicted_makespan"]))
    assert streams[0] == streams[1]


def _relu_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_outer_pools_compile_with_one_job(monkeypatch):
    """The conformance cases and the sweep's points run in pools already: their compiles use
    one process each (no pool inside theirs)."""
    asked: list[object] = []
    real = npucc.compile

    def traced(*args: object, **kw: object):
        asked.append(kw.get("jobs"))
        return real(*args, **kw)

    monkeypatch.setattr(npucc, "compile", traced)
    monkeypatch.setattr(point, "compile_model", traced)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    case = conformance.Case("t_relu", "Relu", _relu_model(), [({"x": x}, [np.maximum(x, 0)])])
    monkeypatch.setitem(conformance._CASES, case.name, case)
    assert conformance.run_case(case.name).status == "pass"
    target = npucc.load_target("davinci-core").to_dict()
    options = {"schedule": "dan", "input_shapes": {}, "check": False}
    assert point.evaluate(_relu_model().SerializeToString(), target, options)["status"] == "ok"
    assert asked == [1, 1]
