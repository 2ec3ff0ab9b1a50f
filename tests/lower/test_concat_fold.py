"""Concats folded on one core: producers write their outputs in place in the concat's output."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.backend.lower.concat_fold import fold_concats
from npucc.backend.lower.resident import NONE, choose_resident
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.compiler import compile_until
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _fire(batch: int = 1, shared: bool = False, size: int = 40) -> onnx.ModelProto:
    """A fire module: squeeze 1x1 -> (expand 1x1, expand 3x3) -> channel concat -> conv (of as
    many channels as the concat: not split per branch, split-concat-conv); `shared`: the 1x1
    expand's output is also a graph output (then the concat cannot fold)."""
    rng = np.random.default_rng(0)

    def const(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [const("s", 16, 8, 1, 1), const("e1", 32, 16, 1, 1), const("e3", 32, 16, 3, 3)]
    inits.append(const("w", 64, 64, 1, 1))
    nodes = [
        helper.make_node("Conv", ["x", "s"], ["q"]),
        helper.make_node("Relu", ["q"], ["r"]),
        helper.make_node("Conv", ["r", "e1"], ["a"]),
        helper.make_node("Conv", ["r", "e3"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
        helper.make_node("Conv", ["c", "w"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 64, size, size])]
    if shared:
        outputs.append(
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [batch, 32, size, size])
        )
    graph = helper.make_graph(
        nodes,
        "fire",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, size, size])],
        outputs,
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _folds(model: onnx.ModelProto):
    graph = compile_until(model, "prune-unused", TARGET)
    return graph, fold_concats(graph, choose_resident(graph, TARGET))


def test_a_channel_concat_folds_and_the_program_matches_onnxruntime():
    model = _fire()
    graph, folds = _folds(model)
    (index,) = folds.layers
    concat = graph.layers[index]
    assert folds.parts == {"a": ("c", 0), "b": ("c", 32 * 40 * 40)} and concat.op == "concat"
    program = npucc.compile(model, TARGET)
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]
    (row,) = [r for r in program.stats["layers"] if r["name"] == concat.name]
    assert row["ddr_read"] == row["ddr_write"] == 0 and row["cycles"] == 0  # it moves nothing
    # the concat's inputs (64 x 40 x 40 floats) cross DDR once, written by their producers
    roof = program.stats["roofline"]
    assert roof["ddr_bytes"] <= roof["min_ddr_bytes"] + 2 * 64 * 40 * 40 * 4


@pytest.mark.parametrize(("batch", "shared"), [(2, False), (1, True)])
def test_a_strided_or_shared_concat_is_copied(batch, shared):
    model = _fire(batch, shared)
    assert not _folds(model)[1].layers
    program = npucc.compile(model, TARGET)
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))


def test_without_resident_tensors_the_same_concats_fold():
    graph = compile_until(_fire(), "prune-unused", TARGET)
    assert (
        fold_concats(graph, NONE).layers
        == fold_concats(graph, choose_resident(graph, TARGET)).layers
    )
