"""Cost model vs interpreter: compile on a mesh with HyperCut, time the stream, print errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import npucc
from npucc.backend.hypercut.bench import MODELS
from npucc.interp import parse_stream, run_stream

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("small_cnn", "residual_block", "transformer_encoder", "resnet50")


def model_path(name: str) -> Path:
    """A zoo model by bench name, else models/NAME.onnx."""
    return MODELS.get(name, ROOT / "models" / f"{name}.onnx")


def main() -> None:
    """One line per model: model and interpreted latency and energy, and the model's error."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", default=",".join(DEFAULT))
    ap.add_argument("--target", default="mesh8x8")
    ap.add_argument("--beam-width", type=int, default=8)
    args = ap.parse_args()
    for name in args.models.split(","):
        program = npucc.compile(
            model_path(name), args.target, search="hypercut", beam_width=args.beam_width
        )
        est = program.stats["hypercut"]
        inputs = {k: np.zeros(s, np.float32) for k, s in program.inputs.items()}
        run = run_stream(
            parse_stream(program.stream, "<program>"), program.image, inputs, timing_only=True
        )
        lat, energy = est["latency_cycles"], est["energy_pj"]
        print(
            f"{name:20s} latency model={lat:.4g} interp={run.makespan:.4g}"
            f" err={lat / run.makespan - 1:+.0%}  energy model={energy:.4g}"
            f" interp={run.energy:.4g} err={energy / run.energy - 1:+.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
