"""Traces of compiled models at shrunk capacities: one core's DAG of light ResNet-50 and BERT.

`npucc compile MODEL --emit-trace DIR` writes the same graphs (the lower-tiles IR, one DAG per
core). The lowering sized its tiles for davinci-core's on-chip tiers; scheduling the busiest
core's DAG in a fraction of L1 and UB makes it spill, as programs will once tensors stay on
chip across layers. A tier never shrinks below the largest set of its buffers one node uses.
"""

from __future__ import annotations

from collections.abc import Callable

from npucc.checking import randomize_weights
from npucc.compiler import CompileOptions, compile_to
from npucc.frontend.onnx_import import load_model
from npucc.ir.tiled import TileGraph
from npucc.target import load_target
from npucc.tools.bench_hypercut import MODELS

SHRINK = 8  # L1 and UB get 1/SHRINK of davinci-core's bytes
TARGET = "davinci-core"


def busiest_core(model: str, name: str) -> TileGraph:
    """The DAG of the core with the most nodes when `model` (a MODELS key) is lowered."""
    onnx_model = randomize_weights(load_model(MODELS[model]), seed=0)
    tiled = compile_to(onnx_model, "lower-tiles", CompileOptions(target=TARGET))
    graph = max((core.graph for core in tiled.cores), key=len)
    graph.name = name
    return graph


def shrunk_capacity(graph: TileGraph, shrink: int = SHRINK) -> dict[str, int]:
    """davinci-core's on-chip capacities with L1 and UB divided by `shrink` (floored by need)."""
    caps = dict(load_target(TARGET).memory.on_chip())
    need: dict[str, int] = {}
    for node in graph.nodes:
        use: dict[str, int] = {}
        for b in node.bufs:
            buf = graph.buffers[b]
            use[buf.tier] = use.get(buf.tier, 0) + buf.size
        for tier, size in use.items():
            need[tier] = max(need.get(tier, 0), size)
    for tier in ("L1", "UB"):
        caps[tier] = max(caps[tier] // shrink, need.get(tier, 0))
    return caps


MODEL_TRACES: dict[str, Callable[[], TileGraph]] = {
    "ResNet50_trace": lambda: busiest_core("resnet50", "ResNet50_trace"),
    "BERT_trace": lambda: busiest_core("transformer", "BERT_trace"),
}
