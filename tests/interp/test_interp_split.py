"""A checked run split in two (data here, checks in a forked worker) gives a serial run's
result and its first error (`event_loop._split`)."""

# ruff: noqa: E501  (stream lines written by hand are long)
import os

import pytest
from interp_helpers import run_text
from test_interp_errors import IMAGE, edit
from test_interp_programs import BODY, A, tiny

from npucc.interp import event_loop
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream


@pytest.fixture
def split_always(monkeypatch, tmp_path):
    """Every checked run splits; each run appends its process id to a file (read back by the
    returned function)."""
    monkeypatch.setattr(event_loop, "SPLIT_STEPS", 0)
    log = tmp_path / "pids"
    log.write_text("")
    machine = event_loop._Machine

    class Recording(machine):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def run(self, image, inputs):
            with log.open("a") as f:
                f.write(f"{os.getpid()}\n")
            return super().run(image, inputs)

    monkeypatch.setattr(event_loop, "_Machine", Recording)
    return lambda: [int(p) for p in log.read_text().split()]


def outcome(text: str, jobs: int):
    """The run's (makespan, counters, outputs) or its error message."""
    try:
        result = run_text(text, IMAGE, {"x": A}, jobs=jobs)
    except StreamError as exc:
        return str(exc)
    return result.makespan, result.counters, {k: v.tolist() for k, v in result.outputs.items()}


def test_a_good_run_splits_and_gives_the_serial_result(split_always):
    text = tiny()
    serial = outcome(text, 1)
    assert not isinstance(serial, str)
    assert outcome(text, 2) == serial
    pids = split_always()
    assert len(pids) == 3 and len(set(pids)) == 2  # serial, here, the worker
    assert not event_loop._splits(parse_stream(text), 1)


BAD = {
    "read before write": edit(
        "MTE2 copy dst=L1[0x000000+512] src=DDR[0x000200+512] dims=[128] "
        "dst_strides=[1] src_strides=[1]\n",
        "",
    ),
    "freed": edit(
        "free L1[0x000000+512] b=0 | wait mte1>ctrl#6", "free L1[0x000000+512] b=0"
    ).replace(" set mte1>ctrl#6", ""),
    "overlap": edit("alloc L1[0x000200+512] b=1", "alloc L1[0x000100+512] b=1"),
    "free mismatch": edit("free L1[0x000000+512] b=0", "free L1[0x000000+256] b=0"),
    "deadlock": edit("| set mte2>mte1#1", "").replace("wait mte2>mte1#1", "wait mte2>mte1#9"),
    "output": edit(
        "MTE3 copy dst=DDR[0x000400+1024] src=UB[0x000000+1024] dims=[256]",
        "MTE3 copy dst=DDR[0x000400+512] src=UB[0x000000+512] dims=[128]",
    ),
    # the cube reads L0A unordered (a check, the worker's) and the last free waits forever
    "race then deadlock": edit(" set mte1>cube#2", "")
    .replace(" | wait mte1>cube#2", " |")
    .replace(" set mte3>ctrl#5", "")
    .replace("wait mte3>ctrl#5", "wait mte3>ctrl#9"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_run_fails_as_the_serial_run(split_always, name):
    text = BAD[name]
    serial = outcome(text, 1)
    assert isinstance(serial, str), serial
    assert outcome(text, 2) == serial
    assert len(set(split_always())) == 2


def test_a_gather_keeps_its_checks_here(monkeypatch):
    assert "gather" not in BODY  # (the split's other tests hold no gather)
    monkeypatch.setattr(event_loop, "SPLIT_STEPS", 0)
    assert event_loop._splits(parse_stream(tiny()), 2)
