# ruff: noqa: E501  (stream lines written by hand are long)
import numpy as np
import pytest
from interp_helpers import FILE, TARGET, image_of, line_of, run_text, stream_text

from npucc.ir.isa import Copy, MemRef, Mmad
from npucc.ir.isa_cost import instr_cycles, instr_energy
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream
from npucc.target import load_target

RNG = np.random.default_rng(0)
A = RNG.standard_normal((16, 8)).astype(np.float32)  # input
B = RNG.standard_normal((8, 16)).astype(np.float32)  # const

TENSORS = [
    ("const", "w", 0x000, (8, 16)),
    ("input", "x", 0x200, (16, 8)),
    ("output", "y", 0x400, (16, 16)),
]
BODY = """
alloc L1[0x000000+512] b=0
alloc L1[0x000200+512] b=1
alloc L0A[0x000000+512] b=2
alloc L0B[0x000000+512] b=3
alloc L0C[0x000000+1024] b=4
alloc UB[0x000000+1024] b=5
MTE2 copy dst=L1[0x000000+512] src=DDR[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1]
MTE2 copy dst=L1[0x000200+512] src=DDR[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte2>mte1#1
MTE1 copy dst=L0A[0x000000+512] src=L1[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1] | wait mte2>mte1#1
MTE1 copy dst=L0B[0x000000+512] src=L1[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte1>cube#2 set mte1>ctrl#6
free L1[0x000000+512] b=0 | wait mte1>ctrl#6
CUBE mmad dst=L0C[0x000000+1024] a=L0A[0x000000+512] b=L0B[0x000000+512] m=16 n=16 k=8 acc=0 | wait mte1>cube#2 set cube>vector#3
VECTOR copy dst=UB[0x000000+1024] src=L0C[0x000000+1024] dims=[256] dst_strides=[1] src_strides=[1] | wait cube>vector#3
VECTOR vunary op=relu dst=UB[0x000000+1024] src=UB[0x000000+1024] dims=[256] dst_strides=[1] src_strides=[1] | set vector>mte3#4
MTE3 copy dst=DDR[0x000400+1024] src=UB[0x000000+1024] dims=[256] dst_strides=[1] src_strides=[1] | wait vector>mte3#4 set mte3>ctrl#5
free UB[0x000000+1024] b=5 | wait mte3>ctrl#5
"""


def tiny(body: str = BODY) -> str:
    return stream_text(TENSORS, body, image_of(B), ddr_size=0x800)


def test_tiny_program_matches_numpy():
    res = run_text(tiny(), image_of(B), {"x": A})
    np.testing.assert_allclose(res.outputs["y"], np.maximum(A @ B, 0), rtol=1e-5, atol=1e-6)
    assert res.outputs["y"].shape == (16, 16) and res.outputs["y"].dtype == np.float32
    c = res.counters
    assert c["macs"] == 16 * 16 * 8 and c["instructions"] == 8 and c["events"] == 8
    assert c["bytes"] == {"DDR->L1": 1024, "L1->L0A": 512, "L1->L0B": 512, "L0C->UB": 1024,
                          "UB->DDR": 1024}  # fmt: skip
    assert c["vector_elements"] == 256
    # the peak residency along each core's lines (npucc.ir.residency), L1+UB their sum
    assert res.peak == {"L1": 1024, "L0A": 512, "L0B": 512, "L0C": 1024, "UB": 1024, "L1+UB": 2048}
    stream = parse_stream(tiny(), FILE)
    instrs = [ln.instr for ln in stream.cores[0].lines if ln.queue.isupper()]
    assert res.energy == pytest.approx(sum(instr_energy(TARGET, i) for i in instrs))
    assert sum(res.pipe_cycles.values()) == sum(instr_cycles(TARGET, i) for i in instrs)
    assert res.report()["counters"]["macs"] == 2048


def test_serial_mode_same_outputs_longer_makespan():
    par = run_text(tiny(), image_of(B), {"x": A})
    ser = run_text(tiny(), image_of(B), {"x": A}, serial=True)
    np.testing.assert_array_equal(par.outputs["y"], ser.outputs["y"])
    assert ser.makespan == sum(ser.pipe_cycles.values()) >= par.makespan


def test_check_false_runs():
    res = run_text(tiny(), image_of(B), {"x": A}, check=False)
    np.testing.assert_allclose(res.outputs["y"], np.maximum(A @ B, 0), rtol=1e-5, atol=1e-6)


def _copy(dst: str, src: str, n: int) -> Copy:
    tier_d, addr_d = dst.split(":")
    tier_s, addr_s = src.split(":")
    return Copy(MemRef(tier_d, int(addr_d, 16)), MemRef(tier_s, int(addr_s, 16)), (n,), (1,), (1,))


