"""Reference interpreter of command streams: execute in numpy, check, time (streams: npucc.ir)."""

from npucc.interp.event_loop import RunResult, load_image, run_file, run_stream

__all__ = ["RunResult", "load_image", "run_file", "run_stream"]
