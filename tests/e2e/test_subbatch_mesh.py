"""Sub-batches executed on a mesh: plans split in sub-batches, checked against onnxruntime."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import onnx
import pytest
from batched import compile_with_plan, split_every_step, symbolic_batch

import npucc
from npucc.backend.estimate.exec_cost import ExecCostModel
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.ir.plan import Group, MeshPlan, Rect, Step

MODELS = Path(__file__).resolve().parents[2] / "models"


def _model(name: str) -> onnx.ModelProto:
    return symbolic_batch(onnx.load(MODELS / f"{name}.onnx"))


def _executed(program, model: onnx.ModelProto, seed: int):
    """Run `program` on seeded inputs: its outputs match onnxruntime's and its makespan is the
    predicted one; the run's result."""
    inputs = random_inputs(program.inputs, seed)
    result = program.execute(inputs)
    for c in compare(result.outputs, run_onnxruntime(model, inputs)):
        assert c.ok, f"{c.name}: max abs error {c.max_abs} vs max |ref| {c.max_ref}"
    assert result.makespan == program.stats["predicted_makespan"]
    return result


def _estimate_error(planned, program, makespan: int) -> float:
    """The plan's execution-faithful estimate over the interpreted makespan, less 1."""
    plan = planned.plan
    estimate = ExecCostModel(planned.graph, program.target).evaluate(plan.steps, plan.offchip)
    return estimate.latency_cycles / makespan - 1


@pytest.mark.parametrize(
    ("name", "nsub", "loop"),
    [("small_cnn", 4, False), ("small_cnn", 2, False), ("residual_block", 2, True)],
)
def test_a_split_plan_runs_on_a_mesh_as_planned(name, nsub, loop):
    """Each layer of a split step runs per sub-batch (a pipeline, or a loop through every
    step); outputs match onnxruntime, predicted makespan = interpreted, and the estimate
    prices the same execution within 15 %."""
    model = _model(name)
    program, planned = compile_with_plan(model, "mesh8x8", 4, split_every_step(nsub, loop))
    assert all(step.nsub == nsub for step in planned.plan.steps)
    result = _executed(program, model, 0)
    assert abs(_estimate_error(planned, program, result.makespan)) < 0.15


def test_the_plan_is_made_for_the_batch_compiled():
    model = _model("small_cnn")
    one = npucc.compile_until(model, "hypercut", "mesh8x8", batch=1, beam_width=4).plan
    four = npucc.compile_until(model, "hypercut", "mesh8x8", batch=4, beam_width=4).plan
    assert (one.workload.batch, four.workload.batch) == (1, 4)
    assert [x.macs for x in four.workload.layers] == [x.macs for x in one.workload.layers]
    assert "batch=4" in four.to_text().splitlines()[0]


def test_a_split_loop_fetches_each_weight_once():
    """The loop's cube weights are staged on chip once and every sub-batch reads them there:
    with its handoffs on chip too, the program moves about the least DDR bytes (each weight
    once, the input, the output; 1.32x them when every sub-batch fetched its weights) and
    still matches onnxruntime."""
    model = _model("residual_block")
    program, planned = compile_with_plan(model, "mesh8x8", 4, split_every_step(2, loop=True))
    assert 'onchip "conv1.w.bn@chip0"' in program.stream
    _executed(program, model, 1)
    line = program.stats["roofline"]
    assert line["ddr_bytes"] < 1.01 * line["min_ddr_bytes"]


def _shared_core_loop(plan: MeshPlan) -> MeshPlan:
    """residual_block in one loop of 8 sub-batches: step 0 puts its first four layers on
    cores (0,0) ... (0,3), step 1 its last two back on (0,0) and (0,1)."""
    first = tuple(Group((i,), Rect(i, 0, 1, 1)) for i in range(4))
    second = tuple(Group((4 + i,), Rect(i, 0, 1, 1)) for i in range(2))
    return replace(plan, steps=(Step(first, 8), Step(second, 8, loop=True)), offchip=frozenset())


