# ruff: noqa: E501  (stream lines written by hand are long)
"""The interpreter's parts one at a time: steps, timing, memories, race detection, counters."""

from __future__ import annotations

import numpy as np
import pytest
from interp_helpers import FILE, line_of, stream_text

from npucc.interp.counters import Tally
from npucc.interp.memories import Memories
from npucc.interp.races import _RECENT, RaceDetector, _Recent
from npucc.interp.steps import Steps
from npucc.interp.stream_clock import StreamTiming
from npucc.ir.isa import PIPES
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream
from npucc.target import load_target
from npucc.target.cost import ddr_channel, sync_cycles

MESH = load_target("mesh8x8")
LOAD = (
    "MTE2 copy dst=UB[0x000000+256] src=DDR[0x000000+256] dims=[64] dst_strides=[1] src_strides=[1]"
)
STORE = (
    "MTE3 copy dst=DDR[0x000100+256] src=UB[0x000000+256] dims=[64] dst_strides=[1] src_strides=[1]"
)
BODY = f"""
alloc UB[0x000000+256] b=0 | set ctrl>mte2#1
{LOAD} | wait ctrl>mte2#1 set mte2>mte3#2
{STORE} | wait mte2>mte3#2
"""


def _stream(cores=None, target=MESH):
    tensors = [("input", "x", 0, (64,)), ("output", "y", 256, (64,))]
    return parse_stream(stream_text(tensors, BODY, ddr_size=512, target=target, cores=cores), FILE)


def test_steps_sit_in_their_queues_in_program_order():
    stream = _stream({(0, 0): BODY, (1, 1): BODY})
    steps = Steps(stream, serial=False, timing_only=False)
    assert len(steps.qnames) == 1 + 2 * len(PIPES) and steps.qnames[1] == "MTE1@0,0"
    mte2 = 1 + len(PIPES) + PIPES.index("MTE2")  # core 1,1's MTE2
    assert [s.line.queue for s in steps.queues[mte2]] == ["MTE2"] and steps.queues[mte2][0].seq == 1
    assert steps.qnames[mte2] == "MTE2@1,1"
    events = [s for s in steps.all if s.qid == 0]
    assert len(events) == 2 and all(s.seq == 0 for s in events)
    load = steps.queues[mte2][0]
    assert load.cycles > 0 and load.ddr_bytes == 256 and [a.name for a in load.reads] == ["src"]
    assert steps.line_of(mte2, 1) == load.line.lineno
    assert all(steps.waiter[f.key] is load for f in load.line.waits)


def test_timing_shares_the_ddr_channel_and_delays_flags_by_hops():
    stream = _stream({(0, 0): BODY, (3, 4): BODY})
    steps = Steps(stream, serial=False, timing_only=True)
    timing = StreamTiming(MESH, len(steps.qnames), 2, serial=False)
    a = steps.queues[1 + PIPES.index("MTE2")][0]
    b = steps.queues[1 + len(PIPES) + PIPES.index("MTE2")][0]
    for flag in (*a.line.waits, *b.line.waits):
        timing.signal(flag, 0)
    a.start, b.start = timing.ready(a), timing.ready(b)
    assert (a.start, b.start) == (0, 0)
    first = timing.run(a, 0)
    second = timing.run(b, 0)
    expect_first, free = ddr_channel(MESH, 256, a.cycles, 0, 0)
    assert first == expect_first and second == ddr_channel(MESH, 256, b.cycles, 0, free)[0]
    assert second > first  # b waited for the channel
    flag = a.line.sets[0]
    timing.signal(flag, first)
    assert timing.is_set(flag.key) and timing.flag_time[flag.key] == first  # same core: no hops
    assert sync_cycles(MESH, (0, 0), (3, 4)) == 7 * MESH.mesh.noc_hop_latency
    timing.done(b, second)
    assert timing.now == second and timing.core_end == [0, second]


def test_serial_timing_starts_each_step_after_everything_before():
    stream = _stream()
    steps = Steps(stream, serial=True, timing_only=True)
    timing = StreamTiming(MESH, len(steps.qnames), 1, serial=True)
    timing.now = 100
    assert timing.start(steps.all[0]) == 100


def test_memories_track_liveness_and_release_spilled_regions_later():
    stream = _stream()
    steps = Steps(stream, serial=False, timing_only=False)
    memories = Memories(stream)
    memories.load(b"", {"x": np.ones(64, np.float32)}, timing_only=False)
    alloc, load = steps.all[0], steps.all[1]
    memories.make_live(alloc, "UB", 0, 256)
    assert memories.mem(0, "UB").allocs == {0: 256}
    with pytest.raises(
        StreamError,
        match=rf"^{FILE}:{alloc.line.lineno}: alloc: UB\[0x000000\+256\] overlaps the live region UB\[0x000000\+256\]",
    ):
        memories.make_live(alloc, "UB", 0, 256)
    ub = memories.mem(0, "UB")
    dst = load.writes[0]
    with pytest.raises(
        StreamError, match="copy: read of UB\\[0x000000\\] by MTE2: not written since its alloc"
    ):
        memories.check(load, ub, dst, write=False, spill=False, who="MTE2")
    memories.end_live(alloc, "UB", 0, 256)
    memories.release_at(50, 0, "UB", 0, 256)
    memories.release_until(49)
    assert not ub.dead[:64].any()  # a spill out's source stays live until the copy finishes
    memories.release_until(50)
    assert ub.dead.all() and ub.allocs == {}
    with pytest.raises(StreamError, match="region not live"):
        memories.check(load, ub, dst, write=True, spill=False, who="MTE2")