def test_pipeline_timing_is_sum_of_cost_model():
    body = """
    alloc L1[0x000000+512] b=0
    alloc L0A[0x000000+512] b=1
    alloc L0B[0x000000+512] b=2
    alloc L0C[0x000000+1024] b=3
    alloc L1[0x000200+512] b=4
    MTE2 copy dst=L1[0x000000+512] src=DDR[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte2>mte1#1
    MTE2 copy dst=L1[0x000200+512] src=DDR[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte2>mte1#2
    MTE1 copy dst=L0A[0x000000+512] src=L1[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1] | wait mte2>mte1#1
    MTE1 copy dst=L0B[0x000000+512] src=L1[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1] | wait mte2>mte1#2 set mte1>cube#3
    CUBE mmad dst=L0C[0x000000+1024] a=L0A[0x000000+512] b=L0B[0x000000+512] m=16 n=16 k=8 acc=0 | wait mte1>cube#3
    """
    tensors = [("const", "w", 0, (8, 16)), ("input", "x", 0x200, (16, 8))]
    res = run_text(stream_text(tensors, body, image_of(B), 0x400), image_of(B), {"x": A})
    load = instr_cycles(TARGET, _copy("L1:0", "DDR:200", 128))
    move = instr_cycles(TARGET, _copy("L0A:0", "L1:0", 128))
    mmad = instr_cycles(TARGET, Mmad(MemRef("L0C", 0), MemRef("L0A", 0), MemRef("L0B", 0),
                                     16, 16, 8, 0))  # fmt: skip
    # the second load runs while MTE1 moves the first operand; MTE1 then waits for it
    assert res.makespan == 2 * load + move + mmad
    assert res.pipe_cycles == {"MTE1": 2 * move, "MTE2": 2 * load, "MTE3": 0, "CUBE": mmad,
                        "VECTOR": 0, "FIXP": 0}  # fmt: skip
    assert res.core_makespan == {(0, 0): res.makespan}


