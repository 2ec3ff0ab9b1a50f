"""Coverage-guided fuzzing of the stream parser and interpreter with atheris (libFuzzer).

Usage: python tests/fuzz/fuzz_stream.py [CORPUS_DIR] [libFuzzer options, e.g. -runs=100000]
The corpus starts from the stream of models/small_cnn.onnx. Every input must run or be rejected
with an NpuccError that starts with `fuzz.cmd:LINE:`; anything else is a crash that atheris
reports with the input that caused it. Not collected by pytest (needs `pip install atheris`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import atheris
import numpy as np

with atheris.instrument_imports():
    from npucc.errors import NpuccError
    from npucc.interp import run_stream
    from npucc.ir.stream_parse import parse_stream

import npucc

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = npucc.compile(ROOT / "models" / "small_cnn.onnx")
_WHERE = re.compile(r"fuzz\.cmd:\d+: ")


def test_one_input(data: bytes) -> None:
    """Parse and run one input; raise on anything but a run or a `fuzz.cmd:LINE:` rejection."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # load_stream refuses undecodable files before parsing
    try:
        stream = parse_stream(text, "fuzz.cmd")
        inputs = {
            t.name: np.zeros(t.shape, np.float32)
            for t in stream.tensors.values()
            if t.kind == "input"
        }
        run_stream(stream, PROGRAM.image, inputs)
    except NpuccError as exc:
        if not _WHERE.match(str(exc)):
            raise AssertionError(f"rejection without file:line: {exc}") from None


def main() -> None:
    """Seed the corpus with the compiled stream and start libFuzzer."""
    args = list(sys.argv)
    if len(args) > 1 and not args[1].startswith("-"):
        corpus = Path(args[1])
        corpus.mkdir(parents=True, exist_ok=True)
        (corpus / "small_cnn.cmd").write_text(PROGRAM.stream)
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
