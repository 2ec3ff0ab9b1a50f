# ruff: noqa: E501  (stream lines written by hand are long)
"""On-chip tensors with lifetimes: a home's bytes reused by a later tensor, checked by flags."""

from __future__ import annotations

import pytest
from interp_helpers import run_text, stream_text

from npucc.ir.stream import StreamError
from npucc.target import load_target

MESH = load_target("mesh8x8")
T = 'tensor onchip "t" NOC[0x000000+64] f32[16] homes=[0,0] chunk=16 at=0 live=0..0'
U = 'tensor onchip "u" NOC[0x000040+64] f32[16] homes=[0,0] chunk=16 at=0 live=1..1'


def _stream(reuse_sync: str, read_sync: str = "", u: str = U) -> str:
    """Core 0,0 writes t, core 2,3 reads it to output y; then core 0,0 writes u, which lies in
    t's bytes (`reuse_sync`: that write's " | FLAGS"; `read_sync`: more flags of the read)."""
    writer = f"""
    alloc UB[0x000000+64] b=0
    VECTOR vfill dst=UB[0x000000+64] dims=[16] dst_strides=[1] value=3.0 | set vector>mte3#1
    MTE3 noc dst=NOC[0x000000+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops=0 | wait vector>mte3#1 set mte3>mte2@2,3#9
    MTE3 noc dst=NOC[0x000040+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops=0{reuse_sync}
    """
    reader = f"""
    alloc UB[0x000000+64] b=0
    MTE2 noc dst=UB[0x000000+64] src=NOC[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] hops=5 | wait mte3@0,0>mte2#9 set mte2>mte3#2 {read_sync}
    MTE3 copy dst=DDR[0x000000+64] src=UB[0x000000+64] dims=[16] dst_strides=[1] src_strides=[1] | wait mte2>mte3#2
    """
    text = stream_text([("output", "y", 0, (16,))], "", target=MESH, ddr_size=64,
                       cores={(0, 0): writer, (2, 3): reader})  # fmt: skip
    return text.replace("\ncore 0 0", f"\n{T}\n{u}\ncore 0 0", 1)


def test_a_later_tensor_reuses_the_bytes_once_the_reader_flagged():
    text = _stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10")
    assert run_text(text).outputs["y"].tolist() == [3.0] * 16


def test_reusing_bytes_before_their_reader_is_done_is_a_race():
    with pytest.raises(StreamError, match=r"onchip 't' accessed after 'u' reused its bytes|"
                       r"onchip 'u' reuses the bytes of 't' not ordered .*missing flag"):  # fmt: skip
        run_text(_stream(""))


def test_tensors_sharing_bytes_while_both_live_are_rejected():
    text = _stream(
        " | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10", U.replace("live=1..1", "live=0..1")
    )
    with pytest.raises(StreamError, match=r'"u" shares on-chip bytes with "t" while both live'):
        run_text(text)


def test_tensors_at_other_bytes_may_live_together():
    u = U.replace("at=0 live=1..1", "at=64 live=0..1")
    assert run_text(_stream("", u=u)).outputs["y"].tolist() == [3.0] * 16


def test_tensors_taking_turns_with_their_bytes_need_a_flag_each_way():
    """Two one-slot handoffs of a loop with disjoint turns may share bytes while both live:
    each access must be ordered after the other's earlier accesses."""
    t = T.replace("live=0..0", "live=0..1 turn=0..0")
    u = U.replace("live=1..1", "live=0..1 turn=1..1")
    text = _stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10", u).replace(T, t)
    assert run_text(text).outputs["y"].tolist() == [3.0] * 16
    with pytest.raises(StreamError, match=r"onchip '[tu]' reuses the bytes of '[tu]' not ordered"):
        run_text(_stream("", u=u).replace(T, t))
    overlapping = u.replace("turn=1..1", "turn=0..1")
    with pytest.raises(StreamError, match=r'"u" shares on-chip bytes with "t" while both live'):
        run_text(
            _stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10", overlapping).replace(T, t)
        )


def test_a_life_per_home_lets_a_later_tensor_take_a_home_that_died_early():
    """t's elements on home 0,0 die at position 0 (the reader's), those on 0,1 live to 2: u
    may take t's bytes on 0,0 at position 1 (flagged after the read), not on 0,1."""
    t = T.replace("homes=[0,0] chunk=16 at=0 live=0..0",
                  "homes=[0,0;0,1] chunk=8 at=0 live=0..2 lives=[0..0;0..2]")  # fmt: skip
    wide = "hops=1 | wait vector>mte3#1"  # t's write reaches home 0,1

    def stream(reuse_sync: str, read_sync: str = "", u: str = U) -> str:
        text = _stream(reuse_sync, read_sync, u).replace(T, t)
        return text.replace("hops=0 | wait vector>mte3#1", wide)

    text = stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10")
    assert run_text(text).outputs["y"].tolist() == [3.0] * 16
    with pytest.raises(StreamError, match=r"onchip 't' accessed after 'u' reused its bytes|"
                       r"onchip 'u' reuses the bytes of 't' not ordered .*missing flag"):  # fmt: skip
        run_text(stream(""))
    there = U.replace("homes=[0,0]", "homes=[0,1]")
    with pytest.raises(StreamError, match=r'"u" shares on-chip bytes with "t" while both live'):
        run_text(stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10", there))


def test_lives_must_be_one_per_home_with_live_their_hull():
    t = T.replace("live=0..0", "live=0..0 lives=[0..0;0..0]")
    with pytest.raises(StreamError, match=r"lives: 2 intervals for 1 homes"):
        run_text(_stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10").replace(T, t))
    t = T.replace("live=0..0", "live=0..1 lives=[0..0]")
    with pytest.raises(StreamError, match=r"lives: their hull must be live"):
        run_text(_stream(" | wait mte2@2,3>mte3#10", "set mte2>mte3@0,0#10").replace(T, t))
