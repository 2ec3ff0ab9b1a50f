"""bench/core_dags.py: equal DAGs and layer pieces share a key, a changed one does not."""

from __future__ import annotations

import sys
from pathlib import Path

from npucc.ir.tiled import TileGraph

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import core_dags  # noqa: E402


def _core(cycles: int, first_size: int = 64) -> TileGraph:
    """Two layers, each ALLOC -> COPY_IN -> FREE on its own buffer; layer 1 waits for layer 0."""
    g = TileGraph()
    last = -1
    for layer, size in enumerate((first_size, 32)):
        b = g.add_buffer(size, "UB").id
        a = g.add("ALLOC", None, 0, (b,), layer=layer)
        c = g.add("COPY_IN", "MTE2", cycles, (b,), layer=layer)
        f = g.add("FREE", None, 0, (b,), layer=layer)
        g.add_edge(a, c)
        g.add_edge(c, f)
        if last >= 0:
            g.add_edge(last, a)
        last = f
    return g


def test_dag_key_tells_cycles_and_sizes_apart() -> None:
    """Equal DAGs share a key; other cycles differ unless cycles are left out; sizes differ."""
    assert core_dags.dag_key(_core(10)) == core_dags.dag_key(_core(10))
    assert core_dags.dag_key(_core(10)) != core_dags.dag_key(_core(11))
    assert core_dags.dag_key(_core(10), cycles=False) == core_dags.dag_key(_core(11), False)
    assert core_dags.dag_key(_core(10)) != core_dags.dag_key(_core(10, first_size=128))


def test_piece_keys_renumber_buffers_within_a_piece() -> None:
    """Two layers alike but for a buffer size: the second layer's pieces match across cores,
    whatever the buffer ids, and the first layer's do not."""
    a, b = core_dags.piece_keys(_core(10)), core_dags.piece_keys(_core(10, first_size=128))
    assert [nodes for _, nodes in a] == [3, 3]
    assert a[1] == b[1]
    assert a[0] != b[0]
