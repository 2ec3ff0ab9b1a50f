# ruff: noqa: E501  (stream lines written by hand are long)
import math

import ml_dtypes
import numpy as np
import pytest
from interp_helpers import run_text, stream_text

from npucc.ir.isa import BINARY_OPS, UNARY_OPS

RNG = np.random.default_rng(1)
SCALARS = {"clip": [-0.5, 0.75], "muls": [1.5], "adds": [-2.0], "pows": [1.7]}
POSITIVE = {"sqrt", "log", "pows", "recip"}
ERF = np.vectorize(math.erf)
REF = {
    "copy": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "clip": lambda x: np.clip(x, -0.5, 0.75),
    "exp": np.exp,
    "neg": np.negative,
    "sqrt": np.sqrt,
    "recip": lambda x: 1 / x,
    "square": np.square,
    "muls": lambda x: x * 1.5,
    "adds": lambda x: x - 2.0,
    "pows": lambda x: x**1.7,
    "tanh": np.tanh,
    "erf": ERF,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "abs": np.abs,
    "log": np.log,
    "not": lambda x: (x == 0).astype(np.float64),
    "f16": lambda x: x.astype(np.float16),
    "bf16": lambda x: x.astype(ml_dtypes.bfloat16).astype(np.float64),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "sign": np.sign,
}
DOMAIN = {  # inputs inside the domain of the inverse functions
    "asin": lambda x: np.tanh(x),
    "acos": lambda x: np.tanh(x),
    "atanh": lambda x: np.tanh(x) * np.float32(0.99),
    "acosh": lambda x: np.abs(x) + np.float32(1),
}
BREF = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
        "max": np.maximum, "min": np.minimum, "pow": np.power, "lt": np.less,
        "gt": np.greater, "le": np.less_equal, "ge": np.greater_equal, "eq": np.equal,
        "ne": np.not_equal, "mask": lambda a, b: np.where(b != 0, a, 0),
        "maskn": lambda a, b: np.where(b == 0, a, 0), "mod": np.mod, "fmod": np.fmod}  # fmt: skip


def _vector_program(inputs: dict[str, np.ndarray], vector_line: str, out_shape) -> dict:
    """Load each input into UB (the i-th at 0x1000*i), run `vector_line`, store UB[0x8000]."""
    tensors, body, addr = [], [], 0
    for i, (name, value) in enumerate(inputs.items()):
        n = value.size
        tensors.append(("input", name, addr, value.shape))
        body.append(f"alloc UB[0x{0x1000 * i:06x}+{n * 4}] b={i}")
        body.append(f"MTE2 copy dst=UB[0x{0x1000 * i:06x}+{n * 4}] src=DDR[0x{addr:06x}+{n * 4}] "
                    f"dims=[{n}] dst_strides=[1] src_strides=[1] | set mte2>vector#{i + 1}")  # fmt: skip
        addr += n * 4
    out = math.prod(out_shape)
    tensors.append(("output", "y", 0x4000, out_shape))
    waits = " ".join(f"wait mte2>vector#{i + 1}" for i in range(len(inputs)))
    body.append(f"alloc UB[0x008000+{out * 4}] b=9")
    body.append(f"{vector_line} | {waits} set vector>mte3#50")
    body.append(f"MTE3 copy dst=DDR[0x004000+{out * 4}] src=UB[0x008000+{out * 4}] dims=[{out}] "
                "dst_strides=[1] src_strides=[1] | wait vector>mte3#50")  # fmt: skip
    return run_text(stream_text(tensors, "\n".join(body)), inputs=inputs).outputs


@pytest.mark.parametrize("op", UNARY_OPS)
def test_vunary_strided(op):
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    if op in POSITIVE:
        x = np.abs(x) + 0.5
    x = DOMAIN.get(op, lambda v: v)(x).astype(np.float32)
    scalars = ",".join(map(str, SCALARS.get(op, [])))
    line = (f"VECTOR vunary op={op} dst=UB[0x008000+128] src=UB[0x000000+252] dims=[4,8] "
            f"dst_strides=[8,1] src_strides=[16,2] scalars=[{scalars}]")  # fmt: skip
    y = _vector_program({"x": x}, line, (4, 8))["y"]
    expected = REF[op](x[:, ::2].astype(np.float64))
    np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", [op for op in BINARY_OPS if op != "mla"])
def test_vbinary_broadcast(op):
    a = (np.abs(RNG.standard_normal((4, 8))) + 0.5).astype(np.float32)
    b = (RNG.standard_normal(8) * 0.5 + 1.0).astype(np.float32)
    line = (f"VECTOR vbinary op={op} dst=UB[0x008000+128] a=UB[0x000000+128] b=UB[0x001000+32] "
            "dims=[4,8] dst_strides=[8,1] a_strides=[8,1] b_strides=[0,1]")  # fmt: skip
    y = _vector_program({"a": a, "b": b}, line, (4, 8))["y"]
    np.testing.assert_allclose(y, BREF[op](a, b[None, :]), rtol=2e-6)