def test_img2col_matches_numpy_conv():
    c, h, w, kh, kw, cout = 3, 6, 7, 3, 3, 4
    sh, sw, dh, dw, pt, pl = 2, 1, 1, 2, 1, 2
    oh = (h + 2 * pt - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pl - dw * (kw - 1) - 1) // sw + 1
    x = RNG.standard_normal((c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((cout, c, kh, kw)).astype(np.float32)
    bmat = wt.reshape(cout, -1).T.copy()  # [K, cout]
    m, k = oh * ow, c * kh * kw
    xs, ms, ks, ys = x.size * 4, m * k * 4, k * cout * 4, m * cout * 4
    body = f"""
    alloc L1[0x000000+{xs}] b=0
    alloc L1[0x001000+{ks}] b=1
    alloc L0A[0x000000+{ms}] b=2
    alloc L0B[0x000000+{ks}] b=3
    alloc L0C[0x000000+{ys}] b=4
    alloc UB[0x000000+{ys}] b=5
    MTE2 copy dst=L1[0x000000+{xs}] src=DDR[0x000400+{xs}] dims=[{x.size}] dst_strides=[1] src_strides=[1]
    MTE2 copy dst=L1[0x001000+{ks}] src=DDR[0x000000+{ks}] dims=[{k * cout}] dst_strides=[1] src_strides=[1] | set mte2>mte1#1
    MTE1 img2col dst=L0A[0x000000+{ms}] src=L1[0x000000+{xs}] c={c} h={h} w={w} kh={kh} kw={kw} sh={sh} sw={sw} dh={dh} dw={dw} pt={pt} pl={pl} oh={oh} ow={ow} | wait mte2>mte1#1
    MTE1 copy dst=L0B[0x000000+{ks}] src=L1[0x001000+{ks}] dims=[{k * cout}] dst_strides=[1] src_strides=[1] | set mte1>cube#2
    CUBE mmad dst=L0C[0x000000+{ys}] a=L0A[0x000000+{ms}] b=L0B[0x000000+{ks}] m={m} n={cout} k={k} acc=0 | wait mte1>cube#2 set cube>vector#3
    VECTOR copy dst=UB[0x000000+{ys}] src=L0C[0x000000+{ys}] dims=[{m * cout}] dst_strides=[1] src_strides=[1] | wait cube>vector#3 set vector>mte3#4
    MTE3 copy dst=DDR[0x002000+{ys}] src=UB[0x000000+{ys}] dims=[{m * cout}] dst_strides=[1] src_strides=[1] | wait vector>mte3#4
    """
    tensors = [("const", "w", 0, (k, cout)), ("input", "x", 0x400, (c, h, w)),
               ("output", "y", 0x2000, (m, cout))]  # fmt: skip
    res = run_text(stream_text(tensors, body, image_of(bmat)), image_of(bmat), {"x": x})
    xp = np.pad(x, ((0, 0), (pt, pt), (pl, pl)))
    ref = np.zeros((cout, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[
                :,
                i * sh : i * sh + dh * (kh - 1) + 1 : dh,
                j * sw : j * sw + dw * (kw - 1) + 1 : dw,
            ]
            ref[:, i, j] = np.tensordot(wt, patch, axes=3)
    got = res.outputs["y"].T.reshape(cout, oh, ow)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_lines_report_their_numbers():
    text = tiny()
    stream = parse_stream(text, FILE)
    mmad = next(ln for ln in stream.cores[0].lines if ln.queue == "CUBE")
    assert mmad.lineno == line_of(text, "mmad") and stream.where(3) == f"{FILE}:3"
    assert stream.tensors["x"].shape == (16, 8) and stream.tensors["w"].kind == "const"


def _store(value: float, addr: int, sync: str = "") -> str:
    return f"""
    alloc UB[0x000000+64] b=0
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value={value} | set vector>mte3#1
    MTE3 copy dst=DDR[0x{addr:06x}+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait vector>mte3#1 {sync}
    """


def test_cores_have_private_tiers_and_share_ddr():
    mesh = load_target("mesh8x8")
    tensors = [("output", "a", 0, (16,)), ("output", "b", 64, (16,))]
    cores = {(0, 0): _store(1.0, 0), (2, 3): _store(2.0, 64)}
    res = run_text(stream_text(tensors, "", target=mesh, ddr_size=128, cores=cores))
    assert res.outputs["a"].tolist() == [1.0] * 16 and res.outputs["b"].tolist() == [2.0] * 16
    assert set(res.core_makespan) == {(0, 0), (2, 3)}
    assert res.makespan == max(res.core_makespan.values())
    assert res.peak == {"UB": 64, "L1+UB": 64}
    # core (2, 3) reading what core (0, 0) stored is not ordered by any flag (flags are per core)
    reader = """
    alloc UB[0x000000+64] b=0
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=0.0 | set vector>mte2#1
    MTE2 copy dst=UB[0x000000+64] src=DDR[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait vector>mte2#1
    """
    tensors = [("temp", "a", 0, (16,))]
    text = stream_text(tensors, "", target=mesh, ddr_size=64,
                       cores={(0, 0): _store(1.0, 0), (2, 3): reader})  # fmt: skip
    with pytest.raises(
        StreamError,
        match=r"read of DDR\[0x000000\] by MTE2@2,3 not ordered after "
        r"its write by MTE3@0,0 at line \d+: missing flag",
    ):
        run_text(text)


def test_ddr_reads_the_image_in_place_until_a_step_writes_there():
    """The image is not copied into DDR; a write inside it copies it first, and the caller's
    image stays as it was."""
    from npucc.interp.memories import Memories

    image = bytearray(image_of(B))
    memories = Memories(parse_stream(tiny(), FILE))
    memories.load(image, {"x": A}, timing_only=False)
    view = memories.ddr.view(0, (8, 16), (16, 1), np.dtype(np.float32))
    assert np.shares_memory(view, np.frombuffer(image, np.uint8)) and not view.flags.writeable
    np.testing.assert_array_equal(view, B)
    tensors = [("const", "w", 0x000, (8, 16)), ("input", "x", 0x200, (16, 8)),
               ("output", "y", 0x000, (8, 16))]  # fmt: skip
    body = """
alloc L1[0x000000+512] b=0
alloc L1[0x000200+512] b=1
MTE2 copy dst=L1[0x000000+512] src=DDR[0x000200+512] dims=[128] dst_strides=[1] src_strides=[1]
MTE2 copy dst=L1[0x000200+512] src=DDR[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1] | set mte2>mte3#1
MTE3 copy dst=DDR[0x000000+512] src=L1[0x000000+512] dims=[128] dst_strides=[1] src_strides=[1] | wait mte2>mte3#1 set mte3>ctrl#2 set mte3>ctrl#3
free L1[0x000000+512] b=0 | wait mte3>ctrl#2
free L1[0x000200+512] b=1 | wait mte3>ctrl#3
"""
    res = run_text(stream_text(tensors, body, image_of(B), ddr_size=0x800), image, {"x": A})
    np.testing.assert_array_equal(res.outputs["y"], A.reshape(8, 16))
    assert image == image_of(B)
