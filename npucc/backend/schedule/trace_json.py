"""DAN trace JSON (shared/dan-traces.md, "Input") to and from TileGraph.

Trace buffer ids may be any integers; they become dense TileGraph buffer ids in ascending BufId
order and each Buffer keeps its trace id as `name`, so outputs can name buffers as the trace did.
Edges a trace leaves implicit (ALLOC_b -> every user of b -> FREE_b, or ALLOC_b -> FREE_b for an
unused buffer) are added, since every schedule must keep a buffer's users inside its lifetime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npucc.errors import NpuccError
from npucc.ir.tiled import PIPELESS_OPS, TileGraph
from npucc.target import TIERS


def load_trace(path: str | Path) -> TileGraph:
    """Read a GRAPH.json trace; a malformed file raises NpuccError naming the file and node."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise NpuccError(f"cannot read trace: {exc.strerror} ({path})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise NpuccError(f"invalid JSON: {exc} ({path})") from None
    return trace_from_json(data, str(path), name=path.stem)


def _int(value: Any, what: str, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise NpuccError(f"{what} must be a non-negative integer, got {value!r} ({where})")
    return value


def trace_from_json(data: Any, source: str = "<json>", name: str = "trace") -> TileGraph:
    """Build a TileGraph from parsed trace JSON; `source` names the input in errors."""
    if not isinstance(data, dict) or not isinstance(data.get("Nodes"), list):
        raise NpuccError(f"trace must be an object with a 'Nodes' list ({source})")
    raw_nodes: list[Any] = data["Nodes"]
    raw_edges = data.get("Edges", [])
    if not isinstance(raw_edges, list):
        raise NpuccError(f"'Edges' must be a list ({source})")
    n = len(raw_nodes)
    by_id: list[dict[str, Any] | None] = [None] * n
    for index, rec in enumerate(raw_nodes):
        if not isinstance(rec, dict):
            raise NpuccError(f"node #{index} is not an object ({source})")
        nid = rec.get("Id")
        if not isinstance(nid, int) or isinstance(nid, bool) or not 0 <= nid < n:
            raise NpuccError(f"node #{index}: Id {nid!r} is not in 0..{n - 1} ({source})")
        if by_id[nid] is not None:
            raise NpuccError(f"node {nid}: duplicate Id ({source})")
        by_id[nid] = rec

    # buffers: one ALLOC (with Size and Type) and one FREE each
    alloc_rec: dict[int, dict[str, Any]] = {}
    free_node: dict[int, int] = {}
    for nid, rec in enumerate(by_id):
        assert rec is not None
        op = rec.get("Op")
        if op not in ("ALLOC", "FREE"):
            continue
        where = f"node {nid}, {source}"
        bid = _int(rec.get("BufId"), "BufId", where)
        if op == "ALLOC":
            if bid in alloc_rec:
                raise NpuccError(f"buffer {bid} has a second ALLOC ({where})")
            _int(rec.get("Size"), "Size", where)
            if rec.get("Type") not in TIERS:
                raise NpuccError(
                    f"Type must be one of {', '.join(TIERS)}, got {rec.get('Type')!r} ({where})"
                )
            alloc_rec[bid] = rec | {"Id": nid}
        else:
            if bid in free_node:
                raise NpuccError(f"buffer {bid} has a second FREE ({where})")
            free_node[bid] = nid
    for bid, nid in free_node.items():
        if bid not in alloc_rec:
            raise NpuccError(f"buffer {bid} is freed but never allocated (node {nid}, {source})")
    for bid, rec in alloc_rec.items():
        if bid not in free_node:
            raise NpuccError(f"buffer {bid} is never freed (node {rec['Id']}, {source})")

    graph = TileGraph(name)
    dense: dict[int, int] = {}
    for bid in sorted(alloc_rec):
        rec = alloc_rec[bid]
        dense[bid] = graph.add_buffer(rec["Size"], rec["Type"], str(bid)).id
    for nid, rec in enumerate(by_id):
        assert rec is not None
        where = f"node {nid}, {source}"
        op = rec.get("Op")
        if not isinstance(op, str) or not op:
            raise NpuccError(f"Op must be a non-empty string, got {op!r} ({where})")
        if op in ("ALLOC", "FREE"):
            graph.add_node(op, None, 0, (dense[rec["BufId"]],))
            continue
        pipe = rec.get("Pipe")
        if pipe is not None and not isinstance(pipe, str):
            raise NpuccError(f"Pipe must be a string, got {pipe!r} ({where})")
        if pipe is None and op not in PIPELESS_OPS:
            raise NpuccError(f"node {op} has no Pipe ({where})")
        cycles = _int(rec.get("Cycles", 0), "Cycles", where)
        bufs = rec.get("Bufs", [])
        if not isinstance(bufs, list):
            raise NpuccError(f"Bufs must be a list ({where})")
        mapped: list[int] = []
        for bid in bufs:
            if bid not in dense:
                raise NpuccError(f"Bufs names unknown buffer {bid!r} ({where})")
            if dense[bid] not in mapped:
                mapped.append(dense[bid])
        graph.add_node(op, pipe, cycles if pipe is not None else 0, tuple(mapped))

    seen: set[int] = set()

    def add(src: int, dst: int) -> None:
        key = src * n + dst
        if key not in seen and src != dst:
            seen.add(key)
            graph.add_edge(src, dst)

    for index, edge in enumerate(raw_edges):
        if (
            not isinstance(edge, list)
            or len(edge) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in edge)
        ):
            raise NpuccError(f"edge #{index} must be [src, dst], got {edge!r} ({source})")
        src, dst = edge
        for end in (src, dst):
            if not 0 <= end < n:
                raise NpuccError(f"edge #{index} names unknown node {end} ({source})")
        add(src, dst)
    used = [False] * len(graph.buffers)
    for node in graph.nodes:
        if node.op in ("ALLOC", "FREE"):
            continue
        for b in node.bufs:
            used[b] = True
            add(graph.alloc_of[b], node.id)
            add(node.id, graph.free_of[b])
    for b, u in enumerate(used):
        if not u:
            add(graph.alloc_of[b], graph.free_of[b])
    return graph


def trace_to_json(graph: TileGraph) -> dict[str, Any]:
    """The trace JSON of a graph: BufId is the dense buffer id, Edges in source order."""
    nodes: list[dict[str, Any]] = []
    for node in graph.nodes:
        if node.op in ("ALLOC", "FREE"):
            buf = graph.buffers[node.bufs[0]]
            nodes.append(
                {"Id": node.id, "Op": node.op, "BufId": buf.id, "Size": buf.size, "Type": buf.tier}
            )
        else:
            rec: dict[str, Any] = {"Id": node.id, "Op": node.op}
            if node.pipe is not None:
                rec["Pipe"] = node.pipe
            rec["Cycles"] = node.cycles
            rec["Bufs"] = list(node.bufs)
            nodes.append(rec)
    return {"Nodes": nodes, "Edges": [[s, d] for s, d in graph.edges()]}


def write_trace(graph: TileGraph, path: str | Path) -> None:
    """Write `trace_to_json(graph)` as compact JSON."""
    Path(path).write_text(json.dumps(trace_to_json(graph), separators=(",", ":")) + "\n")
