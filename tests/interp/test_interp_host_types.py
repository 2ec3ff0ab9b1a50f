# ruff: noqa: E501  (stream lines written by hand are long)
"""Inputs and outputs of type f16, bf16 or f64: float32 in DDR, converted at the boundary."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from interp_helpers import FILE, run_text, stream_text

from npucc.errors import NpuccError

BODY = """
alloc UB[0x000000+16] b=0
MTE2 copy dst=UB[0x000000+16] src=DDR[0x000000+16] dims=[4] dst_strides=[1] src_strides=[1] | set mte2>vector#1
VECTOR vunary op=f16 dst=UB[0x000000+16] src=UB[0x000000+16] dims=[4] dst_strides=[1] src_strides=[1] | wait mte2>vector#1 set vector>mte3#2
MTE3 copy dst=DDR[0x000040+16] src=UB[0x000000+16] dims=[4] dst_strides=[1] src_strides=[1] | wait vector>mte3#2 set mte3>ctrl#3
free UB[0x000000+16] b=0 | wait mte3>ctrl#3
"""


def _stream(src: str, dst: str) -> str:
    text = stream_text([("input", "x", 0, (4,)), ("output", "y", 0x40, (4,))], BODY)
    text = text.replace('"x" DDR[0x000000+16] f32[4]', f'"x" DDR[0x000000+16] {src}[4]')
    return text.replace('"y" DDR[0x000040+16] f32[4]', f'"y" DDR[0x000040+16] {dst}[4]')


@pytest.mark.parametrize(
    ("src", "dst", "dtype_in", "dtype_out"),
    [
        ("f64", "f16", np.float64, np.float16),
        ("bf16", "f64", ml_dtypes.bfloat16, np.float64),
        ("f16", "bf16", np.float16, ml_dtypes.bfloat16),
    ],
)
def test_host_types_convert_on_load_and_read(src, dst, dtype_in, dtype_out):
    x = np.array([1 + 2**-11, -3.25, 6e4, 0.1], dtype_in)
    y = run_text(_stream(src, dst), inputs={"x": x}).outputs["y"]
    assert y.dtype == np.dtype(dtype_out)
    want = x.astype(np.float32).astype(np.float16).astype(dtype_out)
    np.testing.assert_array_equal(y.astype(np.float64), want.astype(np.float64))


def test_a_host_typed_input_must_be_passed_with_its_type():
    with pytest.raises(NpuccError, match="has dtype float32, expected float16"):
        run_text(_stream("f16", "f32"), inputs={"x": np.zeros(4, np.float32)})


def test_only_inputs_and_outputs_may_have_a_host_type():
    text = stream_text([("temp", "t", 0, (4,))], "").replace("f32[4]", "f16[4]")
    with pytest.raises(NpuccError, match=f"{FILE}:5: bad tensor type 'f16\\[4\\]'"):
        run_text(text)


@pytest.mark.parametrize(
    ("src", "dst", "x"),
    [
        ("int64", "int32", np.array([1, -3, 2048, 0], np.int64)),
        ("uint8", "int16", np.array([0, 255, 7, 1], np.uint8)),
        ("bool", "bool", np.array([True, False, False, True])),
    ],
)
def test_integer_and_boolean_types_are_float32_values_in_ddr(src, dst, x):
    y = run_text(_stream(src, dst), inputs={"x": x}).outputs["y"]
    assert y.dtype == np.dtype(dst)
    np.testing.assert_array_equal(y, x.astype(dst))


def test_an_integer_input_beyond_two_to_the_24_is_refused():
    x = np.array([0, 1, 2**24 + 1, 3], np.int64)
    with pytest.raises(
        NpuccError, match=r'input "x": value 16777217 at \(2,\) is not an exact int64'
    ):
        run_text(_stream("int64", "f32"), inputs={"x": x})
    with pytest.raises(NpuccError, match="has dtype float32, expected int32"):
        run_text(_stream("int32", "f32"), inputs={"x": np.zeros(4, np.float32)})


@pytest.mark.parametrize(
    ("dst", "x", "bad"),
    [
        ("uint8", [0.0, 255.0, 256.0, 1.0], "256.0 at (2,)"),
        ("int32", [1.0, 0.5, 2.0, 3.0], "0.5 at (1,)"),
        ("int64", [1.0, 2.0, np.nan, 3.0], "nan at (2,)"),
        ("bool", [1.0, 0.0, 2.0, 1.0], "2.0 at (2,)"),
    ],
)
def test_an_output_that_is_not_an_integer_of_its_type_is_an_overflow_error(dst, x, bad):
    with pytest.raises(
        NpuccError,
        match=rf'output "y": value {re.escape(bad)} is not an exact {dst} \(integer overflow',
    ):
        run_text(_stream("f32", dst), inputs={"x": np.array(x, np.float32)})
