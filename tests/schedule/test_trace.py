import json

import pytest
from tgraphs import chain, trace_dict

from npucc.backend.schedule.trace_json import (
    load_trace,
    trace_from_json,
    trace_to_json,
    write_trace,
)
from npucc.errors import NpuccError


def test_round_trip(tmp_path):
    g = chain()
    path = tmp_path / "Chain_Case0.json"
    write_trace(g, path)
    h = load_trace(path)
    assert h.name == "Chain_Case0"
    assert trace_to_json(h) == trace_to_json(g)
    assert [(b.size, b.tier) for b in h.buffers] == [(100, "L1"), (50, "UB")]
    assert h.alloc_of == {0: 0, 1: 2} and h.free_of == {0: 4, 1: 6}


def test_sparse_buffer_ids_and_implicit_edges():
    d = trace_dict([("ALLOC", 70, 8, "UB"), ("X", "VECTOR", 3, [70]), ("FREE", 70)], [])
    g = trace_from_json(d)
    assert g.buffers[0].name == "70"
    assert g.nodes[1].bufs == (0,)
    assert list(g.edges()) == [(0, 1), (1, 2)]  # ALLOC -> user -> FREE added


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["Nodes"][1].pop("Pipe"), "node 1"),
        (lambda d: d["Nodes"][1].update(Bufs=[9]), "unknown buffer 9"),
        (lambda d: d["Edges"].append([0, 99]), "unknown node 99"),
        (lambda d: d["Nodes"][0].update(Type="L2"), "node 0"),
        (lambda d: d["Nodes"].pop(0), "Id"),
        (lambda d: d["Nodes"][1].update(Cycles=-1), "Cycles"),
    ],
)
def test_bad_traces_name_file_and_node(tmp_path, mutate, message):
    d = trace_dict([("ALLOC", 0, 8, "UB"), ("X", "VECTOR", 3, [0]), ("FREE", 0)], [(0, 1), (1, 2)])
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    with pytest.raises(NpuccError, match=message) as info:
        load_trace(path)
    assert "bad.json" in str(info.value)


def test_invalid_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(NpuccError, match="broken.json"):
        load_trace(path)


def test_missing_free():
    d = trace_dict([("ALLOC", 0, 8, "UB")], [])
    with pytest.raises(NpuccError, match="never freed"):
        trace_from_json(d)
