"""Soak: compile and check every model in models/ for N rounds in one process, tracking memory.

Usage: python bench/soak.py [--rounds N] [--models DIR] [--target davinci-core]
Each round compiles every model, interprets it on seeded random inputs and compares with
onnxruntime; after the round it records the process's resident memory (RSS). It prints one line
per round, the growth after round 1 and the growth from round 2 on (caches warm up in the
first rounds; a leak keeps growing); it exits with 1 if a check fails.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import npucc
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.frontend.onnx_import import load_model

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"mlp.onnx": {"x": (2, 64)}}


def rss_bytes() -> int:
    """The process's current resident set size (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def check_model(path: Path, target: str) -> bool:
    """Compile, interpret and compare one model; True when every output passes."""
    shapes = SHAPES.get(path.name, {})
    model = load_model(path, shapes)
    program = npucc.compile(model, target, "original", shapes)
    inputs = random_inputs(program.inputs, 0)
    result = program.execute(inputs)
    return all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))


def main() -> int:
    """Run the rounds and print RSS per round and its growth after the first."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", default=str(ROOT / "models"))
    parser.add_argument("--target", default="davinci-core")
    args = parser.parse_args()
    models = sorted(Path(args.models).glob("*.onnx"))
    rss: list[int] = []
    failed = 0
    for round_ in range(1, args.rounds + 1):
        start = time.perf_counter()
        failed += sum(not check_model(path, args.target) for path in models)
        gc.collect()
        rss.append(rss_bytes())
        print(
            f"round {round_}: {len(models)} models in {time.perf_counter() - start:.1f} s,"
            f" RSS {rss[-1] / 2**20:.1f} MiB, failed checks so far {failed}",
            flush=True,
        )
    mib = 2**20
    print(f"growth after round 1: {(rss[-1] - rss[0]) / mib:+.1f} MiB at the end, "
          f"{(max(rss[1:], default=rss[0]) - rss[0]) / mib:+.1f} MiB at most")  # fmt: skip
    if len(rss) > 2:  # caches fill in round 2; a leak keeps growing after it
        print(f"from round 2 to round {len(rss)}: {(rss[-1] - rss[1]) / mib:+.1f} MiB")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
