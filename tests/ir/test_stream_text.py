# ruff: noqa: E501  (stream lines written by hand are long)
"""The stream grammar (ir/stream_text, ir/instr_text): each record prints, parses and prints back."""

from __future__ import annotations

import hashlib
import json

import pytest

from npucc.ir.instr_text import format_ref, match_ref
from npucc.ir.isa import INSTRUCTIONS
from npucc.ir.stream import Event, Flag, StreamError
from npucc.ir.stream_parse import parse_stream
from npucc.ir.stream_text import (
    format_event,
    format_flag,
    format_line,
    format_shape,
    format_stream,
    format_sync,
    match_event,
    match_flag,
    match_shape,
    split_line,
)
from npucc.target import load_target

MESH = load_target("mesh8x8")

# one line per instruction kind, and every event, on two cores with flags within and between them
CORE_0_0 = """\
  alloc L1[0x000000+256] b=0
  MTE2 copy dst=L1[0x000000+256] src=DDR[0x000000+256] dims=[64] dst_strides=[1] src_strides=[1] | set mte2>mte1#1
  alloc L0A[0x000000+1024] b=1
  MTE1 img2col dst=L0A[0x000000+1024] src=L1[0x000000+256] c=1 h=8 w=8 kh=2 kw=2 sh=1 sw=1 dh=1 dw=1 pt=0 pl=0 oh=8 ow=8 | wait mte2>mte1#1 set mte1>cube#2
  alloc L0B[0x000000+1024] b=2
  MTE2 copy dst=L0B[0x000000+1024] src=DDR[0x000100+1024] dims=[256] dst_strides=[1] src_strides=[1] | set mte2>cube#3
  alloc L0C[0x000000+1024] b=3
  CUBE mmad dst=L0C[0x000000+1024] a=L0A[0x000000+1024] b=L0B[0x000000+1024] m=16 n=16 k=16 acc=0 | wait mte1>cube#2 wait mte2>cube#3 set cube>vector#4
  alloc UB[0x000000+1024] b=4
  VECTOR vunary op=clip dst=UB[0x000000+1024] src=L0C[0x000000+1024] dims=[256] dst_strides=[1] src_strides=[1] scalars=[-1.5,2.0] | wait cube>vector#4
  VECTOR vbinary op=add dst=UB[0x000000+1024] a=UB[0x000000+1024] b=UB[0x000000+64] dims=[16,16] dst_strides=[16,1] a_strides=[16,1] b_strides=[0,1]
  VECTOR vreduce op=max dst=UB[0x000400+64] src=UB[0x000000+1024] dims=[16,16] dst_strides=[1] src_strides=[16,1] nred=1
  VECTOR vsoftmax dst=UB[0x000000+64] src=UB[0x000000+64] rows=4 cols=4
  VECTOR vfill dst=UB[0x000440+64] dims=[16] dst_strides=[1] value=-inf | set vector>mte3#5
  MTE3 spill dst=DDR[0x000500+1024] src=UB[0x000000+1024] size=256 | wait vector>mte3#5 set mte3>mte2#6
  MTE2 spill dst=UB[0x000000+1024] src=DDR[0x000500+1024] size=256 | wait mte3>mte2#6
  MTE2 gather dst=UB[0x000800+128] table=DDR[0x000000+1024] idx=DDR[0x000900+16] n=2 row=16 rows=16 index=i64 | set mte2>mte3#7
  MTE3 noc dst=NOC[0x000000+64] src=UB[0x000440+64] dims=[16] dst_strides=[1] src_strides=[1] hops=0 | wait mte2>mte3#7 set mte3>mte2@1,2#8
  free UB[0x000000+1024] b=4
  barrier
end"""
CORE_1_2 = """\
  alloc UB[0x000000+64] b=0
  MTE2 noc dst=UB[0x000000+64] src=NOC[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops=3 | wait mte3@0,0>mte2#8 set mte2>mte3#9
  MTE3 copy dst=DDR[0x000a00+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait mte2>mte3#9
  free UB[0x000000+64] b=0
end"""


