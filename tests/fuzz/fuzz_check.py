"""The differential property of one (model, target) example, and what the example reached.

`check_example` compiles a model for a target and returns an `Outcome`:
- a refusal must be one `NpuccError` line naming a tier and a true need ("T too small ...
  (N bytes needed, M available)" with N > M), and the target with T enlarged to N must get
  past T (it compiles, or is refused for another tier, which is checked the same way); an
  ordering-only scheduler (dan-mpas) may instead be refused because its layout overflows or
  no order keeps one live buffer per L0 tier (its rule 7);
- a compiled program must run in the strict interpreter without a check failure, match
  onnxruntime within `npucc check`'s tolerance, have predicted == interpreted makespan, and
  compile to the same bytes twice.
Any other result is a failure with a class (`Outcome.failure`) and a one-line detail.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field

import onnx

import npucc
from npucc.checking import (
    compare,
    ill_conditioned,
    random_inputs,
    reference_spread,
    run_onnxruntime,
    within_spread,
)
from npucc.errors import NpuccError
from npucc.ir.schedule import UNBOUNDED
from npucc.target import Target

FIT = re.compile(r"(\w+) too small for .* \((\d+) bytes needed, (\d+) available\)$")
CROSS_CORE_FLAG = re.compile(r"(?:set|wait) \w+(?:@\d+,\d+>\w+|>\w+@\d+,\d+)#")
MAX_ENLARGE = 8  # tiers enlarged one after another before a refusal counts as untrue


@dataclass(slots=True)
class Outcome:
    """What one example did: compiled or refused, the paths it reached, or how it failed."""

    failure: str = ""  # failure class ("" when the property held)
    detail: str = ""
    refused: str = ""  # the tier named by a (true) refusal of the original target
    spilled: bool = False
    noc: bool = False  # a `noc` copy moved an on-chip tensor between cores
    cross_core: bool = False  # flags between cores (a tensor handed over through DDR or NoC)
    cores: int = 1
    seconds: float = 0.0
    enlarged: list[str] = field(default_factory=list)  # tiers enlarged to check refusals

    @property
    def ok(self) -> bool:
        """The property held."""
        return not self.failure


def _fail(out: Outcome, kind: str, detail: str) -> Outcome:
    out.failure, out.detail = kind, " ".join(detail.split())[:300]
    return out


def reference(model: onnx.ModelProto, seed: int) -> tuple[dict, dict]:
    """Seeded inputs and onnxruntime's outputs (the oracle); the model must be valid."""
    onnx.checker.check_model(model, full_check=True)
    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim) for v in model.graph.input
    }
    inputs = random_inputs(shapes, seed, model)
    return inputs, run_onnxruntime(model, inputs)


def check_example(
    model: onnx.ModelProto, target: Target, schedule: str = "dan", seed: int = 0
) -> Outcome:
    """Run the property on one example compiled with the `schedule` method (module docstring)."""
    start = time.perf_counter()
    out = Outcome()
    try:
        inputs, ref = reference(model, seed)
    except Exception as exc:  # the generator made a model onnx or onnxruntime rejects
        _fail(out, f"generator:{type(exc).__name__}", str(exc))
        return out
    try:
        _check(model, target, schedule, inputs, ref, out)
    except Exception as exc:  # anything but an NpuccError refusal is a bug
        where = traceback.extract_tb(exc.__traceback__)[-1]
        _fail(out, f"crash:{type(exc).__name__}", f"{exc} at {where.filename}:{where.lineno}")
    out.seconds = time.perf_counter() - start
    return out


def _check(
    model: onnx.ModelProto, target: Target, schedule: str, inputs: dict, ref: dict, out: Outcome
) -> None:
    current = target
    for attempt in range(MAX_ENLARGE + 1):
        try:
            program = npucc.compile(model, current, schedule)
        except NpuccError as exc:
            text = str(exc)
            if schedule in UNBOUNDED and text.startswith(f"scheduler '{schedule}' "):
                # an ordering-only method's layout overflowed a tier, or it found no order
                # keeping one live buffer per L0 tier (rule 7)
                out.refused = "unbounded"
                return
            fit = FIT.search(text)
            if "\n" in text or fit is None:
                _fail(out, "refusal:unclaimed", text)
                return
            tier, need, have = fit.group(1), int(fit.group(2)), int(fit.group(3))
            if need <= have or have != current.memory.capacity(tier):
                _fail(out, "refusal:untrue", text)
                return
            if tier in out.enlarged and current.memory.capacity(tier) >= need:
                _fail(out, "refusal:untrue", f"{text} (after enlarging {tier})")
                return
            if attempt == 0:
                out.refused = tier
            if attempt == MAX_ENLARGE:
                _fail(out, "refusal:endless", text)
                return
            out.enlarged.append(tier)
            current = current.with_capacity(**{tier: need})
            continue
        _check_program(model, current, schedule, program, inputs, ref, out)
        return


def _check_program(
    model: onnx.ModelProto,
    target: Target,
    schedule: str,
    program: npucc.compiler.Program,
    inputs: dict,
    ref: dict,
    out: Outcome,
) -> None:
    out.cores = target.cores
    out.spilled = program.stats.get("spills", 0) > 0
    out.cross_core = CROSS_CORE_FLAG.search(program.stream) is not None
    try:
        result = program.execute(inputs)
    except NpuccError as exc:
        _fail(out, "interp:check", str(exc))
        return
    out.noc = result.counters["noc_byte_hops"] > 0
    bad = [c for c in compare(result.outputs, ref) if not c.ok]
    if bad:  # as npucc check judges: a difference an ill-conditioned reference explains is none
        spread = reference_spread(model, inputs, ref)
        bad = [
            c
            for c in bad
            if not (
                c.name in spread
                and ill_conditioned(c, spread[c.name])
                and within_spread(c, result.outputs.get(c.name), ref[c.name], spread[c.name])
            )
        ]
    if bad:
        c = bad[0]
        _fail(
            out, "mismatch", f"{c.name}: max abs error {c.max_abs:.3e}, max |ref| {c.max_ref:.3e}"
        )
        return
    predicted = program.stats.get("predicted_makespan")
    if predicted != result.makespan:
        _fail(out, "makespan", f"predicted {predicted}, interpreted {result.makespan}")
        return
    again = npucc.compile(model, target, schedule)
    if again.stream != program.stream or again.image != program.image:
        _fail(out, "nondeterministic", "a second compile gave different bytes")
