"""The schedule pass's shares of a mesh's cores (`schedule_pass.shares`)."""

from npucc.backend.schedule.schedule_pass import shares


def test_shares_balance_nodes_largest_first():
    sizes = [5, 9, 1, 7, 3, 3]
    parts = shares(sizes, 2)
    assert sorted(i for p in parts for i in p) == list(range(len(sizes)))
    assert parts == [[1, 4, 5], [0, 2, 3]]  # 9, 3, 3 against 7, 5, 1: 15 and 13
    assert all(p == sorted(p) for p in parts)


def test_shares_never_empty():
    assert shares([4, 2], 3) == [[0], [1]]
    assert shares([1, 1, 1], 1) == [[0, 1, 2]]