def _text() -> str:
    image = bytes(0x500)
    header = [
        "npucc-stream 1",
        f"target {MESH.to_json()}",
        f"image size={len(image)} sha256={hashlib.sha256(image).hexdigest()}",
        "ddr size=4096",
        'tensor const "w" DDR[0x000000+1280] f32[320]',
        'tensor temp "spill.0.0" DDR[0x000500+1024] f32[256]',
        'tensor input "ids" DDR[0x000900+16] i64[2]',
        'tensor output "y \\u00e9" DDR[0x000a00+64] f32[4,4]',
        'tensor onchip "t" NOC[0x000000+64] f32[16] homes=[0,0] chunk=16 at=0 live=0..0',
    ]
    return "\n".join([*header, "core 0 0", CORE_0_0, "core 1 2", CORE_1_2]) + "\n"


TEXT = _text()


def test_the_whole_stream_prints_back_byte_for_byte():
    stream = parse_stream(TEXT, "t.cmd")
    assert stream.to_text() == TEXT
    again = parse_stream(stream.to_text(), "t.cmd")
    assert [c.lines for c in again.cores] == [c.lines for c in stream.cores]
    assert again.tensors == stream.tensors


@pytest.mark.parametrize("opcode", sorted(set(INSTRUCTIONS) - {"requant"}))  # int8 only:
def test_each_instruction_kind_prints_back(opcode):  # tests/ir/test_stream_text_int8.py
    stream = parse_stream(TEXT, "t.cmd")
    lines = [
        (line, TEXT.splitlines()[line.lineno - 1])
        for core in stream.cores
        for line in core.lines
        if not isinstance(line.instr, Event) and line.instr.opcode == opcode
    ]
    assert lines, f"the fixture has no {opcode} line"
    for line, original in lines:
        assert line.text(stream.target) == original


@pytest.mark.parametrize("kind", ["alloc", "free", "barrier"])
def test_each_event_prints_back(kind):
    stream = parse_stream(TEXT, "t.cmd")
    original = TEXT.splitlines()
    for line in (x for c in stream.cores for x in c.lines if x.queue == kind):
        assert line.text(stream.target) == original[line.lineno - 1]


def test_flag_forms():
    local = Flag("mte2", "mte1", 1, (0, 0), (0, 0))
    cross = Flag("mte3", "mte2", 8, (0, 0), (1, 2))
    assert (str(local), local.wait_text(), local.set_text()) == ("mte2>mte1#1",) * 3
    assert cross.wait_text() == "mte3@0,0>mte2#8"  # the waiter names the setter's core
    assert cross.set_text() == "mte3>mte2@1,2#8"  # the setter names the waiter's core
    assert str(cross) == "mte3@0,0>mte2@1,2#8"  # messages name both
    assert match_flag(cross.wait_text(), (1, 2)) == ("mte3", (0, 0), "mte2", (1, 2), 8)
    assert match_flag(cross.set_text(), (0, 0)) == ("mte3", (0, 0), "mte2", (1, 2), 8)
    assert match_flag(str(cross), (5, 5)) == ("mte3", (0, 0), "mte2", (1, 2), 8)
    assert format_flag("a", "b", 3, (1, 1), None) == "a@1,1>b#3"
    for bad in ("mte2>mte1", "mte2>mte1#", "MTE2>mte1#1", "mte2@1>mte1#1", "mte2>mte1#1 "):
        assert match_flag(bad, (0, 0)) is None


