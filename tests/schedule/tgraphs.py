"""Small hand-made TileGraphs for the schedule tests."""

from __future__ import annotations

from npucc.backend.schedule.trace_json import trace_from_json
from npucc.ir.tiled import TileGraph

CAPS = {"L1": 4096, "UB": 1024, "L0A": 256, "L0B": 256, "L0C": 512}


def trace_dict(spec: list[tuple], edges: list[tuple[int, int]]) -> dict:
    """Trace JSON from specs ("ALLOC", buf, size, tier), ("FREE", buf), (op, pipe, cy, bufs)."""
    nodes = []
    for i, s in enumerate(spec):
        if s[0] == "ALLOC":
            nodes.append({"Id": i, "Op": "ALLOC", "BufId": s[1], "Size": s[2], "Type": s[3]})
        elif s[0] == "FREE":
            nodes.append({"Id": i, "Op": "FREE", "BufId": s[1]})
        else:
            nodes.append({"Id": i, "Op": s[0], "Pipe": s[1], "Cycles": s[2], "Bufs": list(s[3])})
    return {"Nodes": nodes, "Edges": [list(e) for e in edges]}


def build(spec: list[tuple], edges: list[tuple[int, int]]) -> TileGraph:
    """A TileGraph from compact specs (see trace_dict)."""
    return trace_from_json(trace_dict(spec, edges), "test")


def chain() -> TileGraph:
    """Load A (L1), vector A -> B (UB), store B: makespan 10 + 20 + 5 = 35, peak 150."""
    return build(
        [
            ("ALLOC", 0, 100, "L1"),
            ("COPY_IN", "MTE2", 10, [0]),
            ("ALLOC", 1, 50, "UB"),
            ("VEC", "VECTOR", 20, [0, 1]),
            ("FREE", 0),
            ("COPY_OUT", "MTE3", 5, [1]),
            ("FREE", 1),
        ],
        [(0, 1), (1, 3), (2, 3), (3, 4), (3, 5), (5, 6)],
    )


def two_loads(size: int = 100) -> TileGraph:
    """Two L1 buffers loaded, then each consumed; with L1 = size they cannot coexist."""
    return build(
        [
            ("ALLOC", 0, size, "L1"),
            ("COPY_IN", "MTE2", 10, [0]),
            ("ALLOC", 1, size, "L1"),
            ("COPY_IN", "MTE2", 10, [1]),
            ("USE", "VECTOR", 5, [0]),
            ("USE", "VECTOR", 5, [1]),
            ("FREE", 0),
            ("FREE", 1),
        ],
        [(0, 1), (2, 3), (1, 4), (3, 5), (4, 5), (4, 6), (5, 7)],
    )
