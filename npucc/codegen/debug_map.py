"""The debug map (`--debug-map FILE.json`): ONNX node -> graph-IR layers -> tile operations per
core -> stream lines, and back (stream line -> layer -> ONNX nodes).

It joins three records the compile keeps anyway: each layer's provenance (`Layer.src`, the
ONNX nodes it computes, merged by fusions and folds, kept as `LayerWork.sources`), the graph
layer every tiled node was lowered from (`TileNode.layer`), and codegen's one line per
scheduled node (core block i's k-th line after its `core` record is the k-th node of its
schedule). A spill node belongs to the layer that allocated its buffer.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from typing import Any

from npucc.ir.scheduled_program import ScheduledProgram

VERSION = 1


def core_starts(stream: str) -> list[int]:
    """The line number (from 1) of each `core ROW COL` record, in stream order."""
    return [n for n, line in enumerate(stream.split("\n"), 1) if line.startswith("core ")]


def node_layers(scheduled: ScheduledProgram, core: int) -> list[str]:
    """The layer of every scheduled node of `core` (augmented ids: spills included; "" for a
    node of no layer)."""
    layers = scheduled.program.layers
    replay = scheduled.schedules[core][1]
    graph = replay.graph
    names = [layers[n.layer].name if 0 <= n.layer < len(layers) else "" for n in graph.nodes]
    for v in range(len(graph.nodes), len(replay.nodes)):  # spills: the buffer's layer
        names.append(names[graph.alloc_of[replay.nodes[v].bufs[0]]])
    return names


def host_segments(scheduled: ScheduledProgram, stream: str) -> list[dict[str, Any]]:
    """Each host record: its layer, ONNX node(s), operator and stream line."""
    sources = {work.name: work.sources for work in scheduled.program.layers}
    found = []
    starts: list[int] | None = None
    for core, (_, replay) in enumerate(scheduled.schedules):
        layers: list[str] | None = None
        for pos, v in enumerate(replay.order):
            if replay.nodes[v].op != "HOST":
                continue
            starts = starts if starts is not None else core_starts(stream)
            layers = layers if layers is not None else node_layers(scheduled, core)
            layer = layers[v]
            src = sources.get(layer, ())
            instr = replay.nodes[v].instr
            op = getattr(instr, "node", "")
            found.append(
                {"layer": layer, "node": ", ".join(src) or layer, "op": host_op_name(op),
                 "line": starts[core] + 1 + pos}
            )  # fmt: skip
    return found


def host_op_name(node_json: str) -> str:
    """The operator of a host record's node JSON: `op`, or `domain.op`."""
    spec = json.loads(node_json) if node_json else {"op": "?", "domain": ""}
    return f"{spec['domain']}.{spec['op']}" if spec["domain"] else spec["op"]


def debug_map(scheduled: ScheduledProgram, stream: str) -> dict[str, Any]:
    """The map as JSON-ready data (see docs/command-stream.md, "Debug map")."""
    program = scheduled.program
    starts = core_starts(stream)
    layers: dict[str, dict[str, Any]] = {
        work.name: {"op": work.op, "sources": list(work.sources), "cores": {}}
        for work in program.layers
    }
    runs: list[list[Any]] = []  # [first line, last line, layer], in line order
    for core, (_, replay) in enumerate(scheduled.schedules):
        at = f"{program.cores[core].row},{program.cores[core].col}"
        owner = node_layers(scheduled, core)
        for pos, v in enumerate(replay.order):
            line, layer = starts[core] + 1 + pos, owner[v]
            entry = layers.setdefault(layer, {"op": "", "sources": [], "cores": {}})
            per = entry["cores"].setdefault(at, {"tile_ops": 0, "ops": {}, "nodes": [],
                                                 "lines": []})  # fmt: skip
            per["tile_ops"] += 1
            op = replay.nodes[v].op
            per["ops"][op] = per["ops"].get(op, 0) + 1
            _extend(per["nodes"], v)
            _extend(per["lines"], line)
            if runs and runs[-1][2] == layer and runs[-1][1] == line - 1:
                runs[-1][1] = line
            else:
                runs.append([line, line, layer])
    for entry in layers.values():
        for per in entry["cores"].values():
            per["ops"] = dict(sorted(per["ops"].items()))
    nodes: dict[str, list[str]] = {}
    for name, entry in layers.items():
        for src in entry["sources"]:
            nodes.setdefault(src, []).append(name)
    return {"version": VERSION, "nodes": nodes, "layers": layers, "lines": runs}


def _extend(ranges: list[list[int]], value: int) -> None:
    """Add `value` to sorted inclusive ranges [[first, last], ...], growing the last if it
    continues it."""
    if ranges and ranges[-1][1] == value - 1:
        ranges[-1][1] = value
    else:
        ranges.append([value, value])


def trace_line(data: dict[str, Any], line: int) -> tuple[str, list[str]] | None:
    """(layer, ONNX nodes) of stream line `line` by a debug map's `lines`, or None (a header,
    tensor or `core`/`end` line)."""
    runs = data["lines"]
    i = bisect_right([r[0] for r in runs], line) - 1
    if i < 0 or runs[i][1] < line:
        return None
    layer = runs[i][2]
    return layer, list(data["layers"].get(layer, {}).get("sources", []))
