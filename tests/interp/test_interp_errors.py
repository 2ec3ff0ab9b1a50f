# ruff: noqa: E501  (stream lines written by hand are long)
import hashlib
import re

import numpy as np
import pytest
from interp_helpers import FILE, image_of, line_of, run_text, stream_text
from test_interp_programs import BODY, A, B, tiny

from npucc.errors import NpuccError
from npucc.interp import run_file
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import load_stream, parse_stream

IMAGE = image_of(B)


def fails(text: str, pattern: str, marker: str | None = None, **kw) -> str:
    """Run text; it must fail with FILE:LINE (the line containing marker) and pattern."""
    with pytest.raises(StreamError) as info:
        run_text(text, IMAGE, {"x": A}, **kw)
    message = str(info.value)
    assert re.search(pattern, message), message
    if marker is not None:
        assert message.startswith(f"{FILE}:{line_of(text, marker)}: "), message
    return message


def edit(old: str, new: str) -> str:
    assert old in BODY
    return tiny(BODY.replace(old, new, 1))


def test_overlapping_allocs():
    text = edit("alloc L1[0x000200+512] b=1", "alloc L1[0x000100+512] b=1")
    fails(text, r"alloc: L1\[0x000100\+512\] overlaps the live region L1\[0x000000\+512\]", "b=1")


def test_offset_past_tier_end():
    text = edit("dst=L0A[0x000000+512] src=L1", "dst=L0A[0x00ff00+512] src=L1")
    fails(text, r"copy: operand dst=L0A\[0x00ff00\+512\] exceeds L0A size 65536", "0x00ff00")


def test_pattern_larger_than_declared_bytes():
    text = edit("dims=[128] dst_strides=[1] src_strides=[1] | wait mte2>mte1#1",
                "dims=[128] dst_strides=[1] src_strides=[2] | wait mte2>mte1#1")  # fmt: skip
    fails(
        text,
        r"copy: operand src pattern spans 1020 bytes, more than its declared 512",
        "src_strides=[2]",
    )


def test_unaligned_address():
    text = edit("src=DDR[0x000200+512]", "src=DDR[0x000202+512]")
    fails(text, r"address 0x202 not aligned to 4", "0x000202")


def test_missing_flag_is_a_race():
    body = """
    alloc UB[0x000000+64] b=0
    alloc L1[0x000000+512] b=1
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=1.0
    MTE2 copy dst=L1[0x000000+512] src=DDR[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte2>mte3#1
    MTE3 copy dst=DDR[0x000400+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait mte2>mte3#1
    """
    text = stream_text([("input", "x", 0x200, (16, 8)), ("output", "y", 0x400, (16,))], body,
                       IMAGE, 0x800)  # fmt: skip
    msg = fails(text, r"copy: read of UB\[0x000000\] by MTE3 not ordered after its write by "
                      r"VECTOR at line \d+: missing flag", "MTE3")  # fmt: skip
    assert f"line {line_of(text, 'vfill')}" in msg


def test_write_after_read_race():
    body = """
    alloc UB[0x000000+64] b=0
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=1.0 | set vector>mte3#1
    MTE3 copy dst=DDR[0x000400+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait vector>mte3#1
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=2.0
    """
    text = stream_text([("input", "x", 0x200, (16, 8)), ("output", "y", 0x400, (16,))], body,
                       IMAGE, 0x800)  # fmt: skip
    fails(text, r"vfill: write of UB\[0x000000\] by VECTOR not ordered after its read by MTE3 "
                r"at line \d+: missing flag", "value=2.0")  # fmt: skip


def test_wait_never_set_deadlocks():
    text = edit("| set mte2>mte1#1", "").replace("wait mte2>mte1#1", "wait mte2>mte1#9")
    msg = fails(text, r"deadlock: no queue can move", "mte2>mte1#9")
    mte1, cube = line_of(text, "mte2>mte1#9"), line_of(text, "mmad")
    assert f"MTE1 at line {mte1} waits mte2>mte1#9" in msg
    assert f"CUBE at line {cube} waits mte1>cube#2" in msg
    assert "VECTOR at line" in msg and "MTE3 at line" in msg and "free at line" in msg


def test_truncated_line():
    text = edit("a=L0A[0x000000+512] b=L0B[0x000000+512] m=16 n=16 k=8 acc=0 | wait mte1>cube#2 "
                "set cube>vector#3", "a=L0A[0x0")  # fmt: skip
    fails(text, r"mmad: bad operand a='L0A\[0x0'", "a=L0A[0x0")


