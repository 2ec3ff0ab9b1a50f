# ruff: noqa: E501  (stream lines written by hand are long)
"""On-chip tensors (NOC): NoC copies between cores, their timing, counters and checks."""

from __future__ import annotations

import pytest
from interp_helpers import run_text, stream_text

from npucc.ir.isa_cost import copy_cycles
from npucc.ir.stream import StreamError
from npucc.target import load_target
from npucc.target.cost import noc_cycles, noc_energy

MESH = load_target("mesh8x8")
ONCHIP = 'tensor onchip "t" NOC[0x000000+64] f32[16] homes=[0,0] chunk=16 at=0 live=0..0'


def _stream(writer: str, reader: str, onchip: str = ONCHIP) -> str:
    """Core 0,0 writes on-chip tensor t, core 2,3 reads it and stores it to output y."""
    text = stream_text([("output", "y", 0, (16,))], "", target=MESH, ddr_size=64,
                       cores={(0, 0): writer, (2, 3): reader})  # fmt: skip
    return text.replace("\ncore 0 0", f"\n{onchip}\ncore 0 0", 1)


def _writer(sync: str = "", hops: int = 0) -> str:
    return f"""
    alloc UB[0x000000+64] b=0
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=3.0 | set vector>mte3#1
    MTE3 noc dst=NOC[0x000000+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops={hops} | wait vector>mte3#1 {sync}
    """


def _reader(sync: str = "", hops: int = 5, lead: int = 16) -> str:
    return f"""
    alloc UB[0x000000+16384] b=0
    VECTOR vfill dst=UB[0x000000+16384] dims=[{lead}] dst_strides=[1] value=0.0 | set vector>mte2#1
    MTE2 noc dst=UB[0x000000+64] src=NOC[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops={hops} | wait vector>mte2#1 {sync} set mte2>mte3#2
    MTE3 copy dst=DDR[0x000000+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait mte2>mte3#2
    """


def test_noc_handoff_between_cores_is_timed_and_counted():
    text = _stream(_writer("set mte3>mte2@2,3#9"), _reader("wait mte3@0,0>mte2#9"))
    res = run_text(text)
    assert res.outputs["y"].tolist() == [3.0] * 16
    assert res.counters["bytes"]["UB->NOC"] == 64 and res.counters["bytes"]["NOC->UB"] == 64
    assert res.counters["noc_byte_hops"] == 64 * 5
    assert not any("DDR" in path and "UB->DDR" != path for path in res.counters["bytes"])
    vfill = 8 + 1
    write_end = vfill + noc_cycles(MESH, 64, 0)
    read_end = write_end + 5 * MESH.mesh.noc_hop_latency + noc_cycles(MESH, 64, 5)
    assert res.core_makespan[(0, 0)] == write_end
    assert res.core_makespan[(2, 3)] == read_end + copy_cycles(MESH, "UB", "DDR", 64)
    assert noc_energy(MESH, 64, 5) == 64 * 8 * MESH.energy.noc_bit_hop * 5


def test_reading_an_onchip_tensor_before_its_producers_flag_is_a_race():
    # the reader waits long enough for the write to happen first, but no flag orders them
    text = _stream(_writer(), _reader(lead=4096))
    with pytest.raises(
        StreamError,
        match=r"read of NOC\[0x000000\] by MTE2@2,3 not ordered after its write by "
        r"MTE3@0,0 at line \d+: missing flag",
    ):
        run_text(text)


def test_reading_an_onchip_tensor_never_written_fails():
    text = _stream(_writer(), _reader()).replace("value=3.0 | set vector>mte3#1", "value=3.0")
    text = text.replace("    MTE3 noc dst=NOC", "#", 1)
    with pytest.raises(StreamError, match=r"read of NOC\[0x000000\] .*not written since"):
        run_text(text)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("hops=5", "hops=4", r"noc: hops=4, but core 2,3 is 5 hops from the farthest home"),
        ("src=NOC[0x000000+64]", "src=NOC[0x000040+64]", r"exceeds NOC size 64"),
        ("MTE2 noc", "MTE2 copy", r"copy: unknown field .hops."),
        (" hops=5 |", " |", r"noc: missing field .hops."),
        (
            "src=NOC[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops=5",
            "src=DDR[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops=5",
            r"noc: only a noc copy reaches NOC, and it must",
        ),
        ("homes=[0,0]", "homes=[0,0;0,1]", r"2 homes do not hold 16 elements in chunks of 16"),
        ("homes=[0,0]", "homes=[9,0]", r"home 9,0 outside the mesh"),
        ("f32[16] homes", "f32[8] homes", r"64 bytes at 0x0 do not hold shape \(8,\)"),
    ],
)
def test_malformed_noc_streams_are_rejected(old, new, message):
    text = _stream(_writer("set mte3>mte2@2,3#9"), _reader("wait mte3@0,0>mte2#9"))
    assert old in text
    with pytest.raises(StreamError, match=message):
        run_text(text.replace(old, new, 1))


def test_onchip_tensors_beyond_a_cores_buffer_are_rejected():
    budget = MESH.mesh.onchip_budget
    big = f'tensor onchip "t" NOC[0x000000+{budget + 64}] f32[{budget // 4 + 16}] homes=[0,0] chunk={budget // 4 + 16} at=0 live=0..0'
    text = _stream(_writer("set mte3>mte2@2,3#9"), _reader("wait mte3@0,0>mte2#9"), big)
    with pytest.raises(
        StreamError, match=r"more than the on-chip buffer \(524288 bytes\) of core 0,0"
    ):
        run_text(text)
