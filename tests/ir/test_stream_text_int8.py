# ruff: noqa: E501  (stream lines written by hand are long)
"""The int8 stream grammar: i8 tensors, quant=SCALE,ZP I/O, requant, img2col pad, vector q."""

from __future__ import annotations

import hashlib

import pytest

from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream
from npucc.target import load_target

INT8 = load_target("davinci-core").at_precision("int8")
CORE = """\
  alloc L1[0x000000+64] b=0
  MTE2 copy dst=L1[0x000000+64] src=DDR[0x000100+64] dims=[64] dst_strides=[1] src_strides=[1] | set mte2>mte1#1
  alloc L0A[0x000000+256] b=1
  MTE1 img2col dst=L0A[0x000000+256] src=L1[0x000000+64] c=1 h=8 w=8 kh=2 kw=2 sh=1 sw=1 dh=1 dw=1 pt=1 pl=1 oh=8 ow=8 pad=-128 | wait mte2>mte1#1 set mte1>cube#2
  alloc L0B[0x000000+64] b=2
  MTE2 copy dst=L0B[0x000000+64] src=DDR[0x000000+64] dims=[64] dst_strides=[1] src_strides=[1] | set mte2>cube#3
  alloc L0C[0x000000+1024] b=3
  CUBE mmad dst=L0C[0x000000+1024] a=L0A[0x000000+256] b=L0B[0x000000+16] m=64 n=4 k=4 acc=0 | wait mte1>cube#2 wait mte2>cube#3 set cube>vector#4
  alloc UB[0x000000+256] b=4
  alloc UB[0x000100+32] b=5
  MTE2 copy dst=UB[0x000100+32] src=DDR[0x000040+32] dims=[32] dst_strides=[1] src_strides=[1] | set mte2>vector#5
  VECTOR requant dst=UB[0x000000+256] src=L0C[0x000000+1024] params=UB[0x000100+32] m=64 n=4 zp=-3 lo=-3 hi=127 | wait cube>vector#4 wait mte2>vector#5
  VECTOR vbinary op=add dst=UB[0x000000+256] a=UB[0x000000+256] b=UB[0x000000+256] dims=[256] dst_strides=[1] a_strides=[1] b_strides=[1] q=[0.5,-3.0,0.5,-3.0,0.25,7.0]
  VECTOR vreduce op=mean dst=UB[0x000000+64] src=UB[0x000000+256] dims=[64,4] dst_strides=[1] src_strides=[4,1] nred=1 q=[0.25,7.0,0.25,7.0]
  VECTOR vsoftmax dst=UB[0x000000+64] src=UB[0x000000+64] rows=4 cols=16 q=[0.25,7.0,0.00390625,-128.0] | set vector>mte3#6
  MTE3 copy dst=DDR[0x000200+64] src=UB[0x000000+64] dims=[64] dst_strides=[1] src_strides=[1] | wait vector>mte3#6
  free UB[0x000100+32] b=5
  free UB[0x000000+256] b=4
  free L0C[0x000000+1024] b=3
  free L0B[0x000000+64] b=2
  free L0A[0x000000+256] b=1
  free L1[0x000000+64] b=0
  barrier
end"""


def _text(core: str = CORE, tensors: tuple[str, ...] = ()) -> str:
    image = bytes(0x100)
    header = [
        "npucc-stream 1",
        f"target {INT8.to_json()}",
        f"image size={len(image)} sha256={hashlib.sha256(image).hexdigest()}",
        "ddr size=1024",
        'tensor const "w" DDR[0x000000+96] i8[96]',
        'tensor input "x" DDR[0x000100+64] f32[1,1,8,8] quant=0.5,-3',
        'tensor output "y" DDR[0x000200+64] f32[4,16] quant=0.00390625,-128',
        *tensors,
    ]
    return "\n".join([*header, "core 0 0", core]) + "\n"


def test_an_int8_stream_prints_back_byte_for_byte():
    text = _text()
    stream = parse_stream(text, "t.cmd")
    assert stream.to_text() == text
    assert stream.target.dtype == "i8" and stream.target.acc_dtype == "i32"
    assert stream.tensors["x"].quant == (0.5, -3) and stream.tensors["w"].dtype == "i8"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("zp=-3 lo=-3", "zp=-129 lo=-3", "bad zp=-129 (an int8 value)"),
        ("lo=-3 hi=127", "lo=9 hi=8", "lo <= hi"),
        ("pad=-128", "pad=200", "bad pad=200"),
        ("q=[0.25,7.0,0.25,7.0]", "q=[0.25,7.0]", "vreduce: q needs an int8 stream and 4 values"),
        ("q=[0.5,-3.0,0.5", "q=[0.0,-3.0,0.5", "positive scales"),
    ],
)
def test_bad_int8_fields_are_refused(old, new, message):
    with pytest.raises(StreamError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_stream(_text(CORE.replace(old, new)), "t.cmd")


def test_an_int8_streams_float_input_needs_its_quantization():
    text = _text().replace(" quant=0.5,-3", "")
    with pytest.raises(StreamError, match="needs quant=SCALE,ZP"):
        parse_stream(text, "t.cmd")
    with pytest.raises(StreamError, match="expected quant=SCALE,ZP"):
        parse_stream(_text().replace("quant=0.5,-3", "quant=-0.5,-3"), "t.cmd")
