"""Directed hypergraph of layers stored as a bit-state encoded incidence matrix (BSEIM).

Row = vertex (a layer, or a set of merged layers), column = hyperedge (one producer's output
tensor with all its consumers), entry = bit mask: 0 none, 1 source, 2 destination, 3 both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.ir.plan import Workload

NONE, SOURCE, DEST, BOTH = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class Hypergraph:
    """Vertices (groups of layer indices), weighted hyperedges and the incidence matrix."""

    members: tuple[tuple[int, ...], ...]  # layer indices of each vertex
    incidence: np.ndarray  # (vertices, hyperedges) uint8 bit states
    edge_bytes: np.ndarray  # (hyperedges,) tensor bytes of each hyperedge
    vertex_work: np.ndarray  # (vertices,) MACs + vector ops of each vertex

    @classmethod
    def from_workload(cls, wl: Workload, layers: tuple[int, ...] | None = None) -> Hypergraph:
        """The hypergraph of `layers` (default: all); hyperedges need two incident vertices."""
        layers = tuple(range(len(wl.layers))) if layers is None else tuple(sorted(layers))
        row = {layer: r for r, layer in enumerate(layers)}
        # only the layers' own outputs and their inputs can touch two of them
        producers = sorted({*layers, *(p for i in layers for p, _ in wl.layers[i].inputs)})
        entries: list[tuple[int, int, int]] = []  # row, column, state
        weights: list[int] = []
        for producer in producers:
            states = {row[c]: DEST for c in wl.consumers[producer] if c in row}
            if producer in row:
                states[row[producer]] = states.get(row[producer], 0) | SOURCE
            if len(states) >= 2:
                entries.extend((r, len(weights), s) for r, s in states.items())
                weights.append(wl.layers[producer].out * wl.batch)
        incidence = np.zeros((len(layers), len(weights)), dtype=np.uint8)
        for r, e, s in entries:
            incidence[r, e] = s
        work = np.array([wl.layers[i].macs + wl.layers[i].vops for i in layers], dtype=float)
        return cls(
            tuple((i,) for i in layers), incidence, np.array(weights, dtype=float), work
        ).pruned()

    @property
    def num_vertices(self) -> int:
        """Number of vertices."""
        return len(self.members)

    @property
    def num_edges(self) -> int:
        """Number of hyperedges."""
        return int(self.incidence.shape[1])

    def pruned(self) -> Hypergraph:
        """Drop internal hyperedges (one incident vertex left) and empty ones."""
        keep = np.count_nonzero(self.incidence, axis=0) >= 2
        return Hypergraph(
            self.members, self.incidence[:, keep], self.edge_bytes[keep], self.vertex_work
        )

    def merge(self, assign: np.ndarray | list[int]) -> Hypergraph:
        """Contract vertices: vertex v joins cluster assign[v]; rows are OR-ed bit states."""
        assign = np.asarray(assign, dtype=np.intp)
        k = int(assign.max()) + 1 if len(assign) else 0
        incidence = np.zeros((k, self.num_edges), dtype=np.uint8)
        np.bitwise_or.at(incidence, assign, self.incidence)
        work = np.bincount(assign, weights=self.vertex_work, minlength=k)
        members = tuple(
            tuple(sorted(i for v in np.flatnonzero(assign == c) for i in self.members[v]))
            for c in range(k)
        )
        return Hypergraph(members, incidence, self.edge_bytes, work).pruned()

    def pins(self) -> tuple[list[int], list[int]]:
        """Hyperedge index offsets and pin lists (CSR), as kahypar wants them."""
        edges, vertices = np.nonzero(self.incidence.T)  # by hyperedge, then vertex
        counts = np.bincount(edges, minlength=self.num_edges)
        return [0, *np.cumsum(counts).tolist()], vertices.tolist()
