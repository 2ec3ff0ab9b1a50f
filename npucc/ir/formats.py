"""Every IR level in every output format: text (parses back), JSON, and Graphviz dot.

Levels: `graph` (Graph), `tiled` (TiledProgram), `schedule` (ScheduledProgram) and `cmd` (the
command stream: codegen's `Generated`, or a parsed `Stream`). The first line of a text tells its
level, so `parse_ir` reads any dump.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import data_digest, dtype_name
from npucc.ir.graph import Graph
from npucc.ir.program import TiledProgram
from npucc.ir.scheduled_program import ScheduledProgram
from npucc.ir.stream import Generated, Stream
from npucc.ir.stream_text import format_body

LEVELS = ("graph", "tiled", "schedule", "cmd")
FORMATS = ("text", "json", "dot")
DOT_LEVELS = ("graph", "tiled")
_FIRST_WORD = {
    "graph": "graph",
    "tiled-program": "tiled",
    "scheduled-program": "schedule",
    "npucc-stream": "cmd",
}
# NOTE: the parsers (graph_text, tiled_parse, stream_parse) are imported where a dump is read:
# the CLI takes LEVELS and FORMATS from here on every compile, which reads none
PIPE_COLORS = {
    "MTE1": "#8dd3c7",
    "MTE2": "#80b1d3",
    "MTE3": "#bebada",
    "CUBE": "#fb8072",
    "VECTOR": "#fdb462",
    "FIXP": "#b3de69",
}


def detect_level(text: str, path: str = "<text>") -> str:
    """The IR level of a dump, from the first word of its first non-blank line."""
    for line in text.split("\n"):
        if line.strip():
            level = _FIRST_WORD.get(line.split()[0])
            if level is None:
                raise NpuccError(f"not an npucc IR dump: starts with {line.strip()[:30]!r} "
                                 f"({path}:1)")  # fmt: skip
            return level
    raise NpuccError(f"empty IR dump ({path}:1)")


def parse_ir(text: str, path: str = "<text>") -> tuple[str, Any]:
    """Parse a dump of any level; returns (level, IR)."""
    from npucc.ir.graph_text import graph_from_text
    from npucc.ir.stream_parse import parse_stream
    from npucc.ir.tiled_parse import scheduled_from_text, tiled_from_text

    level = detect_level(text, path)
    if level == "graph":
        try:
            return level, graph_from_text(text)
        except NpuccError as exc:
            raise NpuccError(f"{exc} ({path})") from None
    if level == "tiled":
        return level, tiled_from_text(text, path)
    if level == "schedule":
        return level, scheduled_from_text(text, path)
    return level, parse_stream(text, path)


def level_of(ir: Any) -> str:
    """The level name of an IR object."""
    for cls, level in (
        (Graph, "graph"),
        (TiledProgram, "tiled"),
        (ScheduledProgram, "schedule"),
        (Generated, "cmd"),
        (Stream, "cmd"),
    ):
        if isinstance(ir, cls):
            return level
    raise TypeError(f"not an npucc IR: {type(ir).__name__}")


def render(ir: Any, fmt: str = "text") -> str:
    """`ir` as text, JSON or dot (dot only for the graph and tiled levels)."""
    level = level_of(ir)
    if fmt not in FORMATS:
        raise NpuccError(f"unknown format '{fmt}' (one of {', '.join(FORMATS)})")
    if fmt == "dot" and level not in DOT_LEVELS:
        raise NpuccError(f"--format dot draws the graph and tiled levels, not '{level}'")
    if fmt == "text":
        return ir.to_text()
    if fmt == "json":
        return json.dumps(to_json(ir), indent=1) + "\n"
    return graph_to_dot(ir) if level == "graph" else tiled_to_dot(ir)


# ---------------------------------------------------------------------------- JSON


def _json_value(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"dtype": dtype_name(v.dtype), "shape": list(v.shape),
                "data": [_json_value(x) for x in v.reshape(-1).tolist()]}  # fmt: skip
    if isinstance(v, list | tuple):
        return [_json_value(x) for x in v]
    if isinstance(v, float | np.floating) and not math.isfinite(v):
        return str(float(v))
    if isinstance(v, np.generic):
        return v.item()
    return v


def _graph_json(g: Graph) -> dict[str, Any]:
    def tensor(name: str) -> dict[str, Any]:
        t = g.tensors[name]
        out: dict[str, Any] = {"name": name, "dtype": t.dtype, "shape": list(t.shape)}
        if t.data is not None:
            out["sha256"] = data_digest(t.data)
        return out

    return {
        "level": "graph",
        "name": g.name,
        "opset": g.opset,
        "inputs": [tensor(t) for t in g.inputs],
        "consts": [tensor(n) for n, t in g.tensors.items() if t.data is not None],
        "layers": [
            {
                "name": layer.name,
                "op": layer.op,
                "inputs": layer.inputs,
                "outputs": [tensor(t) for t in layer.outputs],
                "attrs": {k: _json_value(v) for k, v in sorted(layer.attrs.items())},
            }
            for layer in g.layers
        ],
        "outputs": list(g.outputs),
    }


def _tiled_json(program: Any) -> dict[str, Any]:
    tensors = []
    for t in program.tensors.values():
        entry: dict[str, Any] = {"key": t.key, "role": t.role, "shape": list(t.shape)}
        if t.data is not None:
            entry["sha256"] = data_digest(t.data)
        if t.key in program.onchip:
            entry["homes"] = [list(h) for h in program.onchip[t.key].homes]
            entry["chunk"] = program.onchip[t.key].chunk
            entry["at"] = program.onchip[t.key].at
            entry["live"] = list(program.onchip[t.key].live)
        tensors.append(entry)
    cores = []
    for core in program.cores:
        g = core.graph
        cores.append(
            {
                "row": core.row,
                "col": core.col,
                "name": g.name,
                "buffers": [
                    {"id": b.id, "tier": b.tier, "size": b.size, "name": b.name} for b in g.buffers
                ],
                "nodes": [
                    {
                        "id": n.id,
                        "op": n.op,
                        "pipe": n.pipe,
                        "cycles": n.cycles,
                        "bufs": list(n.bufs),
                        "preds": list(g.preds[n.id]),
                        "instr": format_body(n.instr, symbolic=True) if n.instr else None,
                    }
                    for n in g.nodes
                ],
            }
        )
    return {
        "level": "tiled",
        "name": program.name,
        "target": program.target.to_dict(),
        "tensors": tensors,
        "aliases": dict(program.aliases),
        "io": [
            {"kind": io.kind, "name": io.name, "key": io.key, "shape": list(io.shape)}
            for io in program.io
        ],
        "cores": cores,
    }


def _schedule_json(scheduled: Any) -> dict[str, Any]:
    out = _tiled_json(scheduled.program)
    out["level"] = "schedule"
    out["schedules"] = [
        {
            "row": core.row,
            "col": core.col,
            "method": schedule.method,
            **rep.metrics(),
            "extra_ddr": rep.extra_ddr,
            "offsets": {f"b{b}": off for b, off in sorted(schedule.offsets.items())},
            "spills": [{"buf": b, "offset": off} for b, off in schedule.spills],
            "order": [
                {
                    "id": v,
                    "op": rep.nodes[v].op,
                    "pipe": rep.nodes[v].pipe,
                    "start": rep.start[v],
                    "finish": rep.finish[v],
                    "offsets": {f"b{b}": rep.offset_at(v, b) for b in rep.nodes[v].bufs},
                }
                for v in rep.order
            ],
        }
        for core, (schedule, rep) in zip(scheduled.program.cores, scheduled.schedules, strict=True)
    ]
    return out


def _stream_json(stream: Stream) -> dict[str, Any]:
    return {
        "level": "cmd",
        "target": stream.target.to_dict(),
        "image": {"size": stream.image_size, "sha256": stream.image_sha256},
        "ddr_size": stream.ddr_size,
        "tensors": [
            {
                "kind": t.kind,
                "name": t.name,
                "addr": t.addr,
                "bytes": t.nbytes,
                "shape": list(t.shape),
                **(
                    {
                        "homes": [list(h) for h in t.onchip.homes],
                        "chunk": t.onchip.chunk,
                        "at": t.onchip.at,
                        "live": list(t.onchip.live),
                    }
                    if t.onchip is not None
                    else {}
                ),
            }
            for t in sorted(stream.tensors.values(), key=lambda t: t.lineno)
        ],  # fmt: skip
        "cores": [
            {
                "row": core.row,
                "col": core.col,
                "lines": [
                    {
                        "line": line.lineno,
                        "queue": line.queue,
                        "body": line.body(stream.target),
                        "waits": [str(f) for f in line.waits],
                        "sets": [str(f) for f in line.sets],
                    }
                    for line in core.lines
                ],
            }
            for core in stream.cores
        ],
    }


def to_json(ir: Any) -> dict[str, Any]:
    """JSON-ready data of an IR object of any level."""
    level = level_of(ir)
    if level == "graph":
        return _graph_json(ir)
    if level == "tiled":
        return _tiled_json(ir)
    if level == "schedule":
        return _schedule_json(ir)
    from npucc.ir.stream_parse import parse_stream

    stream = ir if isinstance(ir, Stream) else parse_stream(ir.stream, "<program>")
    return _stream_json(stream)


# ---------------------------------------------------------------------------- dot


def _dot_str(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def graph_to_dot(g: Graph) -> str:
    """The graph IR as a Graphviz digraph: layers as boxes, model inputs/outputs as ovals."""
    lines = [f"digraph {_dot_str(g.name)} {{", "  node [shape=box, fontname=Helvetica];"]
    producer: dict[str, str] = {}
    for t in g.inputs:
        producer[t] = f"in:{t}"
        lines.append(f"  {_dot_str('in:' + t)} [label={_dot_str(t)}, shape=oval];")
    for i, layer in enumerate(g.layers):
        node = f"L{i}"
        lines.append(f"  {node} [label={_dot_str(layer.op + chr(10) + layer.name)}];")
        for t in layer.inputs:
            if t in producer:
                lines.append(f"  {_dot_str(producer[t])} -> {node} [label={_dot_str(t)}];")
        for t in layer.outputs:
            producer[t] = node
    for t in g.outputs:
        lines.append(f"  {_dot_str('out:' + t)} [label={_dot_str(t)}, shape=oval];")
        if t in producer:
            lines.append(f"  {_dot_str(producer[t])} -> {_dot_str('out:' + t)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def tiled_to_dot(program: Any) -> str:
    """Each core's DAG as a Graphviz cluster, nodes filled by pipe."""
    lines = [f"digraph {_dot_str(program.name)} {{",
             "  node [shape=box, style=filled, fontname=Helvetica, fillcolor=white];"]  # fmt: skip
    for core in program.cores:
        g = core.graph
        prefix = f"c{core.row}_{core.col}_"
        lines.append(f"  subgraph cluster_{core.row}_{core.col} {{")
        lines.append(f"    label={_dot_str(f'core {core.row} {core.col}')};")
        for n in g.nodes:
            color = PIPE_COLORS.get(n.pipe or "", "#eeeeee")
            bufs = ",".join(f"b{b}" for b in n.bufs)
            label = f"%{n.id} {n.op}\\n{n.pipe or '-'} {n.cycles} [{bufs}]"
            lines.append(f'    {prefix}{n.id} [label="{label}", fillcolor="{color}"];')
        for src, dst in g.edges():
            lines.append(f"    {prefix}{src} -> {prefix}{dst};")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
