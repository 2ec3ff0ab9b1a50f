"""Every IR level prints and parses back; symbolic operands parse; bad dumps name file:line."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper

import npucc
from npucc.codegen.emit import generate
from npucc.errors import NpuccError
from npucc.ir.formats import detect_level, parse_ir, render
from npucc.ir.instr_text import (
    ParseError,
    fill_template,
    format_instr,
    instr_template,
    parse_instr,
)
from npucc.ir.isa import (
    BINARY_OPS,
    REDUCE_OPS,
    UNARY_OPS,
    BufRef,
    Copy,
    DdrRef,
    MemRef,
    NocCopy,
    VBinary,
    VReduce,
    VUnary,
    field_names,
)
from npucc.ir.tiled_parse import scheduled_from_text, tiled_from_text
from npucc.target import load_target

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "small_cnn": None,
    "mlp": {"x": (1, 64)},
    "residual_block": None,
    "lrn_concat": None,
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def dumps(request, tmp_path_factory) -> dict[str, str]:
    """The dump of every pass of one reference model, by pass name."""
    out = tmp_path_factory.mktemp(request.param)
    npucc.compile(ROOT / "models" / f"{request.param}.onnx", input_shapes=MODELS[request.param],
                  dump_dir=out)  # fmt: skip
    return {f.stem.split("-", 1)[1]: f.read_text() for f in sorted(out.iterdir())}


def test_every_dump_round_trips(dumps):
    levels = {}
    for name, text in dumps.items():
        level, ir = parse_ir(text, name)
        levels[name] = level
        assert render(ir) == text, name
    assert levels["prune-unused"] == "graph"
    assert (levels["lower-tiles"], levels["schedule"], levels["codegen"]) == (
        "tiled",
        "schedule",
        "cmd",
    )


def test_parsed_tiled_program_generates_the_same_instructions(dumps):
    scheduled = scheduled_from_text(dumps["schedule"])
    regenerated = generate(scheduled.program, scheduled.schedules).stream
    original = dumps["codegen"]
    body = original[original.index("\ncore ") :]  # the image digest differs: consts are zeros
    assert regenerated[regenerated.index("\ncore ") :] == body
    tiled = tiled_from_text(dumps["lower-tiles"])
    for core, again in zip(scheduled.program.cores, tiled.cores, strict=True):
        assert core.graph.succs == again.graph.succs


def test_json_and_dot_of_each_level(dumps):
    for name in ("prune-unused", "lower-tiles", "schedule", "codegen"):
        _, ir = parse_ir(dumps[name])
        assert render(ir, "json").startswith("{")
    assert render(parse_ir(dumps["prune-unused"])[1], "dot").startswith("digraph")
    assert "cluster_0_0" in render(parse_ir(dumps["lower-tiles"])[1], "dot")
    with pytest.raises(NpuccError, match="dot"):
        render(parse_ir(dumps["schedule"])[1], "dot")


def test_symbolic_operands_parse_back():
    instr = Copy(BufRef(3, "UB", 8), DdrRef('a "b" c=d', 16), (4, 2), (2, 1), (1, 4))
    text = format_instr(instr, symbolic=True)
    assert parse_instr(text, buffer_tiers=["L1"] * 3 + ["UB"])[0] == instr
    with pytest.raises(ParseError, match="bad operand"):
        parse_instr(text)  # a resolved stream never accepts symbolic operands
    with pytest.raises(ParseError, match="bad operand"):
        parse_instr(text, buffer_tiers=["L1"])  # b3 does not exist
    with pytest.raises(ParseError, match="bad operand"):
        parse_instr('copy dst=L1[0x000000+16]" src=DDR[0x000000+16] dims=[4] '
                    "dst_strides=[1] src_strides=[1]")  # fmt: skip


def test_cmd_round_trip_by_stream_printer(dumps):
    _, stream = parse_ir(dumps["codegen"])
    assert stream.to_text() == dumps["codegen"]


@pytest.mark.parametrize(
    ("edit", "message", "line"),
    [
        (lambda t: t.replace("tiled-program", "tiled-progrm", 1), "not an npucc IR dump", 1),
        (lambda t: t.replace(' "core0_0" nodes=', ' "core0_0" nodez=', 1), "unexpected", None),
        (lambda t: t.replace(" <- [%", " <- [%9999,%", 1), "predecessor", None),
        (lambda t: t.replace("src=@", "src=#", 1), "bad operand", None),
    ],
)
def test_bad_tiled_text_names_file_and_line(dumps, edit, message, line):
    text = dumps["lower-tiles"]
    bad = edit(text)
    with pytest.raises(NpuccError, match=message) as err:
        parse_ir(bad, "dump.txt")
    assert "(dump.txt:" in str(err.value)
    if line is not None:
        assert f"dump.txt:{line})" in str(err.value)


def test_schedule_times_are_checked_against_the_replay(dumps):
    text = dumps["schedule"]
    head, tail = text.split("\nschedule ", 1)
    lines = tail.split("\n")
    i = next(k for k, s in enumerate(lines) if " MTE2 [" in s)
    start = lines[i].index("[") + 1
    lines[i] = lines[i][:start] + "1" + lines[i][start:]
    with pytest.raises(NpuccError, match="replays as"):
        scheduled_from_text(head + "\nschedule " + "\n".join(lines), "s.txt")


def test_detect_level_rejects_empty_and_foreign_text():
    with pytest.raises(NpuccError, match="empty"):
        detect_level("\n\n", "x")
    assert detect_level("npucc-stream 1\n") == "cmd"


def test_every_vector_op_round_trips():
    for op in UNARY_OPS:
        scalars = {"clip": (-1.0, 2.0), "muls": (0.5,), "adds": (1.0,), "pows": (3.0,)}.get(op, ())
        instr = VUnary(op, MemRef("UB", 0), MemRef("UB", 64), (4,), (1,), (2,), scalars)
        assert parse_instr(format_instr(instr))[0] == instr
    for op in BINARY_OPS:
        instr = VBinary(op, MemRef("UB", 0), MemRef("UB", 64), MemRef("UB", 128), (2, 4),
                        (4, 1), (4, 1), (0, 1))  # fmt: skip
        assert parse_instr(format_instr(instr))[0] == instr
    for op in REDUCE_OPS:
        instr = VReduce(op, MemRef("UB", 0), MemRef("UB", 64), (2, 4), (1,), (4, 1), 1)
        assert parse_instr(format_instr(instr))[0] == instr


def test_an_instruction_template_filled_is_its_text():
    target = load_target("davinci-core")
    samples = [
        VUnary("clip", MemRef("UB", 0), MemRef("UB", 64), (4,), (1,), (2,), (-0.0, 2.0)),
        VBinary(
            "add",
            MemRef("UB", 0),
            MemRef("UB", 64),
            MemRef("UB", 128),
            (2, 4),
            (4, 1),
            (4, 1),
            (0, 1),
        ),  # fmt: skip
        Copy(MemRef("L1", 4096), MemRef("DDR", 0x123456), (2, 8), (8, 1), (16, 1)),
        VReduce("max", MemRef("UB", 0), MemRef("UB", 64), (2, 4), (1,), (4, 1), 1),
    ]
    for instr in samples:
        template = instr_template(instr, target)
        names = [n for n in field_names(type(instr)) if n in instr.operands()]
        assert template.replace("%%", "").count("%") == len(names)
        for shift in (0, 0x40, 0x1000000):
            moved = instr.with_operands(
                **{n: MemRef(r.tier, r.addr + shift) for n, r in instr.operands().items()}
            )
            addrs = tuple(getattr(moved, n).addr for n in names)
            assert fill_template(template, addrs) == format_instr(moved, target)
    with pytest.raises(ValueError, match="unresolved operand src"):
        instr_template(Copy(MemRef("L1", 0), DdrRef("x", 0), (4,), (1,), (1,)), target)


@pytest.fixture(scope="module")
def mesh_dumps(tmp_path_factory) -> dict[str, str]:
    """The dumps of residual_block on mesh8x8 (its plan keeps tensors on chip)."""
    out = tmp_path_factory.mktemp("mesh")
    npucc.compile(ROOT / "models" / "residual_block.onnx", "mesh8x8", beam_width=8, dump_dir=out)
    return {f.stem.split("-", 1)[1]: f.read_text() for f in sorted(out.iterdir())}


def test_onchip_tensors_and_noc_copies_round_trip(mesh_dumps):
    assert "\nddr onchip " in mesh_dumps["lower-tiles"]
    assert "\ntensor onchip " in mesh_dumps["codegen"] and " noc dst=" in mesh_dumps["codegen"]
    for name in ("lower-tiles", "schedule"):
        _, ir = parse_ir(mesh_dumps[name], name)
        assert render(ir) == mesh_dumps[name], name
    assert '"homes"' in render(parse_ir(mesh_dumps["lower-tiles"])[1], "json")
    # the whole mesh stream, flags between cores included, prints back byte for byte
    _, stream = parse_ir(mesh_dumps["codegen"])
    assert "@" in mesh_dumps["codegen"] and stream.to_text() == mesh_dumps["codegen"]
    assert '"homes"' in render(stream, "json")
    instr = NocCopy(BufRef(1, "UB", 4), DdrRef("t", 8), (4,), (1,), (1,), 3)
    text = format_instr(instr, symbolic=True)
    assert text.endswith(" hops=3") and parse_instr(text, buffer_tiers=["L1", "UB"])[0] == instr


def test_a_stream_with_float16_and_double_io_prints_back(tmp_path):
    """Host float types of inputs and outputs survive the stream's text round trip."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [4])
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)
    model = helper.make_model(
        helper.make_graph([node], "casts", [x], [y]), opset_imports=[helper.make_opsetid("", 19)]
    )
    program = npucc.compile(model, "davinci-core")
    assert " f16[4]" in program.stream and " f64[4]" in program.stream
    _, stream = parse_ir(program.stream)
    assert stream.to_text() == program.stream
