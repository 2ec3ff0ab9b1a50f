"""The int8 rounding rules of the interpreter (npucc.interp.ops, docs/precision.md)."""

from __future__ import annotations

import numpy as np

from npucc.interp.ops import REDUCE, requant_records, requantize
from npucc.ir.dtypes import dequantize_host, quantize_host


def test_requant_rounds_half_to_even_adds_the_zero_point_and_saturates():
    acc = np.array([[5, 7, -5, -7, 1000, -1000, 3, 0]], np.int32)
    scale = np.full(8, 0.5, np.float32)  # x.5 ties: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, -3.5 -> -4
    got = requantize(acc, np.zeros(8, np.int32), scale, 10, -128, 127)
    np.testing.assert_array_equal(got, [[12, 14, 8, 6, 127, -128, 12, 10]])
    # a Relu's bound: lo = the zero point
    relu = requantize(acc, np.zeros(8, np.int32), scale, 10, 10, 127)
    np.testing.assert_array_equal(relu[0, 2:4], [10, 10])


def test_requant_adds_the_int32_bias_wrapping_and_reads_little_endian_records():
    bias = np.array([2**31 - 1, -3], np.int32)
    scale = np.array([2.0**-31, 1.0], np.float32)
    records = np.zeros((2, 8), np.uint8)
    records[:, :4] = bias.astype("<i4").view(np.uint8).reshape(2, 4)
    records[:, 4:] = scale.astype("<f4").view(np.uint8).reshape(2, 4)
    b, s = requant_records(records.ravel())
    np.testing.assert_array_equal(b, bias)
    np.testing.assert_array_equal(s, scale)
    got = requantize(np.array([[1, 1]], np.int32), b, s, 0, -128, 127)
    np.testing.assert_array_equal(got, [[-1, -2]])  # 2**31 wraps to -2**31: -1.0 after scaling


def test_host_quantize_divides_rounds_half_to_even_and_saturates_like_quantizelinear():
    x = np.array([0.25, 0.75, -0.25, 100.0, -100.0, np.nan], np.float32)
    np.testing.assert_array_equal(quantize_host(x, 0.5, 1), [1, 3, 1, 127, -128, -128])
    np.testing.assert_array_equal(dequantize_host(np.array([1, 3, -128], np.int8), 0.5, 1),
                                  np.array([0.0, 1.0, -64.5], np.float32))  # fmt: skip


def test_mean_sums_a_window_column_by_column_in_float32_then_divides():
    """[[a, b], [c, d]] sums as (a + c) + (b + d): onnxruntime's order, which decides the
    float32 rounding of an exact tie."""
    a, b, c, d = np.float32(1e8), np.float32(1.0), np.float32(-1e8), np.float32(1.0)
    window = np.array([[[a, b], [c, d]]], np.float32)
    assert REDUCE["mean"](window, (1, 2))[0] == np.float32(0.5)  # (a + c) + (b + d) = 2
    assert ((a + b) + c + d) / np.float32(4) != np.float32(0.5)  # row order would lose b
