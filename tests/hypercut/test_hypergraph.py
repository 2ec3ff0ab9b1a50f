"""Bit-state incidence matrix: construction, merging by matrix arithmetic, pruning."""

import numpy as np

from npucc.backend.hypercut.hypergraph import BOTH, DEST, SOURCE, Hypergraph
from npucc.backend.hypercut.partition import k_range, km1, partition

from .conftest import chain


def test_incidence_states_and_merge():
    hg = Hypergraph.from_workload(chain(5))
    # producer 1 feeds 2 and 3 (one hyperedge with two destinations)
    col = next(e for e in range(hg.num_edges) if hg.incidence[1, e] == SOURCE)
    assert hg.incidence[2, col] == DEST and hg.incidence[3, col] == DEST
    merged = hg.merge([0, 1, 1, 1, 2])
    assert merged.members == ((0,), (1, 2, 3), (4,))
    # edge 1 -> {2, 3} became internal and was pruned; 0 -> 1 now ends in the merged vertex
    assert merged.num_edges == 2
    assert set(np.unique(merged.incidence)) <= {0, SOURCE, DEST, BOTH}
    assert merged.vertex_work[1] == hg.vertex_work[1:4].sum()


def test_merge_both_state():
    hg = Hypergraph.from_workload(chain(4, branch=False))
    merged = hg.merge([0, 0, 1, 1])  # edge 1 -> 2 crosses: source side 0, dest side 1
    assert merged.num_edges == 1
    both = Hypergraph.from_workload(chain(4, branch=False)).merge([0, 1, 1, 2])
    assert BOTH not in both.incidence  # internal edges are gone, crossing ones keep 1/2
    assert both.num_edges == 2


def test_partition_deterministic_and_k_range():
    hg = Hypergraph.from_workload(chain(12))
    a = partition(hg, 3, seed=7)
    assert a == partition(hg, 3, seed=7)
    assert sorted(set(a)) == [0, 1, 2]
    assert km1(hg, a) >= 0
    assert list(k_range(5)) == [2, 3, 4, 5]
    assert list(k_range(30)) == [2, 3, 4, 5, 6]
