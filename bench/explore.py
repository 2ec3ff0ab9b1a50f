"""Benchmark: points per minute of `npucc explore` on a local Ray with 1 and 2 workers.

Usage: python bench/explore.py [--sweep SWEEP.toml] [--workers 1,2] [--repeat N]
The default sweep is BENCH_SWEEP below: 2 models x 24 configurations whose points take tenths
of a second (tests/explore/sweep48.toml has points of hundredths, where Ray's per-worker start
dominates). For each worker count it starts a local Ray instance with that many CPUs (the
start-up is timed separately), runs the whole sweep into a fresh results directory and prints
the points per minute of the sweep itself, then the speedup of each count over the first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from npucc.explore import load_sweep, run_sweep
from npucc.explore.runner import ray_session

ROOT = Path(__file__).resolve().parents[1]
BENCH_SWEEP = f"""
[sweep]
target = "davinci-core"

[[models]]
path = "{ROOT / "models" / "residual_block.onnx"}"

[[models]]
path = "{ROOT / "models" / "decoder_block.onnx"}"
input_shapes = {{ x = "1x64x256" }}

[axes]
"memory.UB" = [131072, 262144]
"cube.k0" = [8, 16]
"dma.DDR_L1.bandwidth" = [32, 64, 128]
"vector.width" = [64, 128]
"""


def measure(sweep_path: Path, workers: int) -> tuple[float, float, int]:
    """Seconds of Ray's start-up and of the sweep, and the points computed."""
    sweep = load_sweep(sweep_path)
    t0 = time.perf_counter()
    with ray_session(None, workers), tempfile.TemporaryDirectory() as out:
        t1 = time.perf_counter()
        run = run_sweep(sweep, out, max_parallel=workers)
        t2 = time.perf_counter()
    if run.failed:
        raise SystemExit(f"{run.failed} points failed; see the sweep")
    return t1 - t0, t2 - t1, run.computed


def main() -> int:
    """Run the benchmark and print one line per worker count, then the speedups."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sweep", type=Path, help="a sweep file (default: BENCH_SWEEP)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--repeat", type=int, default=1, help="runs per count (median kept)")
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    rates: dict[int, float] = {}
    if args.sweep is None:
        args.sweep = Path(tempfile.mkdtemp()) / "bench-sweep.toml"
        args.sweep.write_text(BENCH_SWEEP)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"sweep {args.sweep}; {os.cpu_count()} CPUs, load average {load}")
    print(f"{'workers':>7}  {'points':>6}  {'ray start s':>11}  {'sweep s':>8}  {'points/min':>10}")
    for workers in counts:
        runs = [measure(args.sweep, workers) for _ in range(args.repeat)]
        start = statistics.median(r[0] for r in runs)
        seconds = statistics.median(r[1] for r in runs)
        points = runs[0][2]
        rate = rates[workers] = points / seconds * 60
        print(f"{workers:>7}  {points:>6}  {start:>11.2f}  {seconds:>8.2f}  {rate:>10.1f}")
    base = counts[0]
    for workers in counts[1:]:
        print(f"speedup {workers} vs {base} workers: {rates[workers] / rates[base]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
