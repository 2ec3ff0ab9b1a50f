"""`npucc run OUT.cmd -i NAME=FILE.npy --out DIR`: inputs checked against the stream."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from npucc.errors import NpuccError
from npucc.tools.cli_parsing import did_you_mean, make_dirs, safe_file_name

if TYPE_CHECKING:
    from npucc.interp import RunResult
    from npucc.ir.stream import Stream, StreamTensor


def load_inputs(items: Sequence[str]) -> dict[str, np.ndarray]:
    """Parse repeated `-i NAME=FILE.npy` options and load the arrays."""
    inputs: dict[str, np.ndarray] = {}
    for item in items:
        name, eq, file = item.partition("=")
        if not eq or not name or not file:
            raise NpuccError(f"bad -i '{item}' (expected NAME=FILE.npy)")
        try:
            inputs[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise NpuccError(f"cannot read input '{name}': {exc} ({file})") from None
    return inputs


def expected(tensor: StreamTensor) -> str:
    """`float32[1,3,32,32]`: the dtype and shape a stream input or output has on the host."""
    from npucc.ir.dtypes import host_dtype

    return f"{host_dtype(tensor.dtype)}[{','.join(map(str, tensor.shape))}]"


def match_inputs(
    stream: Stream, inputs: dict[str, np.ndarray], timing_only: bool = False
) -> dict[str, np.ndarray]:
    """The inputs checked against the stream's declared ones: a missing, unknown or misshapen
    input is an error naming what is expected; another float type is converted with a note on
    stderr, any other dtype refused."""
    from npucc.ir.dtypes import host_dtype

    declared = {t.name: t for t in stream.tensors.values() if t.kind == "input"}
    listing = ", ".join(f"{json.dumps(n)} {expected(t)}" for n, t in declared.items())
    for name in inputs:
        if name not in declared:
            hint = did_you_mean(name, tuple(declared))
            raise NpuccError(
                f"unknown input {json.dumps(name)}{hint}; the stream's inputs: "
                f"{listing} ({stream.path})"
            )
    matched = {}
    for name, tensor in declared.items():
        if name not in inputs:
            if timing_only:
                continue
            raise NpuccError(
                f"missing input {json.dumps(name)}: expected {expected(tensor)} "
                f"(give -i {name}=FILE.npy) ({stream.path})"
            )
        value, want = inputs[name], host_dtype(tensor.dtype)
        if value.shape != tensor.shape:
            raise NpuccError(
                f"input {json.dumps(name)} has shape {list(value.shape)}, expected "
                f"{expected(tensor)}"
            )
        same_kind = value.dtype.kind == want.kind or {value.dtype.kind, want.kind} <= {"i", "u"}
        if value.dtype != want and not same_kind:
            raise NpuccError(
                f"input {json.dumps(name)} has dtype {value.dtype}, expected {expected(tensor)}"
            )
        if value.dtype != want:
            print(
                f"npucc: note: input {json.dumps(name)} is {value.dtype}, converted to {want}",
                file=sys.stderr,
            )
            value = value.astype(want)
        matched[name] = value
    return matched


def cmd_run(args: argparse.Namespace) -> int:
    """`npucc run OUT.cmd -i NAME=FILE.npy --out DIR`."""
    from npucc.backend.schedule.roofline import stream_roofline
    from npucc.interp import load_image, run_stream
    from npucc.ir.stream_parse import load_stream

    if args.out is None and not args.timing_only:
        raise NpuccError("run needs --out DIR for the outputs (or --timing-only)")
    stream = load_stream(args.stream)
    image = load_image(args.stream, stream)
    inputs = match_inputs(stream, load_inputs(args.input), args.timing_only)
    result = run_stream(stream, image, inputs, timing_only=args.timing_only, image_checked=True)
    line = stream_roofline(stream, result.makespan)
    print(run_summary(result))
    print(f"{line.summary()} (the stream's own work: cube MACs as issued)")
    if args.per_core:
        print(per_core_lines(result))
    if args.out is not None and not args.timing_only:
        out_dir = Path(args.out)
        make_dirs(out_dir)
        for name, value in result.outputs.items():
            path = out_dir / f"{safe_file_name(name)}.npy"
            np.save(path, value)
            print(f"wrote {path} (output {json.dumps(name)}, {value.dtype}{list(value.shape)})")
    return 0


def run_summary(result: RunResult) -> str:
    """Makespan, energy, DRAM and NoC bytes, busy cycles per pipe; on a mesh, the pipes' sums
    over the cores with their utilisation."""
    dram = sum(n for path, n in result.counters["bytes"].items() if "DDR" in path)
    lines = [
        f"makespan {result.makespan} cycles",
        f"energy {result.energy:.6g} pJ",
        f"DRAM traffic {dram} bytes",
    ]
    noc = sum(n for path, n in result.counters["bytes"].items() if "NOC" in path)
    if noc:
        hops = result.counters["noc_byte_hops"]
        lines.append(f"NoC traffic {noc} bytes, {hops} byte-hops")
    cores = len(result.core_makespan)
    if cores <= 1:
        lines += [
            f"  {pipe:<7} {cycles} busy cycles" for pipe, cycles in result.pipe_cycles.items()
        ]
        return "\n".join(lines)
    (r, c), longest = max(result.core_makespan.items(), key=lambda kv: (kv[1], kv[0]))
    lines.append(f"cores {cores} (the last to finish: core {r},{c} at {longest} cycles)")
    lines.append(
        f"busy cycles per pipe, summed over the {cores} cores "
        f"(utilisation: the sum / ({cores} x makespan)):"
    )
    capacity = cores * max(result.makespan, 1)
    lines += [
        f"  {pipe:<7} {cycles} busy cycles ({100 * cycles / capacity:.1f}%)"
        for pipe, cycles in result.pipe_cycles.items()
    ]
    return "\n".join(lines)


def per_core_lines(result: RunResult) -> str:
    """Each core's makespan, one line per core."""
    return "\n".join(f"  core {r},{c}: {t} cycles" for (r, c), t in result.core_makespan.items())
