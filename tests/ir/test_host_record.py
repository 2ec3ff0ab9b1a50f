"""The host record of the command stream: printed, parsed back, verified; the tiled text too."""

from __future__ import annotations

import json
import re

import numpy as np
import onnx
import onnx.helper as h
import pytest
from onnx import TensorProto as T

import npucc
from npucc.frontend.host_fallback import make_attributes, typed_attrs
from npucc.ir.isa import HostOp, MemRef
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream
from npucc.ir.stream_text import format_host, host_json, match_host
from npucc.ir.tiled_parse import tiled_from_text


def _reverse_model() -> onnx.ModelProto:
    """relu -> ReverseSequence (npucc only folds it: a host segment; its int64 lengths a
    constant) -> neg."""
    lens = onnx.numpy_helper.from_array(np.array([3, 1, 4, 2], np.int64), "lens")
    nodes = [
        h.make_node("Relu", ["x"], ["r"], name="relu"),
        h.make_node(
            "ReverseSequence", ["r", "lens"], ["s"], batch_axis=1, time_axis=0, name="rev"
        ),  # fmt: skip
        h.make_node("Neg", ["s"], ["y"], name="neg"),
    ]
    graph = h.make_graph(
        nodes, "rev", [h.make_tensor_value_info("x", T.FLOAT, [4, 4, 8])],
        [h.make_tensor_value_info("y", T.FLOAT, [4, 4, 8])], [lens],
    )  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def program():
    return npucc.compile(_reverse_model(), fallback="host")


def test_the_stream_prints_back_and_runs_an_integer_operand(program):
    stream = parse_stream(program.stream, "<p>")
    assert stream.to_text() == program.stream
    (line,) = [x for x in program.stream.splitlines() if x.startswith("  HOST ")]
    assert "in1_type=i64[4]" in line  # int64 lengths: held as float32 in DDR, int64 for ORT
    x = np.random.default_rng(0).standard_normal((4, 4, 8)).astype(np.float32)
    ref = -np.maximum(x, 0)
    for b, n in enumerate((3, 1, 4, 2)):
        ref[:n, b] = ref[:n, b][::-1]
    np.testing.assert_array_equal(program.run({"x": x})["y"], ref)


def test_attributes_round_trip_with_their_onnx_types():
    attrs = {"i": 3, "f": 2.0, "s": "a | b", "ints": (1, 2), "floats": (0.5, 1.0), "none": (),
             "t": np.arange(3, dtype=np.int64)}  # fmt: skip
    typed = typed_attrs(attrs)
    assert typed["f"] == ["FLOAT", 2.0] and typed["ints"] == ["INTS", [1, 2]]
    assert "none" not in typed  # an empty list has no type: absent, as ONNX's defaults
    protos = {a.name: onnx.helper.get_attribute_value(a) for a in make_attributes(typed)}
    assert protos["s"] == b"a | b" and protos["floats"] == [0.5, 1.0]
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(protos["t"]), attrs["t"])


def test_a_bar_in_an_attribute_cannot_end_the_instruction():
    attrs = {"s": ["STRING", "a | b c"]}
    spec = {"op": "X", "domain": "d", "version": 1, "opset": 17, "attrs": attrs, "inputs": ["in0"]}
    node = json.loads(host_json(spec))
    ins = HostOp(json.dumps(node, sort_keys=True, separators=(",", ":")), (MemRef("DDR", 0),),
                 (MemRef("DDR", 64),), (("f32", (4,)),), (("i64", (2, 2)),))  # fmt: skip
    text = format_host(ins)
    assert "|" not in text and " c" in text  # the space stays inside its JSON string
    parsed, declared = match_host(text)
    assert parsed == ins and declared == {"in0": 16, "out0": 16}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (r"in0_type=f32", "in0_type=f16", "is not f32 or an integer type"),
        (r"(in0=DDR\[0x[0-9a-f]+\+)(\d+)", r"\g<1>4", "declares 4 bytes"),
        (r" in1=\S+ in1_type=\S+", "", "1 inputs for a node of 2"),
        (r"node=\{", "node={{", "node must be a JSON object"),
        (r"out0_type=f32\[4,4,8\]", "out0_type=f32[4,4,x]", "out0_type must be TYPE"),
    ],
)
def test_a_bad_host_record_names_its_line(program, old, new, message):
    text = re.sub(old, new, program.stream, count=1)
    lineno = next(n for n, x in enumerate(text.splitlines(), 1) if x.startswith("  HOST "))
    with pytest.raises(StreamError, match=rf"^<p>:{lineno}: .*{re.escape(message)}"):
        parse_stream(text, "<p>")


def test_the_tiled_text_prints_the_host_node_and_reads_it_back():
    tiled = npucc.compile_until(_reverse_model(), "lower-tiles", fallback="host")
    text = tiled.to_text()
    assert ' HOST HOST 20065 [] <- [%5] layer=1 host node={"attrs":{"batch_axis":["INT",1],' in text
    assert 'in1=@"lens"+0 in1_type=i64[4]' in text
    assert tiled_from_text(text).to_text() == text