def test_races_need_a_flag_between_a_write_and_a_read():
    stream = _stream()
    steps = Steps(stream, serial=False, timing_only=False)
    races = RaceDetector(stream, steps)
    alloc, load, store = steps.all
    races.publish(alloc, races.begin(alloc))
    vc = races.begin(load)
    races.record(load)
    unordered = races.clock()  # a store whose wait did not carry the load's clock
    unordered[store.qid] = store.seq
    with pytest.raises(
        StreamError,
        match=rf"^{FILE}:{store.line.lineno}: copy: read of UB\[0x000000\] by MTE3 not ordered after its write by MTE2 at line {load.line.lineno}: missing flag",
    ):
        races.check(store, store.reads[0], unordered, write=False)
    races.publish(load, vc)
    races.check(store, store.reads[0], races.begin(store), write=False)


def test_reads_are_recorded_only_where_some_step_writes():
    stream = _stream()
    steps = Steps(stream, serial=False, timing_only=False)
    races = RaceDetector(stream, steps)
    _, load, store = steps.all
    ddr = races.segments[(-1, "DDR")]  # the load reads units 0..64, the store writes 64..128
    assert (ddr.starts, ddr.ends, ddr.written) == ([0, 64], [64, 128], [False, True])
    ub = races.segments[(0, "UB")]
    assert (ub.starts, ub.ends, ub.written) == ([0], [64], [True])
    races.record(load)
    assert list(races.state) == [(0, "UB", 0)]  # the load's write; x is never written
    assert races.state[(0, "UB", 0)].readers == {}  # the load reads nothing back
    races.record(store)  # the store reads UB, which the load writes
    written = races.state[(0, "UB", 0)]
    written.settled()  # the fills held (`_Writers.later`) put
    assert list(written.readers) == [store.qid]
    assert written.readers[store.qid].dtype == written.writer.dtype == np.uint16  # 2 bytes
    assert written.readers[store.qid][0] == store.seq
    assert written.writer[0] == races.mark(load.seq, load.qid)
    out = races.state[(-1, "DDR", 1)]  # y's segment: its arrays start at unit 64
    out.settled()
    assert out.start == 64 and len(out.writer) == 64
    assert out.writer[0] == races.mark(store.seq, store.qid)
    with pytest.raises(StreamError, match=r"copy: read of DDR\[0x000100\] by MTE2 not ordered "
                                          r"after its write by MTE3"):  # fmt: skip
        races.check(load, store.writes[0], races.clock(), write=False)  # a read of y, unordered
    races.check(load, load.reads[0], races.clock(), write=False)  # x: nothing to order after


def test_a_flags_clock_is_dropped_once_its_wait_has_joined_it():
    stream = _stream()
    steps = Steps(stream, serial=False, timing_only=False)
    races = RaceDetector(stream, steps)
    alloc, load, store = steps.all
    races.publish(alloc, races.begin(alloc))
    assert len(races.flag_vc) == 1
    races.publish(load, races.begin(load))
    assert len(races.flag_vc) == 1  # the alloc's went with the load's wait; the load's is held
    assert races.begin(store)[load.qid] == load.seq
    assert races.flag_vc == {}


def test_tally_counts_bytes_cycles_and_energy():
    stream = _stream()
    steps = Steps(stream, serial=False, timing_only=True)
    tally = Tally(MESH)
    load = steps.all[1]
    tally.instr(load.line.instr, "MTE2", load.cycles, load.energy)
    tally.instr(load.line.instr, "MTE2", load.cycles, load.energy)
    tally.event()
    assert tally.counters["instructions"] == 0 and tally.energy == 2 * load.energy
    tally.close()  # the runs are added up at the run's end
    c = tally.counters
    assert c["bytes"] == {"DDR->UB": 512} and c["instructions"] == 2 and c["events"] == 1
    assert c["opcodes"] == {"copy": 2} and tally.busy["MTE2"] == 2 * load.cycles
    assert tally.energy == 2 * load.energy


def test_line_numbers_in_the_stream_fixture():
    text = stream_text([("input", "x", 0, (64,)), ("output", "y", 256, (64,))], BODY, ddr_size=512)
    assert parse_stream(text, FILE).cores[0].lines[1].lineno == line_of(text, "MTE2 copy")


def test_recent_spans_send_only_possible_meetings_to_the_unit_compare():
    recent = _Recent()
    last = 2 * _RECENT + 1  # writes of units [8 * seq, 8 * seq + 8); the oldest ones dropped
    for seq in range(1, last + 1):
        recent.add(seq, 8 * seq, 8 * seq + 8)
    cut = last - _RECENT
    assert recent.cut == cut and len(recent.spans) == _RECENT
    assert not recent.may_meet(last, 0, 10_000)  # every write ordered before
    assert recent.may_meet(last - 1, 8 * last, 8 * last + 1)  # the newest, unordered
    assert not recent.may_meet(last - 1, 0, 8 * last)  # it, unordered, lies elsewhere
    assert recent.may_meet(cut, 8 * (cut + 1), 8 * (cut + 1) + 1)  # a kept one, unordered
    assert recent.may_meet(cut - 1, 8, 9)  # one dropped may be unordered: a compare, not a miss
    assert not recent.may_meet(cut, 8, 16)  # the dropped ones are ordered before