def test_vbinary_mla_accumulates_into_dst():
    """mla: dst += a * b, b broadcast; dst is a third input the instruction reads."""
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    d = RNG.standard_normal((4, 8)).astype(np.float32)
    line = ("VECTOR vbinary op=mla dst=UB[0x002000+128] a=UB[0x000000+128] b=UB[0x001000+32] "
            "dims=[4,8] dst_strides=[8,1] a_strides=[8,1] b_strides=[0,1]")  # fmt: skip
    tensors = [("input", "a", 0, (4, 8)), ("input", "b", 128, (8,)), ("input", "d", 160, (4, 8)),
               ("output", "y", 0x4000, (4, 8))]  # fmt: skip
    body = []
    for i, (addr, src, n) in enumerate(((0x0000, 0, 32), (0x1000, 128, 8), (0x2000, 160, 32))):
        body.append(f"alloc UB[0x{addr:06x}+{n * 4}] b={i}")
        body.append(f"MTE2 copy dst=UB[0x{addr:06x}+{n * 4}] src=DDR[0x{src:06x}+{n * 4}] "
                    f"dims=[{n}] dst_strides=[1] src_strides=[1] | set mte2>vector#{i + 1}")  # fmt: skip
    body.append(
        f"{line} | wait mte2>vector#1 wait mte2>vector#2 wait mte2>vector#3 set vector>mte3#9"
    )
    body.append("MTE3 copy dst=DDR[0x004000+128] src=UB[0x002000+128] dims=[32] dst_strides=[1] "
                "src_strides=[1] | wait vector>mte3#9")  # fmt: skip
    y = run_text(stream_text(tensors, "\n".join(body)), inputs={"a": a, "b": b, "d": d}).outputs[
        "y"
    ]
    np.testing.assert_allclose(y, d + a * b[None, :], rtol=1e-6)


def test_vbinary_mla_reads_its_dst():
    """An mla into a dst never written is a read of unwritten elements."""
    line = ("VECTOR vbinary op=mla dst=UB[0x008000+128] a=UB[0x000000+128] b=UB[0x001000+32] "
            "dims=[4,8] dst_strides=[8,1] a_strides=[8,1] b_strides=[0,1]")  # fmt: skip
    inputs = {"a": np.ones((4, 8), np.float32), "b": np.ones(8, np.float32)}
    with pytest.raises(Exception, match=r"vbinary: read of UB\[0x008000\].*not written"):
        _vector_program(inputs, line, (4, 8))


@pytest.mark.parametrize("op", ["lt", "gt", "le", "ge", "eq", "ne"])
def test_vbinary_comparisons_on_ties_and_non_finite_values(op):
    a = np.array([1.0, 2.0, -0.0, np.inf, np.nan, -np.inf, 3.0, np.nan], np.float32)
    b = np.array([1.0, 3.0, 0.0, np.inf, 1.0, 0.0, np.nan, np.nan], np.float32)
    line = (f"VECTOR vbinary op={op} dst=UB[0x008000+32] a=UB[0x000000+32] b=UB[0x001000+32] "
            "dims=[8] dst_strides=[1] a_strides=[1] b_strides=[1]")  # fmt: skip
    y = _vector_program({"a": a, "b": b}, line, (8,))["y"]
    np.testing.assert_array_equal(y, BREF[op](a, b).astype(np.float32))


def test_vbinary_masks_select_non_finite_values_exactly():
    a = np.array([np.inf, np.nan, -np.inf, 2.5, np.nan, np.inf], np.float32)
    c = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 1.0], np.float32)
    for op, want in (
        ("mask", [np.inf, np.nan, 0, 0, 0, np.inf]),
        ("maskn", [0, 0, -np.inf, 2.5, np.nan, 0]),
    ):
        line = (f"VECTOR vbinary op={op} dst=UB[0x008000+24] a=UB[0x000000+24] b=UB[0x001000+24] "
                "dims=[6] dst_strides=[1] a_strides=[1] b_strides=[1]")  # fmt: skip
        y = _vector_program({"a": a, "c": c}, line, (6,))["y"]
        np.testing.assert_array_equal(y, np.array(want, np.float32))


def test_vunary_rounding_to_half_and_bfloat16_ties_to_even_and_overflows():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65520.0, -1e5, np.nan, 1 + 2**-8, 1 + 3 * 2**-8, 3.4e38],
                 np.float32)  # fmt: skip
    for op, want in (("f16", [1.0, 1 + 2**-9, np.inf, -np.inf, np.nan, 1 + 2**-8, 1 + 3 * 2**-8, np.inf]),
                     ("bf16", [1.0, 1.0, 65536.0, -99840.0, np.nan, 1.0, 1 + 2**-6, np.inf])):  # fmt: skip
        line = (f"VECTOR vunary op={op} dst=UB[0x008000+32] src=UB[0x000000+32] dims=[8] "
                "dst_strides=[1] src_strides=[1]")  # fmt: skip
        y = _vector_program({"x": x}, line, (8,))["y"]
        np.testing.assert_array_equal(y, np.array(want, np.float32))


