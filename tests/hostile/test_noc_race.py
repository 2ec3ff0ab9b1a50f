"""A compiled mesh stream whose NoC read no longer waits for its producer's flag is refused."""

from __future__ import annotations

import re

import numpy as np
from hostile_util import MODELS

import npucc
from npucc.interp import run_stream
from npucc.ir.stream import StreamError
from npucc.ir.stream_parse import parse_stream

WAIT = re.compile(r" wait ctrl@(\d+),(\d+)>ctrl#(\d+)")


def _drop_flag(text: str, row: int, col: int, num: str, core: str) -> str:
    """The stream without cross-core flag #num: its wait on `core` and its set on row,col."""
    text = re.sub(rf" wait ctrl@{row},{col}>ctrl#{num}\b", "", text, count=1)
    return re.sub(rf" set ctrl>ctrl@{core}#{num}\b", "", text, count=1)


def test_reading_an_onchip_tensor_before_its_producers_flag_is_a_race():
    program = npucc.compile(MODELS / "residual_block.onnx", "mesh8x8", beam_width=8)
    text = program.stream
    assert "\ntensor onchip " in text
    inputs = {k: np.ones(s, np.float32) for k, s in program.inputs.items()}
    run_stream(parse_stream(text, "ok.cmd"), program.image, inputs)  # the original is clean
    lines = text.splitlines()
    core = ""
    refused = 0
    for i, line in enumerate(lines):
        if line.startswith("core "):
            core = ",".join(line.split()[1:])
        waits = WAIT.findall(line) if line.lstrip().startswith("barrier") else []
        # an import barrier that releases an MTE2 read of an on-chip tensor on this core
        released = re.findall(r" set ctrl>mte2#(\d+)", line)
        readers = [
            ln
            for ln in lines[i + 1 :]
            if any(re.search(rf" wait ctrl>mte2#{k}\b", ln) for k in released)
        ]
        if not waits or not any("src=NOC[" in ln for ln in readers):
            continue
        bad = text
        for row, col, num in waits:
            bad = _drop_flag(bad, int(row), int(col), num, core)
        try:
            run_stream(parse_stream(bad, "bad.cmd"), program.image, inputs)
        except StreamError as exc:
            message = str(exc)
        else:
            continue  # the read is still ordered after the writes through other flags
        assert re.search(r"read of NOC\[0x[0-9a-f]+\] by MTE2@\d+,\d+", message), message
        assert "missing flag" in message or "not written since its alloc" in message, message
        refused += 1
        if refused == 3:
            break
    assert refused, "no NoC read behind a cross-core flag"
