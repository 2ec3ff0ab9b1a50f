"""sqz64: plan SqueezeNet b64 on mesh8x8 by HyperCut (width 8) and LS with the exec estimate,
as bench/hypercut_sweep.py's --executed does; pickle (graph, passes split, plans) to ARGV[1]."""

from __future__ import annotations

import os
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hypercut_sweep import SWEPT, symbolic_batch  # noqa: E402

from npucc.backend.hypercut.beam import BeamOptions  # noqa: E402
from npucc.backend.planner import PlanOptions, plan_graph  # noqa: E402
from npucc.compiler import batch_input_shapes, pipeline  # noqa: E402
from npucc.options import CompileOptions  # noqa: E402
from npucc.passes import CompileContext, PassManager  # noqa: E402
from npucc.target import load_target  # noqa: E402


def graph_and_target(batch: int = int(os.environ.get("SQZ_BATCH", 64)), platform: str = "mesh8x8"):
    """The compiled graph up to the hypercut pass, the target and the later passes."""
    model = symbolic_batch(onnx.load(SWEPT["squeezenet"]))
    target = load_target(platform)
    options = CompileOptions(target=platform)
    passes = pipeline(replace(options, input_shapes=batch_input_shapes(model, None, batch)))
    split = [p.name for p in passes].index("hypercut")
    graph = PassManager(passes[:split]).run(model, CompileContext(target))
    return graph, target, passes[split + 1 :]


if __name__ == "__main__":
    graph, target, _ = graph_and_target()
    methods = sys.argv[2].split(",") if len(sys.argv) > 2 else ["hypercut", "layer-sequential"]
    plans = {}
    for m in methods:
        t = time.process_time()
        fields = {"beam": BeamOptions(width=8)} if m == "hypercut" else {}
        plans[m] = plan_graph(graph, target, PlanOptions(method=m, **fields))
        print(m, plans[m].cost, f"{time.process_time() - t:.1f} CPU s", flush=True)
    Path(sys.argv[1]).write_bytes(pickle.dumps(plans))