def test_vunary_round_ties_to_even_and_sign():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, np.nan], np.float32)
    for op, want in (("round", [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, -0.0, np.nan]),
                     ("sign", [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 0.0, np.nan])):  # fmt: skip
        line = (f"VECTOR vunary op={op} dst=UB[0x008000+32] src=UB[0x000000+32] dims=[8] "
                "dst_strides=[1] src_strides=[1]")  # fmt: skip
        y = _vector_program({"x": x}, line, (8,))["y"]
        np.testing.assert_array_equal(y, np.array(want, np.float32))


def test_vbinary_mod_and_fmod_signs_and_non_finite_values():
    a = np.array([-4.25, 7.5, -0.0, -3.0, 1.0, np.inf, 1.0, 5.0], np.float32)
    b = np.array([2.0, -3.0, 2.0, np.inf, -np.inf, 2.0, 0.0, 8.0], np.float32)
    for op, want in (("mod", [1.75, -1.5, 0.0, np.inf, -np.inf, np.nan, np.nan, 5.0]),
                     ("fmod", [-0.25, 1.5, -0.0, -3.0, 1.0, np.nan, np.nan, 5.0])):  # fmt: skip
        line = (f"VECTOR vbinary op={op} dst=UB[0x008000+32] a=UB[0x000000+32] b=UB[0x001000+32] "
                "dims=[8] dst_strides=[1] a_strides=[1] b_strides=[1]")  # fmt: skip
        y = _vector_program({"a": a, "b": b}, line, (8,))["y"]
        np.testing.assert_array_equal(y, np.array(want, np.float32))


@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("nred", [1, 2])
def test_vreduce_trailing_dims(op, nred):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    out_shape = x.shape[: 3 - nred]
    dst_strides = ",".join(str(s // 4) for s in np.zeros(out_shape, np.float32).strides)
    line = (f"VECTOR vreduce op={op} dst=UB[0x008000+{math.prod(out_shape) * 4}] "
            f"src=UB[0x000000+240] dims=[3,4,5] dst_strides=[{dst_strides}] "
            f"src_strides=[20,5,1] nred={nred}")  # fmt: skip
    y = _vector_program({"x": x}, line, out_shape)["y"]
    ref = getattr(np, op)(x, axis=tuple(range(3 - nred, 3)))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_vreduce_everything_into_one_element():
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    line = ("VECTOR vreduce op=sum dst=UB[0x008000+4] src=UB[0x000000+96] dims=[6,4] "
            "dst_strides=[] src_strides=[4,1] nred=2")  # fmt: skip
    y = _vector_program({"x": x}, line, (1,))["y"]
    np.testing.assert_allclose(y, [x.sum()], rtol=1e-5)


def test_vfill():
    x = np.zeros(4, np.float32)
    line = "VECTOR vfill dst=UB[0x008000+64] dims=[2,8] dst_strides=[8,1] value=-2.5"
    y = _vector_program({"x": x}, line, (2, 8))["y"]
    np.testing.assert_array_equal(y, np.full((2, 8), -2.5, np.float32))


def test_mmad_accumulates():
    a = RNG.standard_normal((16, 8)).astype(np.float32)
    b = RNG.standard_normal((8, 16)).astype(np.float32)
    body = """
    alloc L0A[0x000000+512] b=0
    alloc L0B[0x000000+512] b=1
    alloc L0C[0x000000+1024] b=2
    alloc UB[0x000000+1024] b=3
    MTE2 copy dst=L0A[0x000000+512] src=DDR[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1]
    MTE2 copy dst=L0B[0x000000+512] src=DDR[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte2>cube#1
    CUBE mmad dst=L0C[0x000000+1024] a=L0A[0x000000+512] b=L0B[0x000000+512] m=16 n=16 k=8 acc=0 | wait mte2>cube#1
    CUBE mmad dst=L0C[0x000000+1024] a=L0A[0x000000+512] b=L0B[0x000000+512] m=16 n=16 k=8 acc=1 | set cube>vector#2
    VECTOR copy dst=UB[0x000000+1024] src=L0C[0x000000+1024] dims=[256] dst_strides=[1] src_strides=[1] | wait cube>vector#2 set vector>mte3#3
    MTE3 copy dst=DDR[0x000400+1024] src=UB[0x000000+1024] dims=[256] dst_strides=[1] src_strides=[1] | wait vector>mte3#3
    """
    tensors = [("input", "a", 0, (16, 8)), ("input", "b", 0x200, (8, 16)),
               ("output", "y", 0x400, (16, 16))]  # fmt: skip
    res = run_text(stream_text(tensors, body), inputs={"a": a, "b": b})
    np.testing.assert_allclose(res.outputs["y"], 2 * (a @ b), rtol=1e-5, atol=1e-5)
    assert res.counters["macs"] == 2 * 16 * 16 * 8
