"""Cross-core edges the BARRIER chains and other edges imply are dropped (`drop_implied`)."""

from __future__ import annotations

from npucc.backend.lower.sync_points import drop_implied


def test_an_edge_known_through_another_core_or_the_chain_is_dropped() -> None:
    edges = [
        (0, 5, 1, 10),  # core 1's BARRIER 10 after core 0's 5
        (1, 10, 2, 20),  # core 2's 20 after core 1's 10, hence after core 0's 5 ...
        (0, 4, 2, 20),  # ... and core 0's 4 (chained before its 5): implied
        (0, 5, 2, 30),  # core 2's 30 follows its 20 in its chain: implied
        (0, 6, 2, 30),  # a later BARRIER of core 0: kept
        (1, 9, 0, 7),  # core 0's 7 after core 1's 9: its own BARRIERs do not tell
    ]
    assert drop_implied(edges, 3) == [edges[0], edges[1], edges[4], edges[5]]


def test_an_edge_from_a_barrier_not_yet_known_is_kept() -> None:
    edges = [(0, 3, 1, 8), (0, 2, 2, 9), (1, 8, 2, 9), (2, 9, 0, 11), (1, 1, 0, 11)]
    # core 2's 9 learns core 0's 3 only through core 1's 8, after its edge from 0's 2 was kept;
    # core 0's 11 knows core 1's 8 through 2's 9, so 1's 1 is implied
    assert drop_implied(edges, 3) == edges[:4]
