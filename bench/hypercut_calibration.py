"""Cost models vs interpreter: compile on a mesh with HyperCut, time the stream, print errors.

Both estimates of the compiled plan are printed: `exec` (the execution-faithful estimate the
`hypercut` pass searches with, npucc/backend/estimate/exec_cost.py) and `analytic` (the
SET-aligned mesh model, npucc/backend/hypercut/set_model.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import npucc
from npucc.interp import run_stream
from npucc.ir.dtypes import INDEX_DTYPE
from npucc.ir.stream_parse import parse_stream
from npucc.tools.bench_hypercut import MODELS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("small_cnn", "residual_block", "lrn_concat", "mlp", "transformer_encoder", "resnet50")


def model_path(name: str) -> Path:
    """A zoo model by bench name, a path to an .onnx file, else models/NAME.onnx."""
    if name.endswith(".onnx"):
        return Path(name)
    return MODELS.get(name, ROOT / "models" / f"{name}.onnx")


def main() -> None:
    """Per model: both estimates of latency and energy, the interpreted ones, and the errors."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--target", default="mesh8x8")
    ap.add_argument("--beam-width", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1, help="for models with a symbolic batch")
    args = ap.parse_args()
    for name in args.models.split(","):
        start = time.perf_counter()
        try:
            program = npucc.compile(
                model_path(name),
                args.target,
                search="hypercut",
                beam_width=args.beam_width,
                batch=args.batch,
            )
        except npucc.NpuccError:  # a static batch dimension: compile it as it is
            program = npucc.compile(
                model_path(name), args.target, search="hypercut", beam_width=args.beam_width
            )
        compiled = time.perf_counter() - start
        est = program.stats["hypercut"]
        stream = parse_stream(program.stream, "<program>")
        inputs = {
            t.name: np.zeros(t.shape, np.int64 if t.dtype == INDEX_DTYPE else np.float32)
            for t in stream.tensors.values()
            if t.kind == "input"
        }
        run = run_stream(stream, program.image, inputs, timing_only=True)
        rows = [
            ("exec", est["latency_cycles"], est["energy_pj"]),
            ("analytic", est["analytic_latency_cycles"], est["analytic_energy_pj"]),
        ]
        for kind, lat, energy in rows:
            print(
                f"{name:20s} {kind:8s} latency model={lat:.6g} interp={run.makespan:.6g}"
                f" err={lat / run.makespan - 1:+.1%}  energy model={energy:.6g}"
                f" interp={run.energy:.6g} err={energy / run.energy - 1:+.1%}",
                flush=True,
            )
        print(
            f"{name:20s} compile {compiled:.1f} s (search {est['search_s']:.2f} s),"
            f" interpret {time.perf_counter() - start - compiled:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
