"""Embedding lookups: Gather whose indices are an int64 (or int32) graph input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.errors import NpuccError
from npucc.frontend import import_model
from npucc.interp import run_stream
from npucc.ir.instr_text import format_instr, parse_instr
from npucc.ir.isa import Gather, MemRef
from npucc.ir.stream_parse import parse_stream
from npucc.tools.cli import main


def embedding_model(
    table_shape: tuple[int, ...], ids_shape: tuple[int, ...], itype: int = TensorProto.INT64
) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal(table_shape).astype(np.float32), "table")
    out_shape = [*ids_shape, *table_shape[1:]]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)],
        "emb",
        [helper.make_tensor_value_info("ids", itype, list(ids_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [table],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("table_shape", "ids_shape", "itype"),
    [
        ((50, 16), (2, 8), TensorProto.INT64),
        ((30, 7), (1, 5), TensorProto.INT64),
        ((9, 3, 5), (4,), TensorProto.INT64),  # a rank-3 table: trailing dims form the row
        ((40, 8), (3, 2), TensorProto.INT32),
        ((1000, 64), (4, 300), TensorProto.INT64),  # 1200 rows: more than one UB tile
    ],
)
def test_embedding_matches_onnxruntime(table_shape, ids_shape, itype):
    model = embedding_model(table_shape, ids_shape, itype)
    program = npucc.compile(model)
    inputs = random_inputs(program.inputs, 1, model)
    ids = inputs["ids"]
    assert ids.dtype == (np.int32 if itype == TensorProto.INT32 else np.int64)
    assert ids.min() >= 0 and ids.max() < table_shape[0]
    result = program.execute(inputs)
    ref = run_onnxruntime(model, inputs)
    assert all(c.max_abs == 0 for c in compare(result.outputs, ref))
    assert f"i64[{','.join(map(str, ids_shape))}]" in program.stream
    tiles = program.stream.count(" gather ")
    assert tiles >= (2 if ids.size == 1200 else 1)
    assert result.makespan == program.stats["predicted_makespan"]


def test_out_of_range_index_is_a_clean_error(tmp_path, capsys):
    model = embedding_model((30, 4), (2, 3))
    out = tmp_path / "emb.cmd"
    assert main([_save(model, tmp_path), "-o", str(out)]) == 0
    ids = np.array([[0, 1, 2], [3, 30, -1]], np.int64)
    np.save(tmp_path / "ids.npy", ids)
    assert main(["run", str(out), "-i", f"ids={tmp_path / 'ids.npy'}", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    lineno = next(i for i, line in enumerate(out.read_text().split("\n"), 1) if " gather " in line)
    assert f"{out}:{lineno}: gather index 30 (position 4) out of range [-30, 30)" in err


def test_index_input_dtype_and_shape_are_checked():
    program = npucc.compile(embedding_model((30, 4), (2, 3)))
    with pytest.raises(NpuccError, match="expected integer indices"):
        program.execute({"ids": np.zeros((2, 3), np.float32)})
    with pytest.raises(NpuccError, match="has shape"):
        program.execute({"ids": np.zeros((3, 2), np.int64)})


@pytest.mark.parametrize(
    ("nodes", "out_type"),
    [
        (
            [helper.make_node("Abs", ["ids"], ["a"]), helper.make_node("Cast", ["a"], ["y"], to=1)],
            TensorProto.FLOAT,
        ),
        (
            [  # indices and values at once
                helper.make_node("Gather", ["table", "ids"], ["g"]),
                helper.make_node("Cast", ["ids"], ["c"], to=TensorProto.FLOAT),
                helper.make_node("Add", ["g", "c"], ["y"]),
            ],
            TensorProto.FLOAT,
        ),
        ([helper.make_node("Cast", ["ids"], ["y"], to=TensorProto.INT32)], TensorProto.INT32),
    ],
)
def test_integer_input_used_elsewhere_is_held_as_float32(nodes, out_type):
    table = numpy_helper.from_array(np.arange(9, dtype=np.float32), "table")
    y = helper.make_tensor_value_info("y", out_type, [4])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [4])
    graph = helper.make_graph(nodes, "g", [ids], [y], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = npucc.compile(model)
    assert "int64[4]" in program.stream  # converted by the host, not a raw i64 input
    feeds = {"ids": np.array([0, 8, 3, -2], np.int64)}
    ref = run_onnxruntime(model, feeds)
    np.testing.assert_array_equal(program.run(feeds)["y"], ref["y"])


def test_attention_mask_cast_after_views_passes_npucc_check(tmp_path, capsys):
    """An integer mask the model unsqueezes, expands and casts (a BERT export) is compiled as
    a float32 input: the host converts it as the Cast would."""
    seq, width = 6, 8
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "w")
    consts = {
        "one": np.float32(1.0),
        "big": np.float32(-1e4),
        "axes": np.array([1], np.int64),
        "shape": np.array([2, seq, seq], np.int64),
    }
    nodes = [
        helper.make_node("Unsqueeze", ["mask", "axes"], ["m3"]),
        helper.make_node("Expand", ["m3", "shape"], ["mx"]),
        helper.make_node("Cast", ["mx"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "mf"], ["inv"]),
        helper.make_node("Mul", ["inv", "big"], ["bias"]),
        helper.make_node("MatMul", ["x", "w"], ["q"]),
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "xt"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "masked_attention",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, seq, width]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, [2, seq]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, seq, seq])],
        [w, *(numpy_helper.from_array(v, k) for k, v in consts.items())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert import_model(model).tensors["mask"].dtype == "int64"  # held as float32
    assert main(["check", _save(model, tmp_path), "--seed", "3"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_gather_text_round_trip_and_parse_checks():
    ins = Gather(MemRef("UB", 0x100), MemRef("DDR", 0), MemRef("DDR", 0x400), 3, 8, 10)
    text = format_instr(ins)
    assert text == (
        "gather dst=UB[0x000100+96] table=DDR[0x000000+320] idx=DDR[0x000400+24] n=3 row=8 rows=10"
        " index=i64"
    )
    parsed, declared = parse_instr(text)
    assert parsed == ins and declared == {"dst": 96, "table": 320, "idx": 24}


def test_gather_reading_unwritten_indices_is_an_error():
    program = npucc.compile(embedding_model((30, 4), (2, 3)))
    # declare the index tensor a temp: nothing writes it before the gather reads it
    text = program.stream.replace('tensor input "ids"', 'tensor temp "ids"')
    text = text.replace(" i64[2,3]", " f32[2,3,2]")
    stream = parse_stream(text, "t.cmd")
    with pytest.raises(NpuccError, match=r"t\.cmd:\d+: gather: read of DDR.*not written"):
        run_stream(stream, program.image, {})


def bert_like_model(vocab: int = 100, seq: int = 16, hidden: int = 32) -> onnx.ModelProto:
    rng = np.random.default_rng(3)

    def init(name: str, *shape: int, scale: float = 1.0) -> onnx.TensorProto:
        data = (rng.standard_normal(shape) * scale).astype(np.float32)
        return numpy_helper.from_array(data, name)

    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["we"], axis=0),
        helper.make_node("Gather", ["type", "token_type_ids"], ["te"], axis=0),
        helper.make_node("Add", ["we", "te"], ["e0"]),
        helper.make_node("Add", ["e0", "pos"], ["e1"]),
        helper.make_node(
            "LayerNormalization", ["e1", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-12
        ),
        helper.make_node("MatMul", ["ln", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bert_embed",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, seq]),
            helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, [2, seq]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, seq, hidden])],
        [
            init("word", vocab, hidden),
            init("type", 2, hidden),
            init("pos", seq, hidden),
            init("gamma", hidden),
            init("beta", hidden),
            init("w", hidden, hidden, scale=hidden**-0.5),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_bert_like_embedding_passes_npucc_check(tmp_path, capsys):
    assert main(["check", _save(bert_like_model(), tmp_path), "--seed", "5"]) == 0
    assert "PASS" in capsys.readouterr().out


def _save(model: onnx.ModelProto, tmp_path) -> str:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    return str(path)


def _backend_case(name: str):
    from onnx.backend.test.case.node import collect_testcases

    return next(c for c in collect_testcases(None) if c.name == name)


@pytest.mark.parametrize("name", ["test_gather_0", "test_gather_1", "test_gather_2d_indices"])
def test_onnx_backend_gather_cases_with_index_inputs(name):
    """The cases run with their int64 indices as inputs (the harness freezes them instead)."""
    case = _backend_case(name)
    inputs, outputs = case.data_sets[0]
    feeds = dict(zip((v.name for v in case.model.graph.input), inputs, strict=True))
    assert feeds["indices"].dtype == np.int64
    program = npucc.compile(case.model)
    assert " gather " in program.stream
    got = program.run(feeds)
    np.testing.assert_array_equal(got[case.model.graph.output[0].name], outputs[0])


def test_onnx_backend_negative_indices_count_from_the_end():
    case = _backend_case("test_gather_negative_indices")
    inputs, outputs = case.data_sets[0]
    feeds = dict(zip((v.name for v in case.model.graph.input), inputs, strict=True))
    assert (feeds["indices"] < 0).any()
    got = npucc.compile(case.model).run(feeds)
    np.testing.assert_array_equal(got[case.model.graph.output[0].name], outputs[0])


def test_gather_write_takes_part_in_race_detection():
    program = npucc.compile(embedding_model((30, 4), (2, 3)))
    lines = program.stream.split("\n")
    g = next(i for i, line in enumerate(lines) if " gather " in line)
    flag = lines[g].split(" set ")[-1]  # the flag ordering the store after the gather
    lines[g] = lines[g].replace(f" set {flag}", "")
    lines[g + 1] = lines[g + 1].replace(f"wait {flag} ", "")
    stream = parse_stream("\n".join(lines), "t.cmd")
    ids = np.zeros((2, 3), np.int64)
    with pytest.raises(
        NpuccError, match=rf"t\.cmd:{g + 2}: copy: read of UB.*by MTE2 at line {g + 1}"
    ):
        run_stream(stream, program.image, {"ids": ids})


@pytest.mark.parametrize(
    ("views", "axis"),
    [
        ([("Reshape", [-1])], 0),  # GPT-2 flattens its ids first
        ([("Unsqueeze", [0]), ("Flatten", None)], 0),
        ([("Reshape", [2, 4])], 1),  # indices in the middle of the output
    ],
)
def test_gather_by_a_view_of_the_ids_passes_npucc_check(views, axis, tmp_path, capsys):
    rng = np.random.default_rng(3)
    table_shape = (30, 5) if axis == 0 else (3, 30, 5)
    nodes, ids, inits = (
        [],
        "ids",
        [numpy_helper.from_array(rng.standard_normal(table_shape).astype(np.float32), "table")],
    )
    for k, (op, arg) in enumerate(views):
        out = f"v{k}"
        if op == "Flatten":
            nodes.append(helper.make_node(op, [ids], [out], axis=0))
        else:
            inits.append(numpy_helper.from_array(np.array(arg, np.int64), f"a{k}"))
            nodes.append(helper.make_node(op, [ids, f"a{k}"], [out]))
        ids = out
    nodes.append(helper.make_node("Gather", ["table", ids], ["y"], axis=axis))
    graph = helper.make_graph(
        nodes,
        "gpt2_ids",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )
    g = import_model(model)
    (take,) = [layer for layer in g.layers if layer.op != "reshape"]
    assert take.op == "take" and take.inputs[1] == "ids"  # the views of the ids are gone
    assert main(["check", _save(model, tmp_path), "--seed", "2"]) == 0
    assert "PASS" in capsys.readouterr().out
