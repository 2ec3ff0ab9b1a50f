"""One sweep point, run in a Ray task: compile, then a timing-only (or checked) interpretation."""

from __future__ import annotations

import time
from typing import Any

import onnx

from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.compiler import compile as compile_model
from npucc.errors import NpuccError
from npucc.interp import run_stream
from npucc.ir.stream_parse import parse_stream
from npucc.target import target_from_dict

INPUT_SEED = 0  # seed of the random inputs of every point


def evaluate(model_bytes: bytes, target: dict[str, Any], options: dict[str, Any]) -> dict:
    """Status (ok, error, mismatch), error, cycles, energy and seconds of one point; no raise."""
    # options["check"]: run with data and per-access checks, compare outputs with onnxruntime
    result: dict[str, Any] = {"status": "ok", "error": "", "compile_s": 0.0, "run_s": 0.0}
    began = time.perf_counter()
    try:
        _run(model_bytes, target, options, result, began)
    except Exception as exc:  # a failed point is recorded and the sweep goes on
        what = str(exc) if isinstance(exc, NpuccError) else f"{type(exc).__name__}: {exc}"
        result.update(status="error", error=" ".join(what.split()))
        if not result["compile_s"]:
            result["compile_s"] = time.perf_counter() - began
    return result


def _run(
    model_bytes: bytes,
    target: dict[str, Any],
    options: dict[str, Any],
    result: dict[str, Any],
    began: float,
) -> None:
    model = onnx.load_from_string(model_bytes)
    shapes = {k: tuple(v) for k, v in options["input_shapes"].items()}
    # NOTE: jobs=1: the sweep's points already run in parallel (Ray tasks, one CPU each)
    program = compile_model(
        model, target_from_dict(target, "sweep"), options["schedule"], shapes, jobs=1
    )
    compiled = time.perf_counter()
    result["compile_s"] = compiled - began
    inputs = random_inputs(program.inputs, INPUT_SEED)
    stream = parse_stream(program.stream, "<point>")
    check = bool(options["check"])
    run = run_stream(stream, program.image, inputs, check=check, timing_only=not check)
    result["run_s"] = time.perf_counter() - compiled
    result["latency_cycles"] = run.makespan
    result["energy_pj"] = run.energy
    if check:
        bad = [c for c in compare(run.outputs, run_onnxruntime(model, inputs)) if not c.ok]
        if bad:
            result["status"] = "mismatch"
            result["error"] = "; ".join(
                f"output '{c.name}' max |error| {c.max_abs:.3g} vs max |reference| {c.max_ref:.3g}"
                for c in bad
            )
