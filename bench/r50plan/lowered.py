"""What bench/r50plan's scripts share: the compile passes of the batch-symbolic model at a
batch, and a pickled (graph, plan) with the passes after `hypercut` that lower it."""

import pickle
import sys
from dataclasses import replace

import onnx

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import hypercut_sweep as hs

from npucc.compiler import batch_input_shapes, pipeline
from npucc.ir.plan import PlannedGraph
from npucc.options import CompileOptions
from npucc.passes import Pass
from npucc.target import Target, load_target


def compile_passes(
    model_name: str, batch: int, platform: str
) -> tuple[onnx.ModelProto, Target, list[Pass]]:
    """The batch-symbolic model `model_name` (bench/hypercut_sweep.py's), the target and the
    compile passes for it at `batch` on `platform`."""
    model = hs.symbolic_batch(onnx.load(hs.SWEPT[model_name]))
    options = replace(
        CompileOptions(target=platform), input_shapes=batch_input_shapes(model, None, batch)
    )
    return model, load_target(platform), pipeline(options)


def planned(argv: list[str]) -> tuple[PlannedGraph, Target, list[Pass]]:
    """Of `argv` (PLAN.pkl [model] [batch] [platform], default resnet50 8 mesh8x8): the pickled
    plan on its graph, the target and the passes after `hypercut`."""
    args = argv[2:] + ["resnet50", "8", "mesh8x8"][len(argv) - 2 :]
    with open(argv[1], "rb") as f:
        graph, plan = pickle.load(f)
    _, target, passes = compile_passes(args[0], int(args[1]), args[2])
    later = passes[[p.name for p in passes].index("hypercut") + 1 :]
    return PlannedGraph(graph, plan), target, later
