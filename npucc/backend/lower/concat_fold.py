"""Concats folded away on one core: each input written in place in the concat's output.

A concat copies every element once more (a DDR read and a write each). When its inputs are
contiguous blocks of its output (every dim before the axis is 1: NCHW channels at batch 1,
the fire and inception modules' joins), each input's producer can write its output straight
into its block of the concat's DDR tensor instead (a slice of it: TiledProgram.add_slice), and
the concat emits nothing. An input qualifies when a compute layer (not a view, a host segment
or another concat) produces it, the concat is its only reader, it is not a graph output, and
its concat's output stays in DDR (is not resident); a concat folds when all its inputs do.

NOTE: folding never adds DDR bytes: the concat's output is written to DDR either way, and each
input is then written once (by its producer, in place) instead of written by it, read and
written again by the concat (or, if it was resident, written once by the concat). The caller
chooses the resident tensors again without the folded ones, whose L1 others may then use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from npucc.backend.lower.resident import Residency
from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import HOST_OP, VIEW_OPS


@dataclass(frozen=True, slots=True)
class ConcatFolds:
    """The folded concats: each input's place in its concat's output."""

    parts: dict[str, tuple[str, int]]  # input -> (the concat's output, element offset in it)
    layers: frozenset[int]  # indices of the folded concat layers (they emit nothing)

    def tensors(self) -> frozenset[str]:
        """Every tensor a folded concat reads or writes (they stay in DDR)."""
        return frozenset({*self.parts, *(whole for whole, _ in self.parts.values())})


NO_FOLDS = ConcatFolds({}, frozenset())


def _qualifies(graph: Graph, name: str, concat: Layer, made: frozenset[str]) -> bool:
    """Whether input `name` of `concat` can be written in place (see the module docstring;
    `made`: tensors compute layers write in bands, without a producer in `graph`)."""
    producer = graph.producer(name)
    if producer is None and name not in made:
        return False
    if producer is not None and producer.op in (*VIEW_OPS, HOST_OP, "concat"):
        return False
    users = graph.users(name)
    return users == [concat] and concat.inputs.count(name) == 1 and name not in graph.outputs


def fold_concats(
    graph: Graph, residency: Residency, made: frozenset[str] = frozenset()
) -> ConcatFolds:
    """The concats of `graph` whose inputs their producers can write in place, given the
    resident tensors chosen without folds (`residency`); `made`: the outputs of cascaded
    chains (npucc.backend.lower.cascade), written band by band by layers of other names."""
    parts: dict[str, tuple[str, int]] = {}
    layers = []
    for index, layer in enumerate(graph.layers):
        if layer.op != "concat":
            continue
        out = layer.outputs[0]
        shape = graph.tensors[out].shape
        if math.prod(shape[: layer.attrs["axis"]]) != 1 or out in residency.first:
            continue
        if not all(_qualifies(graph, name, layer, made) for name in layer.inputs):
            continue
        at = 0
        for name in layer.inputs:
            parts[name] = (out, at)
            at += math.prod(graph.tensors[name].shape)
        layers.append(index)
    return ConcatFolds(parts, frozenset(layers))