def test_truncated_file():
    text = tiny().replace("end\n", "")
    fails(text, r"core block opened at line \d+ has no 'end'")


def test_unknown_opcode():
    fails(edit("CUBE mmad", "CUBE mmadd"), r"unknown opcode 'mmadd'", "mmadd")


def test_unknown_queue():
    fails(edit("CUBE mmad", "TPU mmad"), r"unknown queue 'TPU'", "TPU")


def test_read_before_write():
    first_load = ("MTE2 copy dst=L1[0x000000+512] src=DDR[0x000200+512] dims=[128] "
                  "dst_strides=[1] src_strides=[1]\n")  # fmt: skip
    text = edit(first_load, "")
    fails(text, r"copy: read of L1\[0x000000\] by MTE1: not written since its alloc",
          "wait mte2>mte1#1")  # fmt: skip


def test_access_to_freed_region():
    text = edit("free L1[0x000000+512] b=0 | wait mte1>ctrl#6", "free L1[0x000000+512] b=0")
    text = text.replace(" set mte1>ctrl#6", "")
    fails(text, r"copy: write of L1\[0x000000\] by MTE2: region not live", "src=DDR[0x000200")


def test_free_must_match_alloc():
    text = edit("free L1[0x000000+512] b=0", "free L1[0x000000+256] b=0")
    fails(text, r"free of L1\[0x000000\+256\] does not match a live alloc", "+256]")


def test_wrong_pipe():
    fails(edit("CUBE mmad", "VECTOR mmad"), r"mmad must run on CUBE, not VECTOR", "VECTOR mmad")
    text = edit("MTE3 copy", "MTE2 copy").replace("set mte3>ctrl#5", "set mte2>ctrl#5")
    text = text.replace("wait mte3>ctrl#5", "wait mte2>ctrl#5")
    fails(text, r"copy must run on MTE3, not MTE2", "MTE2 copy dst=DDR")


def test_flag_errors():
    fails(edit("set mte1>ctrl#6", "set mte1>ctrl#1"), r"flag #1 set twice \(first at line \d+\)")
    fails(edit("wait mte1>ctrl#6", "wait mte1>ctrl#7"), r"flag mte1>ctrl#6 is set but never waited")
    fails(edit("wait mte2>mte1#1", "wait mte2>cube#1"), r"wait mte2>cube#1 on queue mte1")
    fails(edit("wait mte1>cube#2", "wait mte1>cube#2 wait mte1>cube#2"), r"flag #2 wait twice")
    fails(edit("| wait mte1>ctrl#6", "| wait mte1>ctrl#6 sets x"), r"bad synchronisation")


def test_output_never_written():
    text = edit("MTE3 copy dst=DDR[0x000400+1024] src=UB[0x000000+1024] dims=[256]",
                "MTE3 copy dst=DDR[0x000400+512] src=UB[0x000000+512] dims=[128]")  # fmt: skip
    fails(text, r'output "y" is not fully written at the end', 'tensor output "y"')


def test_spill_round_trip_keeps_data_and_written_state():
    body = """
    alloc UB[0x000000+128] b=0
    VECTOR vfill dst=UB[0x000000+128] dims=[16] dst_strides=[1] value=3.0 | set vector>mte3#1
    MTE3 spill dst=DDR[0x000000+128] src=UB[0x000000+128] size=32 | wait vector>mte3#1 set mte3>ctrl#2 set mte3>mte2#3
    alloc UB[0x000000+64] b=1 | wait mte3>ctrl#2 set ctrl>vector#4
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=0.0 | wait ctrl>vector#4 set vector>ctrl#5
    free UB[0x000000+64] b=1 | wait vector>ctrl#5 set ctrl>mte2#6
    MTE2 spill dst=UB[0x000000+128] src=DDR[0x000000+128] size=32 | wait mte3>mte2#3 wait ctrl>mte2#6 set mte2>mte3#7
    MTE3 copy dst=DDR[0x000200+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait mte2>mte3#7
    """
    tensors = [("temp", "spill.0", 0, (32,)), ("output", "y", 0x200, (16,))]
    res = run_text(stream_text(tensors, body))
    np.testing.assert_array_equal(res.outputs["y"], np.full(16, 3.0, np.float32))
    assert res.counters["bytes"] == {"UB->DDR": 128 + 64, "DDR->UB": 128}
    # the buffer was spilled half written (legal); reading its unwritten half back is not
    half = body.replace("src=UB[0x000000+64] dims=[16]", "src=UB[0x000040+64] dims=[16]")
    text = stream_text(tensors, half)
    with pytest.raises(StreamError, match=r"read of UB\[0x000040\] by MTE3: not written"):
        run_text(text)


