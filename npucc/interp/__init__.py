"""Reference interpreter of command streams: parse, execute in numpy, check, time."""

from npucc.interp.machine import RunResult, run_file, run_stream
from npucc.interp.parser import Stream, StreamError, load_stream, parse_stream

__all__ = [
    "RunResult",
    "Stream",
    "StreamError",
    "load_stream",
    "parse_stream",
    "run_file",
    "run_stream",
]