def test_a_loop_whose_steps_share_cores_is_priced_sub_batch_by_sub_batch():
    """Sub-batch j of a layer waits for sub-batch j of its producer on another core: the
    cores that run both steps pass one sub-batch through the whole loop before the next."""
    model = _model("residual_block")
    program, planned = compile_with_plan(model, "mesh8x8", 8, _shared_core_loop)
    # `bn0` (core 1) is read on cores 2 and 3 only, but core 1 runs layer 5, which waits for
    # them: one sub-batch held, the producer waiting for its readers, still as estimated
    assert re.search(r'onchip "bn0" \S+ f32\[1,', program.stream)
    result = _executed(program, model, 2)
    assert abs(_estimate_error(planned, program, result.makespan)) < 0.15


def _one_rectangle_loop(plan: MeshPlan) -> MeshPlan:
    """One layer a step, all on cores (0,0) ... (0,3), in one loop of 4 sub-batches."""
    order = sorted(i for step in plan.steps for group in step.groups for i in group.layers)
    steps = tuple(
        Step((Group((i,), Rect(0, 0, 4, 1)),), 4, loop=k > 0) for k, i in enumerate(order)
    )
    return replace(plan, steps=steps, offchip=frozenset())


def test_handoffs_taking_turns_with_their_bytes_run_as_planned():
    """A loop's one-slot handoffs whose turns in a sub-batch are disjoint share their homes'
    bytes (`turn=` in the stream); each write waits for the readers of the other's last
    slice there, and the run matches onnxruntime with interpreted = predicted."""
    model = _model("residual_block")
    program, planned = compile_with_plan(model, "mesh8x8", 4, _one_rectangle_loop)
    turns = re.findall(r'onchip ("[^"]+") \S+ \S+ \S+ \S+ at=(\d+) \S+ turn=', program.stream)
    assert len(turns) > len({at for _, at in turns})  # some share their offset
    result = _executed(program, model, 3)
    assert abs(_estimate_error(planned, program, result.makespan)) < 0.15


def _loop_between(plan: MeshPlan) -> MeshPlan:
    """residual_block one layer a step on cores (0,0) ... (0,3): layers 2-4 in a loop of 4
    sub-batches, the others whole."""
    rect = Rect(0, 0, 4, 1)
    steps = tuple(
        Step((Group((i,), rect),), 4 if 2 <= i <= 4 else 1, loop=2 < i <= 4) for i in range(6)
    )
    return replace(plan, steps=steps, offchip=frozenset())


def test_a_loops_whole_input_and_output_take_turns_home_by_home(tmp_path: Path):
    """The loop's whole input `bn0` dies slice by slice (home j after sub-batch j) and its
    whole output `r3` is born so: a life per home (`lives=` in the stream). In a 48 KB
    buffer, where the whole lives leave `r3` no room, `r3` takes `bn0`'s bytes; each home's
    writes wait for that home's readers, the race check passes, the run matches onnxruntime
    with interpreted = predicted, faster than the estimate (which sends `r3` through DDR)."""
    model = _model("residual_block")
    preset = (Path(npucc.__file__).parent / "target" / "presets" / "mesh8x8.toml").read_text()
    small = tmp_path / "mesh8x8_48k.toml"
    small.write_text(preset.replace("onchip_buffer = 524288", "onchip_buffer = 49152"))
    program, planned = compile_with_plan(model, str(small), 4, _loop_between)
    kept = r'onchip "(\w+)" \S+ \S+ \S+ \S+ at=(\d+) live=\S+ lives='
    lives = {name: int(at) for name, at in re.findall(kept, program.stream)}
    assert {"bn0", "r3"} <= set(lives) and lives["r3"] < lives["bn0"] < lives["r3"] + 4 * 8192
    result = _executed(program, model, 4)
    # NOTE: the estimate places by whole lives (`r3` through DDR): execution only gains
    assert _estimate_error(planned, program, result.makespan) > 0.15