def test_alloc_overlapping_a_buffer_still_being_spilled():
    body = """
    alloc UB[0x000000+128] b=0
    alloc UB[0x000100+64] b=2
    VECTOR vfill dst=UB[0x000000+128] dims=[32] dst_strides=[1] value=3.0 | set vector>mte3#1
    MTE3 spill dst=DDR[0x000000+128] src=UB[0x000000+128] size=32 | wait vector>mte3#1 set mte3>ctrl#2
    barrier | wait mte3>ctrl#2
    alloc UB[0x000000+64] b=1 | wait vector>ctrl#3
    VECTOR vfill dst=UB[0x000100+64] dims=[16] dst_strides=[1] value=0.0 | set vector>ctrl#3
    """
    text = stream_text([("temp", "spill.0", 0, (32,))], body)
    with pytest.raises(StreamError, match=r"overlaps the live region being spilled out"):
        run_text(text)


def test_tensor_names_are_json_literals():
    tensors = [("input", 'we"ird\nname | set', 0x200, (16, 8))]
    text = stream_text(tensors, "barrier")
    assert list(parse_stream(text, FILE).tensors) == ['we"ird\nname | set']
    raw = text.replace('we\\"ird\\nname', "we\tird")
    with pytest.raises(StreamError, match=r"t.cmd:5: bad tensor name literal"):
        parse_stream(raw.replace("\\t", "\t"), FILE)
    with pytest.raises(StreamError, match=r"t.cmd:5: non-ASCII or control character"):
        parse_stream(text.replace("we", "w\x01e"), FILE)


def test_header_errors():
    text = tiny()
    with pytest.raises(StreamError, match=r"t.cmd:1: expected 'npucc-stream 1'"):
        parse_stream(text.replace("npucc-stream 1", "npucc-stream 2"), FILE)
    with pytest.raises(StreamError, match=r"t.cmd:2: bad target"):
        parse_stream(text.replace('"mac":', '"mak":'), FILE)
    with pytest.raises(StreamError, match=r"t.cmd:5: tensor \"w\": 512 bytes do not hold"):
        parse_stream(text.replace("f32[8,16]", "f32[8,15]"), FILE)
    with pytest.raises(StreamError, match=r"t.cmd:5: const tensor \"w\" lies outside the image"):
        parse_stream(text.replace("image size=512", "image size=256"), FILE)


def test_inputs_are_checked():
    with pytest.raises(NpuccError, match=r'input "x" has shape \(8, 16\), expected \(16, 8\)'):
        run_text(tiny(), IMAGE, {"x": A.T})
    with pytest.raises(NpuccError, match=r'missing input "x"'):
        run_text(tiny(), IMAGE, {})
    with pytest.raises(NpuccError, match=r'unknown input "z"'):
        run_text(tiny(), IMAGE, {"x": A, "z": A})


def test_run_file_checks_the_image(tmp_path):
    cmd = tmp_path / "net.cmd"
    cmd.write_text(tiny())
    with pytest.raises(NpuccError, match=r"cannot read image .*net\.cmd\.bin"):
        run_file(cmd, {"x": A})
    (tmp_path / "net.cmd.bin").write_bytes(IMAGE[:-4] + b"\0\0\0\0")
    with pytest.raises(NpuccError, match=r"net\.cmd\.bin: sha256 differs"):
        run_file(cmd, {"x": A})
    (tmp_path / "net.cmd.bin").write_bytes(IMAGE + b"\0")
    with pytest.raises(NpuccError, match=r"net\.cmd\.bin: size 513 differs"):
        run_file(cmd, {"x": A})
    (tmp_path / "net.cmd.bin").write_bytes(IMAGE)
    res = run_file(cmd, {"x": A})
    np.testing.assert_allclose(res.outputs["y"], np.maximum(A @ B, 0), rtol=1e-5, atol=1e-6)
    assert load_stream(cmd).image_sha256 == hashlib.sha256(IMAGE).hexdigest()
