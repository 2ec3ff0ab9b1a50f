"""Fuzzing the stream parser and interpreter with mutations of a valid compiled stream."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import npucc
from npucc.errors import NpuccError
from npucc.interp import run_stream
from npucc.ir.stream_parse import parse_stream

ROOT = Path(__file__).resolve().parents[2]
FILE = "fuzz.cmd"
PROGRAM = npucc.compile(ROOT / "models" / "small_cnn.onnx")
LINES = PROGRAM.stream.splitlines()
INPUTS = {
    name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for name, shape in PROGRAM.inputs.items()
}
HUGE = (0, 1, 3, 2**31, 2**32 + 4, 2**40, 2**63, 2**64 + 8, 10**30, 10**400)
NOISE = ' |#=[]+,>x0123456789abcdefDDRL1UBL0ACcoreendwaitsetallocfree"{}:-.\t\n\x00é'
_NUMBER = re.compile(r"\d+")
# an example may use at most this many bytes of traced memory (numpy arrays included): a few
# times the stream's DDR size and the on-chip tiers it can use, far below any huge header value
MEMORY_BOUND = 64 << 20


def _mutation(n: int) -> st.SearchStrategy[tuple]:
    """One edit of a stream of n lines (line indexes may exceed n: they wrap)."""
    index = st.integers(0, n - 1)
    return st.one_of(
        st.tuples(st.just("drop"), index),
        st.tuples(st.just("duplicate"), index, index),
        st.tuples(st.just("swap"), index, index),
        st.tuples(st.just("corrupt"), index, st.integers(0, 300), st.text(NOISE, max_size=6)),
        st.tuples(st.just("number"), index, st.integers(0, 40), st.sampled_from(HUGE)),
        st.tuples(st.just("shift"), index, st.integers(0, 40), st.integers(-64, 64)),
        st.tuples(st.just("truncate"), index, st.integers(0, 300)),
    )


def mutate(lines: list[str], edits: list[tuple]) -> str:
    """Apply edits (drop, duplicate, swap, corrupt, set or shift a number, truncate) to lines."""
    out = list(lines)
    for kind, i, *args in edits:
        if not out:
            break
        i %= len(out)
        if kind == "drop":
            del out[i]
        elif kind == "duplicate":
            out.insert(args[0] % (len(out) + 1), out[i])
        elif kind == "swap":
            j = args[0] % len(out)
            out[i], out[j] = out[j], out[i]
        elif kind == "corrupt":
            pos = args[0] % (len(out[i]) + 1)
            out[i] = out[i][:pos] + args[1] + out[i][pos + len(args[1]) :]
        elif kind in ("number", "shift"):
            numbers = list(_NUMBER.finditer(out[i]))
            if numbers:
                m = numbers[args[0] % len(numbers)]
                value = args[1] if kind == "number" else abs(int(m.group()) + args[1])
                out[i] = f"{out[i][: m.start()]}{value}{out[i][m.end() :]}"
        else:
            out[i] = out[i][: args[0] % (len(out[i]) + 1)]
    return "\n".join(out) + "\n"


def check_stream(text: str) -> str:
    """Parse and run text; 'ran' or 'rejected', or an AssertionError for anything else."""
    try:
        stream = parse_stream(text, FILE)
        inputs = {t.name: INPUTS.get(t.name) for t in stream.tensors.values() if t.kind == "input"}
        inputs = {n: x if x is not None else INPUTS["input"] for n, x in inputs.items()}
        run_stream(stream, PROGRAM.image, inputs)
    except NpuccError as exc:
        assert re.match(rf"{re.escape(FILE)}:\d+: ", str(exc)), str(exc)
        return "rejected"
    return "ran"


def test_the_unmutated_stream_runs():
    assert check_stream(PROGRAM.stream) == "ran"


def test_each_number_of_one_line_per_kind_set_huge():
    firsts: dict[str, int] = {}
    for i, line in enumerate(LINES):
        firsts.setdefault(" ".join(line.split()[:2]), i)
    for i in firsts.values():
        for k in range(len(_NUMBER.findall(LINES[i]))):  # 2**63 overflows int64
            check_stream(mutate(LINES, [("number", i, k, 2**63)]))


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(_mutation(len(LINES)), min_size=1, max_size=4))
def test_mutated_streams_run_or_are_rejected_with_file_and_line(edits):
    tracemalloc.start()
    try:
        check_stream(mutate(LINES, edits))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"{peak} bytes traced"
