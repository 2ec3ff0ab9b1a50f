"""Benchmark: compile and interpret a model zoo network on one core; print phase times.

Usage: python bench/compile.py [--model resnet50] [--target davinci-core] [--repeat N]
Prints the seconds of each compiler pass, the interpretation, the tile operations, the
predicted and interpreted makespan, and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import onnx

import npucc
from npucc.checking import compare, random_inputs, randomize_weights, run_onnxruntime

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def run_once(model: onnx.ModelProto, target: str, schedule: str) -> dict[str, float]:
    """Compile and interpret once; returns seconds per phase and figures."""
    times: dict[str, float] = {}
    marks: list[tuple[str, float]] = []

    def on_pass(name: str) -> None:
        marks.append((name, time.perf_counter()))

    start = time.perf_counter()
    program = npucc.compile(model, target, schedule, on_pass=on_pass)
    end = time.perf_counter()
    for (name, t0), (_, t1) in zip(marks, [*marks[1:], ("", end)], strict=True):
        times[name] = t1 - t0
    times["compile"] = end - start
    inputs = random_inputs(program.inputs, 0)
    t0 = time.perf_counter()
    result = program.execute(inputs)
    times["interpret"] = time.perf_counter() - t0
    worst = max(c.rel for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    times["tile_ops"] = program.stats["tile_ops"]
    times["predicted"] = program.stats["predicted_makespan"]
    times["interpreted"] = result.makespan
    times["max_rel_error"] = worst
    return times


def main() -> int:
    """Run the benchmark and print a table of medians."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--target", default="davinci-core")
    parser.add_argument("--schedule", default="dan")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    path = Path(args.model)
    if not path.exists():
        path = LIGHT / f"light_{args.model}.onnx"
    model = randomize_weights(onnx.load(str(path)), seed=0)
    runs = [run_once(model, args.target, args.schedule) for _ in range(args.repeat)]
    print(f"model {path.name} target {args.target} schedule {args.schedule} runs {len(runs)}")
    for key in runs[0]:
        values = [r[key] for r in runs]
        median = statistics.median(values)
        unit = "s" if key not in ("tile_ops", "predicted", "interpreted", "max_rel_error") else ""
        print(f"  {key:<18} {median:.4g}{unit}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  {'peak_memory':<18} {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
