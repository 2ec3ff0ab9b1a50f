"""Benchmark: each model's distance to the roofline on one core, and DAN against the original.

Usage: python bench/roofline.py [--models resnet50,squeezenet,...] [--precision P] [--out FILE.json]

For ResNet-50, SqueezeNet 1.0 and Inception v1 (onnx's light zoo, weights randomized with
seed 0), MobileNet v2 (bench/mobilenet_v2.py) and the BERT-base encoder of models/
(transformer_encoder.onnx), compiled for davinci-core: the interpreted makespan (timing only),
the bounds, the efficiency and the DRAM bytes against the minimum (npucc's roofline,
Program.stats["roofline"], docs/roofline.md), and the four DAN metrics (peak L1+UB, extra DDR
bytes, spills, makespan) of the dan and the original schedules (DAN overlapping layers within
its plan's L1+UB peak, the default `overlap_peak=1`), DAN's makespan and peak with its
overlap bounded only by the plan's addresses (`overlap_peak=inf`), and the peak floor (lower
bounds on the L1+UB peak of every order of the DAG, with spills and without; peak_floor.py).
`--precision fp16` compiles the float models at fp16; `--precision int8` first quantizes
each (`npucc.checking.quantize`, seed 0: onnxruntime's quantize_static, per-channel weights)
and compiles the QDQ model at int8; the bound is computed at that precision. Prints a table;
writes JSON (default bench/roofline_results.json, or roofline_results_PRECISION.json for fp16
and int8).
Deterministic: the same code gives the same file.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import onnx

import npucc
from npucc.backend.schedule.roofline import at_makespan
from npucc.checking import quantize, random_inputs, randomize_weights
from npucc.frontend.onnx_import import load_model

ROOT = Path(__file__).resolve().parents[1]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TARGET = "davinci-core"
METRICS = ("peak_l1_ub", "extra_ddr", "spills", "predicted_makespan")


def _light(name: str) -> Callable[[], onnx.ModelProto]:
    return lambda: randomize_weights(load_model(LIGHT / f"light_{name}.onnx"), seed=0)


def _mobilenet() -> onnx.ModelProto:
    sys.path.insert(0, str(Path(__file__).parent))
    from mobilenet_v2 import build

    return build(seed=0)


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": _light("resnet50"),
    "squeezenet": _light("squeezenet"),
    "inception_v1": _light("inception_v1"),
    "mobilenet_v2": _mobilenet,
    "bert_encoder": lambda: load_model(ROOT / "models" / "transformer_encoder.onnx"),
}


def measure(model: onnx.ModelProto, precision: str = "fp32") -> dict[str, object]:
    """Compile with dan and original, interpret dan's (timing only); the figures."""
    if precision == "int8":
        model = quantize(model, seed=0)
    dan = npucc.compile(model, TARGET, "dan", precision=precision, peak_floor=True)
    result = dan.execute(random_inputs(dan.inputs, 0), timing_only=True)
    if result.makespan != dan.stats["predicted_makespan"]:
        raise AssertionError(f"interpreted {result.makespan} != predicted")
    line = at_makespan(dan.stats["roofline"], result.makespan)
    original = npucc.compile(model, TARGET, "original", precision=precision)
    # DAN overlapping layers as far as its memory plan's addresses allow (above its peak)
    free = npucc.compile(model, TARGET, "dan", precision=precision, overlap_peak=math.inf)
    return {
        "roofline": line.as_dict(),
        "dan": {k: dan.stats[k] for k in METRICS},
        "original": {k: original.stats[k] for k in METRICS},
        "dan_unbounded": {k: free.stats[k] for k in METRICS},
        "peak_floor": dan.stats["peak_floor"],
    }


def table(results: dict[str, dict[str, object]]) -> str:
    """The results as a Markdown table."""
    head = (
        "| model | makespan | bound | compute | memory | efficiency | DRAM ÷ min | busiest pipe"
        " | DAN vs original: peak L1+UB | extra DDR | spills | makespan"
        " | DAN at overlap_peak inf: makespan (peak L1+UB) | peak floor: any order (unspilled) |"
    )
    rows = [head, "|" + "---|" * 14]
    for name, r in results.items():
        line, dan, orig = r["roofline"], r["dan"], r["original"]  # type: ignore[index]
        free, floor = r["dan_unbounded"], r["peak_floor"]  # type: ignore[index]
        ratio = "n/a" if line["ddr_ratio"] is None else f"{line['ddr_ratio']:.2f}×"
        pair = [f"{dan[k]:,} vs {orig[k]:,}" for k in METRICS]
        rows.append(
            f"| {name} | {line['makespan']:,} | {line['bound']:,} ({line['bound_by']}) "
            f"| {line['compute']:,} | {line['memory']:,} | {line['efficiency']:.3f} | {ratio} "
            f"| {line['pipe_name']} {line['pipe'] / line['makespan']:.0%} | "
            + " | ".join(pair)
            + f" | {free['predicted_makespan']:,} ({free['peak_l1_ub']:,})"
            + f" | {floor['any']:,} ({floor['unspilled']:,}) |"
        )
    return "\n".join(rows)


def main() -> int:
    """Measure the models, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--precision", choices=("fp32", "fp16", "int8"), default="fp32")
    parser.add_argument("--out")
    args = parser.parse_args()
    suffix = "" if args.precision == "fp32" else f"_{args.precision}"
    out = Path(args.out or Path(__file__).with_name(f"roofline_results{suffix}.json"))
    results = {}
    for name in args.models.split(","):
        print(f"{name} ...", file=sys.stderr, flush=True)
        results[name] = measure(MODELS[name](), args.precision)
    print(table(results))
    out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