def test_operand_event_shape_and_line_records():
    assert (
        format_ref("UB", 0x40, 64) == "UB[0x000040+64]" and format_ref("L1", 0x40) == "L1[0x000040]"
    )
    assert match_ref("NOC[0x000040+64]") == ("NOC", 0x40, 64)
    for bad in ("UB[0x40]", "XB[0x000040+64]", "UB[0x00004G+64]", "UB[0x000040+-1]"):
        assert match_ref(bad) is None
    body = format_event("L0C", 0x100, 512, 7)
    assert body == "L0C[0x000100+512] b=7" and match_event(body.split()) == ("L0C", 0x100, 512, 7)
    assert match_event(["L0C[0x000100+512]", "b=x"]) is None
    assert format_shape("f32", (2, 3)) == "f32[2,3]" and match_shape("f32[2,3]") == ("f32", "2,3")
    assert format_shape("f32", ()) == "f32[]" and match_shape("f32[]") == ("f32", "")
    sync = format_sync(["a>b#1"], ["b>c#2"])
    line = format_line("MTE2", "copy x=1", sync)
    assert line == "  MTE2 copy x=1 | wait a>b#1 set b>c#2"
    assert split_line(line.strip()) == ("MTE2", "copy x=1", True, " wait a>b#1 set b>c#2")
    assert format_line("barrier", "", "") == "  barrier"
    two = format_sync(["a>b#1", "c>d#3"], ["b>c#2", "d>e#4"])
    assert two == "wait a>b#1 wait c>d#3 set b>c#2 set d>e#4"
    assert format_sync(["a>b#1"], []) == "wait a>b#1" and format_sync((), ["b>c#2"]) == "set b>c#2"
    assert format_sync((), ()) == ""
    assert format_stream(["h"], ["t"], [(0, 1, ["  l"])]) == "h\nt\ncore 0 1\n  l\nend\n"


def test_tensor_names_are_json_literals():
    stream = parse_stream(TEXT, "t.cmd")
    assert "y \u00e9" in stream.tensors
    assert (
        stream.tensors["y \u00e9"].text()
        == f"tensor output {json.dumps('y é')} DDR[0x000a00+64] f32[4,4]"
    )


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("set mte3>mte2@1,2#8", "set mte3@1,2>mte2#8", "names another core for this core's queue"),
        ("hops=3", "hops=2", "noc: hops=2, but core 1,2 is 3 hops"),
        ("  barrier\n", "  barrier x\n", "barrier takes no operands"),
        ("index=i64", "index=f16", "gather: bad index=f16"),
    ],
)
def test_a_malformed_record_names_file_and_line(old, new, message):
    text = TEXT.replace(old, new, 1)
    lineno = next(i for i, line in enumerate(text.splitlines(), 1) if new.strip() in line)
    with pytest.raises(StreamError, match=rf"^t\.cmd:{lineno}: .*{message}"):
        parse_stream(text, "t.cmd")


def test_a_repeated_pipe_line_shares_its_instruction_but_is_checked_on_its_queue():
    line = "  MTE3 copy dst=DDR[0x000a00+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1]"
    text = TEXT.replace("  free UB[0x000000+64] b=0\n", f"{line}\n  free UB[0x000000+64] b=0\n")
    lines = parse_stream(text, "t.cmd").cores[1].lines
    assert lines[3].instr is lines[2].instr and lines[3].lineno == lines[2].lineno + 1
    wrong = text.replace(f"{line}\n", f"{line.replace('MTE3', 'MTE2', 1)}\n")
    lineno = wrong.splitlines().index(line.replace("MTE3", "MTE2", 1)) + 1
    with pytest.raises(StreamError, match=rf"^t\.cmd:{lineno}: copy must run on MTE3, not MTE2"):
        parse_stream(wrong, "t.cmd")


def test_a_repeated_noc_line_is_routed_from_its_own_core():
    noc = "MTE3 noc dst=NOC[0x000000+64] src=UB[0x000440+64] dims=[16] dst_strides=[1] src_strides=[1] hops=0"
    assert noc in CORE_0_0
    line = f"  {noc}\n"
    text = TEXT.replace("  free UB[0x000000+64] b=0\n", f"{line}  free UB[0x000000+64] b=0\n")
    lineno = text.splitlines().index(line.rstrip("\n")) + 1
    with pytest.raises(StreamError, match=rf"^t\.cmd:{lineno}: noc: hops=0, but core 1,2 is"):
        parse_stream(text, "t.cmd")
