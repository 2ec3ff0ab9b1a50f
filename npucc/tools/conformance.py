"""`npucc conformance`: compile and interpret every ONNX backend test case; classify the results.

Cases are the node tests of `onnx.backend.test.case.node.collect_testcases()` and the model data
shipped in the onnx wheel (`onnx/backend/test/data/{simple,real,pytorch-*}` with their expected
outputs, and the light model zoo with seeded random weights and onnxruntime as the reference).
Each case runs isolated in a worker process with a time limit, and ends as one of:
  pass            npucc's outputs match the expected ones
  unsupported     npucc refused the model with a clean NpuccError
  wrong           npucc ran it but the numbers (or shapes) differ
  internal_error  any other exception, a timeout or a crashed worker
The same case under onnxruntime is reported as a reference column (pass / fail / wrong).

`--precision` (one or a comma-separated list, each run in turn) compiles every case at:
  fp32  the float32 tolerance below (RTOL, ATOL), element by element
  fp16  the fp16 verdict of `npucc check` (`checking.fp16_rtol` of the model's reduction length,
        against max |expected|); non-finite expected values must be matched exactly
  int8  the quantized cases only (an operator or node in QUANTIZED_CASE_OPS; every other case
        is a float model, n/a at int8 and not run); outputs compared exactly
  auto  every case at `precision="auto"`: int8 for a quantized model (compared exactly), the
        target's float precision otherwise (that precision's rule)
Every output that is not a float type is compared exactly at every precision.

npucc compiles float32 models with static shapes, so a node case's non-float inputs (shapes,
indices, pads, axes, ...) are frozen into initializers holding the case's values; when npucc
then asks for a constant operand (Conv weights, Clip bounds, ...), every input but the first
is frozen too and the message says so. A case compiled at int8 freezes every input but the
first from the start: the int8 path needs constant weights and quantization parameters.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from npucc.compiler import QUANTIZED_OPS
from npucc.tools.cli_parsing import COMMANDS

STATUSES = ("pass", "unsupported", "wrong", "internal_error")
PRECISIONS = ("fp32", "fp16", "int8", "auto")
# the cases `--precision int8` runs: the quantized models (those `auto` compiles at int8) and
# DynamicQuantizeLinear, a float model whose outputs are quantized
QUANTIZED_CASE_OPS = QUANTIZED_OPS | {"DynamicQuantizeLinear"}
RTOL, ATOL = 1e-3, 1e-4  # a case passes when |got - expected| <= ATOL + RTOL * |expected|
CASE_TIMEOUT = 60  # seconds per node case (compile + interpret)
# seconds per whole-model case: VGG-19 (768k tile operations) takes ~150 s on a quiet 2-core
# machine and ~400 s on a shared one; a timeout is an internal error, so leave headroom
MODEL_TIMEOUT = 900
MAX_ELEMS = 4_000_000  # cases whose inputs and outputs exceed this many elements are skipped
DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data"
MODEL_SUITES = ("simple", "real", "pytorch-converted", "pytorch-operator")


@dataclass(slots=True)
class Case:
    """One conformance case: a model, its input sets and their expected outputs."""

    name: str
    op: str  # operator under test ("model" for whole-model cases)
    model: onnx.ModelProto
    data: list[tuple[dict[str, np.ndarray], list[np.ndarray] | None]]  # None: ask onnxruntime


@dataclass(slots=True)
class Result:
    """The outcome of one case under npucc and under onnxruntime."""

    name: str
    op: str
    status: str
    message: str
    ort: str  # onnxruntime's status on the same case: pass, wrong or fail
    seconds: float
    precision: str = "fp32"


class _Timeout(Exception):
    """The case exceeded CASE_TIMEOUT."""


class _NotTensor(Exception):
    """A case input is a sequence or an optional, not a tensor."""


def _node_cases() -> list[Case]:
    """The node test cases, each labelled with the operator it tests."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        raw = collect_testcases(None)
    single: dict[str, str] = {}
    for c in raw:
        # node test cases always carry a model and data sets (only model-zoo cases do not)
        assert c.model is not None and c.data_sets is not None, c.name
        if len(c.model.graph.node) == 1:
            single[c.name] = c.model.graph.node[0].op_type
    cases = []
    for c in raw:
        assert c.model is not None and c.data_sets is not None  # checked above
        base = c.name.split("_expanded")[0]
        op = single.get(c.name) or single.get(base) or _guess_op(c.model)
        data: list[tuple[dict[str, np.ndarray], list[np.ndarray] | None]] = [
            (_feeds(c.model, ins), [_array(v) for v in outs]) for ins, outs in c.data_sets
        ]
        cases.append(Case(c.name, op, c.model, data))
    return cases


def _guess_op(model: onnx.ModelProto) -> str:
    ops = [n.op_type for n in model.graph.node]
    return ops[-1] if ops else "none"


def _feeds(model: onnx.ModelProto, values: Sequence[Any]) -> dict[str, Any]:
    inits = {i.name for i in model.graph.initializer}
    names = [v.name for v in model.graph.input if v.name not in inits]
    return dict(zip(names, [_array(v) for v in values], strict=False))


def _array(value: Any) -> Any:
    """A numpy array for a tensor value (numpy scalar or TensorProto); others unchanged."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def _model_cases() -> list[Case]:
    """The model directories of the wheel's test data, and the light model zoo."""
    cases = []
    for suite in MODEL_SUITES:
        for d in sorted((DATA_DIR / suite).glob("*/")):
            if (d / "model.onnx").exists():
                cases.append(Case(f"{suite}/{d.name}", "model", None, []))  # type: ignore[arg-type]
    for path in sorted((DATA_DIR / "light").glob("*.onnx")):
        cases.append(Case(f"light/{path.stem}", "model", None, []))  # type: ignore[arg-type]
    return cases


def _load_model_case(case: Case) -> None:
    """Read a model case's model and data (deferred to the worker that runs it)."""
    suite, name = case.name.split("/", 1)
    if suite == "light":
        from npucc.checking import random_inputs, randomize_weights

        model = randomize_weights(onnx.load(str(DATA_DIR / "light" / f"{name}.onnx")))
        case.model = model
        shapes = {}
        inits = {i.name for i in model.graph.initializer}
        for v in model.graph.input:
            if v.name not in inits:
                shapes[v.name] = tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        case.data = [(random_inputs(shapes), None)]
        return
    d = DATA_DIR / suite / name
    case.model = onnx.load(str(d / "model.onnx"))
    for ds in sorted(d.glob("test_data_set_*")):
        ins = [_read_pb(p) for p in sorted(ds.glob("input_*.pb"), key=_pb_index)]
        outs = [_read_pb(p) for p in sorted(ds.glob("output_*.pb"), key=_pb_index)]
        case.data.append((_feeds(case.model, ins), outs))


def _pb_index(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def _read_pb(path: Path) -> Any:
    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(path.read_bytes())
        return numpy_helper.to_array(tensor)
    except Exception:  # sequences and optionals: not a tensor
        return None


def all_cases() -> list[Case]:
    """Every conformance case, node cases first."""
    return _node_cases() + _model_cases()


def _tensors(ins: dict[str, Any], outs: list[Any] | None) -> bool:
    """True when every input and expected output is a tensor (not a sequence or optional)."""
    return all(isinstance(v, np.ndarray) for v in (*ins.values(), *(outs or [])))


def _elems(data: list[tuple[dict[str, Any], Any]]) -> int:
    total = 0
    for ins, outs in data:
        for v in (*ins.values(), *(outs or [])):
            total += int(np.asarray(v).size) if isinstance(v, np.ndarray) else 0
    return total


def _close(got: Any, want: Any) -> str:
    """'' when `got` matches `want` within the tolerance, else what differs."""
    want = np.asarray(want)
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind not in "fc" and want.dtype.name != "bfloat16":  # ml_dtypes: kind "V"
        return "" if np.array_equal(got, want) else "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    same = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= ATOL + RTOL * np.abs(w))
    if bool(np.all(same)):
        return ""
    diff = np.where(same, 0.0, np.abs(np.nan_to_num(g - w, nan=np.inf)))
    return f"max |error| {float(diff.max()):.3g} at {np.unravel_index(int(diff.argmax()), w.shape)}"


def _close_fp16(got: Any, want: Any, rtol: float) -> str:
    """'' when `got` matches `want` by `npucc check`'s fp16 verdict at `rtol`, else what differs.

    Elements equal to the expected value (a NaN where a NaN is expected, an equal inf) are
    matched; the rest must pass `checking.compare` (max |error| <= rtol * max |expected| + ATOL
    over the finite expected values).
    """
    from npucc.checking import compare

    want = np.asarray(want)
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    if want.dtype.kind not in "fc" and want.dtype.name != "bfloat16":
        return "" if np.array_equal(got, want) else "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.where(np.isfinite(w), w, 0.0)
    same = (np.isnan(g) & np.isnan(w)) | (g == w)
    (c,) = compare({"y": np.where(same, finite, g)}, {"y": finite}, rtol)
    if c.ok:
        return ""
    return f"max |error| {c.max_abs:.3g} > {c.rtol:.3g} (fp16) * max |expected| {c.max_ref:.3g}"


def _exact(got: Any, want: Any) -> str:
    """'' when `got` equals `want` element by element (NaN matches NaN), else what differs."""
    want = np.asarray(want)
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape} != expected {want.shape}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if bool(np.all((g == w) | (np.isnan(g) & np.isnan(w)))):
        return ""
    diff = np.where(np.isnan(g) & np.isnan(w), 0.0, np.abs(np.nan_to_num(g - w, nan=np.inf)))
    at = np.unravel_index(int(diff.argmax()), w.shape)
    return f"{int(np.sum(diff != 0))} of {w.size} differ: {got[at]} != {want[at]} at {at}"


def _run_ort(model: onnx.ModelProto, feeds: dict[str, Any]) -> list[Any]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _ort_status(case: Case) -> tuple[str, list[list[Any]] | None]:
    """onnxruntime's status on the case, and its outputs per data set (None if it failed)."""
    outs = []
    try:
        for feeds, _ in case.data:
            outs.append(_run_ort(case.model, feeds))
    except Exception:  # onnxruntime does not run it
        return "fail", None
    for got, (_, want) in zip(outs, case.data, strict=True):
        if want is not None and any(_close(g, w) for g, w in zip(got, want, strict=False)):
            return "wrong", outs
    return "pass", outs


def _npucc_status(
    case: Case, ort_outs: list[list[Any]] | None, precision: str = "fp32"
) -> tuple[str, str]:
    """npucc's status and message on the case at `precision`."""
    import npucc
    from npucc.errors import NpuccError

    names = [v.name for v in case.model.graph.output]
    at = None if precision == "fp32" else precision
    int8 = precision == "int8" or (
        precision == "auto" and any(n.op_type in QUANTIZED_OPS for n in case.model.graph.node)
    )
    note = ""
    for index, (feeds, want) in enumerate(case.data):
        if want is None:
            if ort_outs is None:
                return "unsupported", "no reference output (onnxruntime failed)"
            want = ort_outs[index]
        frozen = set(list(feeds)[1:]) if int8 else _shape_like(feeds, case.model)
        note = _FROZEN_NOTE if int8 and frozen else note
        model = _freeze(case.model, feeds, frozen)
        try:
            # NOTE: jobs=1: the cases already run in a pool's workers, one core each
            program = npucc.compile(model, target="davinci-core", precision=at, jobs=1)
        except NpuccError as exc:
            if int8 or not any(w in str(exc) for w in ("constant", "static")) or len(feeds) < 2:
                return "unsupported", _one_line(exc) + note
            frozen = set(list(feeds)[1:])
            note = _FROZEN_NOTE
            model = _freeze(case.model, feeds, frozen)
            try:
                program = npucc.compile(model, target="davinci-core", precision=at, jobs=1)
            except NpuccError as exc2:
                return "unsupported", _one_line(exc2) + note
        try:
            got = program.run({k: v for k, v in feeds.items() if k not in frozen})
        except NpuccError as exc:  # a clean refusal of the input values (an fp16 range, ...)
            return "unsupported", f"at run time: {_one_line(exc)}{note}"
        close = _comparer(program.target.dtype, model)
        for position, (name, w) in enumerate(zip(names, want, strict=False)):
            if w is None:
                continue
            problem = close(got[name], w)
            if problem and program.target.dtype == "f16":
                ins = {k: v for k, v in feeds.items() if k not in frozen}
                limit = _fp16_limit(model, ins, position, got[name], w, close)
                if limit:
                    return "unsupported", f"data set {index}, output '{name}': {limit}{note}"
            if problem:
                return "wrong", f"data set {index}, output '{name}': {problem}{note}"
    return "pass", note.strip()


FP16_MAX = float(np.finfo(np.float16).max)


def _fp16_limit(
    model: onnx.ModelProto, feeds: dict[str, Any], position: int, got: Any, want: Any, close: Any
) -> str:
    """Why an fp16 program cannot give output `position` of the case within the tolerance, if
    the case's data itself is the reason, else '': an expected value beyond fp16's range, or
    expected values that move beyond the tolerance when the inputs and weights are rounded to
    fp16 (onnxruntime's float32 run on the rounded data against its run on the data, which must
    agree with the expected values), npucc's result matching the run on the rounded data."""
    finite = np.abs(np.asarray(want, np.float64))[np.isfinite(np.asarray(want, np.float64))]
    if finite.size and float(finite.max()) > FP16_MAX:
        return (f"beyond fp16: an expected value {float(finite.max()):.6g} exceeds "
                f"fp16's largest {FP16_MAX:g}")  # fmt: skip
    half = onnx.ModelProto()
    half.CopyFrom(model)
    for init in half.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            data = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(data, init.name))
    rounded = {k: _to_fp16(v) for k, v in feeds.items()}
    try:
        exact = _run_ort(model, feeds)[position]
        ref = _run_ort(half, rounded)[position]
    except Exception:  # onnxruntime does not run it: no evidence either way
        return ""
    moved = close(ref, exact)
    if close(exact, want) or not moved or close(got, ref):
        return ""  # onnxruntime disagrees with the expected values, or the data is stable
    return (f"ill-conditioned at fp16: the data rounded to fp16 moves onnxruntime's output "
            f"({moved}); npucc matches onnxruntime on that data")  # fmt: skip


def _to_fp16(value: Any) -> Any:
    """A float32 array rounded to fp16 (as float32), as an fp16 program's host rounds it."""
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        with np.errstate(over="ignore"):
            return value.astype(np.float16).astype(np.float32)
    return value


_FROZEN_NOTE = " (inputs after the first frozen as constants)"


def _comparer(dtype: str, model: onnx.ModelProto) -> Any:
    """The comparison of a program whose storage type is `dtype` (f32, f16 or i8)."""
    if dtype == "i8":
        return _exact
    if dtype == "f16":
        from npucc.checking import fp16_rtol, reduction_length

        rtol = fp16_rtol(reduction_length(model))
        return lambda got, want: _close_fp16(got, want, rtol)
    return _close


def _shape_like(feeds: dict[str, Any], model: onnx.ModelProto) -> set[str]:
    """Integer and bool inputs (shapes, pads, masks, ...) when a float32 input remains.

    Integer inputs read only as Gather indices stay inputs: npucc gathers at run time.
    """
    f32 = [k for k, v in feeds.items() if isinstance(v, np.ndarray) and v.dtype == np.float32]
    if not f32:
        return set()
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            uses.setdefault(name, set()).add((node.op_type, position))
    return {
        k
        for k, v in feeds.items()
        if isinstance(v, np.ndarray)
        and v.dtype.kind in "iub"
        and not (v.dtype.kind == "i" and uses.get(k) == {("Gather", 1)})
    }


def _freeze(model: onnx.ModelProto, feeds: dict[str, Any], names: set[str]) -> onnx.ModelProto:
    """A copy of `model` whose inputs `names` are initializers holding their values in `feeds`."""
    if not names:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for name in names:
        if not isinstance(feeds[name], np.ndarray):
            raise _NotTensor(name)
        out.graph.initializer.append(numpy_helper.from_array(feeds[name], name))
    if out.ir_version >= 4:
        keep = [v for v in out.graph.input if v.name not in names]
        del out.graph.input[:]
        out.graph.input.extend(keep)
    return out


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


_CASES: dict[str, Case] = {}


def _worker_init() -> None:
    """Load the cases once per worker process."""
    import onnxruntime as ort

    signal.signal(signal.SIGALRM, _alarm)
    ort.set_default_logger_severity(4)
    _CASES.update((c.name, c) for c in all_cases())


def run_case(name: str, precision: str = "fp32") -> Result:
    """Run one case (in a worker) at `precision`; never raises."""
    start = time.perf_counter()
    case = _CASES[name]
    limit = MODEL_TIMEOUT if case.op == "model" else CASE_TIMEOUT
    ort = "-"
    signal.alarm(limit)
    try:
        if case.model is None:
            _load_model_case(case)
        if not all(_tensors(ins, outs) for ins, outs in case.data):
            status, message = "unsupported", "an input or output is not a tensor"
        elif _elems(case.data) > MAX_ELEMS:
            status, message = "unsupported", f"skipped: more than {MAX_ELEMS} elements"
        else:
            with np.errstate(all="ignore"):
                ort, ort_outs = _ort_status(case)
                status, message = _npucc_status(case, ort_outs, precision)
    except _NotTensor as exc:
        status, message = "unsupported", f"input '{exc}' is not a tensor"
    except _Timeout:
        status, message = "internal_error", f"timeout after {limit} s"
    except Exception as exc:  # any other failure is a compiler bug
        status, message = "internal_error", f"{type(exc).__name__}: {_one_line(exc)}"
    finally:
        signal.alarm(0)
    case.model, case.data = None, []  # type: ignore[assignment]
    seconds = time.perf_counter() - start
    return Result(name, case.op, status, message, ort, seconds, precision)


def _run_task(task: tuple[str, str]) -> Result:
    return run_case(*task)


def run_all(pattern: str = "", jobs: int = 0, precision: str = "fp32") -> list[Result]:
    """Run at `precision` every case whose name or operator matches `pattern` (fnmatch or
    substring); at int8 only the quantized cases (the others are n/a).

    Whole-model cases are started first (they are the longest), results come back in case order.
    """
    cases = [(c.name, c.op) for c in all_cases() if precision != "int8" or _int8_case(c)]
    chosen = [n for n, op in cases if _match(pattern, n, op)]
    if not chosen:
        return []
    order = sorted(range(len(chosen)), key=lambda i: not chosen[i].startswith("light/"))
    jobs = jobs or min(len(chosen), os.cpu_count() or 1) or 1
    ctx = multiprocessing.get_context("fork")
    tasks = [(chosen[i], precision) for i in order]
    with ctx.Pool(jobs, initializer=_worker_init) as pool:
        results = list(pool.imap(_run_task, tasks, chunksize=1))
    by_name = {r.name: r for r in results}
    return [by_name[n] for n in chosen]


def _int8_case(case: Case) -> bool:
    """Whether `--precision int8` runs the case: its operator or a node is quantized."""
    nodes = case.model.graph.node if case.model is not None else []  # model cases: float
    return case.op in QUANTIZED_CASE_OPS or any(n.op_type in QUANTIZED_CASE_OPS for n in nodes)


def _match(pattern: str, name: str, op: str) -> bool:
    if not pattern:
        return True
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(op, pattern)
    return pattern in name or pattern == op


def summary(results: list[Result]) -> dict[str, int]:
    """Counts per status (every status present, zeros included)."""
    counts = Counter(r.status for r in results)
    return {s: counts.get(s, 0) for s in STATUSES}


def _by_precision(results: list[Result]) -> dict[str, list[Result]]:
    """The results of each precision, in the order the precisions ran."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.precision, []).append(r)
    return groups


def report_json(results: list[Result]) -> dict[str, Any]:
    """The JSON report: cases, the summary and the summary of each precision."""
    cases = [
        {"name": r.name, "op": r.op, "precision": r.precision, "status": r.status,
         "message": r.message}
        for r in results
    ]  # fmt: skip
    groups = _by_precision(results)
    return {
        "cases": cases,
        "summary": summary(results),
        "precisions": {p: summary(rs) for p, rs in groups.items()},
    }


def per_op(results: list[Result]) -> dict[str, Counter]:
    """Counts per operator: each status and onnxruntime's passes ('ort')."""
    table: dict[str, Counter] = {}
    for r in results:
        row = table.setdefault(r.op, Counter())
        row[r.status] += 1
        row["ort"] += r.ort == "pass"
    return dict(sorted(table.items()))


def format_table(results: list[Result]) -> str:
    """The per-operator text table and the overall line, one table per precision."""
    head = (
        f"{'operator':<28}{'cases':>6}"
        + "".join(f"{s:>15}" for s in STATUSES)
        + f"{'ort pass':>10}"
    )
    lines = []
    for precision, group in _by_precision(results).items():
        lines += [f"precision {precision}", head]
        for op, row in per_op(group).items():
            total = sum(row[s] for s in STATUSES)
            cells = "".join(f"{row[s]:>15}" for s in STATUSES)
            lines.append(f"{op:<28}{total:>6}{cells}{row['ort']:>10}")
        overall = summary(group)
        ort = sum(r.ort == "pass" for r in group)
        cells = "".join(f"{overall[s]:>15}" for s in STATUSES)
        lines.append(f"{'TOTAL':<28}{len(group):>6}{cells}{ort:>10}")
    return "\n".join(lines)


_MD_HEAD = """\
# Operators

Generated by `npucc conformance --precision {precisions} --markdown docs/operators.md`; do not
edit by hand. Counts are the ONNX backend node test cases of each operator (plus whole-model
cases under `model`), compiled for davinci-core and run in the interpreter; `ort` is how many
of them onnxruntime passes. The counts are at {first} (every tensor of its type, static
shapes){others}.
"""
_MD_PRECISION = {
    "fp16": "`fp16 pass`: the cases passing at `--precision fp16`, within `npucc check`'s fp16"
    " tolerance (docs/precision.md: 2 · 2⁻¹¹ · sqrt(L) · max |expected|, L the case's longest"
    " reduction); the others are unsupported: refused cleanly, or with data fp16 cannot"
    " represent (beyond its range, or ill-conditioned: docs/precision.md)",
    "int8": "`int8 pass`: the quantized cases (QuantizeLinear, DequantizeLinear, QLinear*,"
    " ConvInteger, MatMulInteger, DynamicQuantizeLinear) passing at `--precision int8`, every"
    " output equal to the expected one; n/a: a float operator, which has no int8 form (npucc"
    " refuses a float model at int8)",
    "auto": "`auto pass`: the cases passing at `--precision auto` (int8, exact, for a quantized"
    " model; the target's fp32 otherwise)",
    "fp32": "`fp32 pass`: the cases passing at fp32",
}


def _precision_cell(row: Counter | None) -> str:
    """An operator's cell of a further precision: its passes, and any wrong or internal error."""
    if row is None:
        return "n/a"
    bad = [f"{row[s]} {s.replace('_', ' ')}" for s in ("wrong", "internal_error") if row[s]]
    return f"{row['pass']}" + (f" ({', '.join(bad)})" if bad else "")


def operators_markdown(results: list[Result]) -> str:
    """docs/operators.md: per operator, accepted opsets, limitations and pass counts (the first
    precision's statuses, a pass column per further precision)."""
    from npucc.frontend.onnx_import import SUPPORTED_OPS
    from npucc.frontend.op_support import op_support

    groups = _by_precision(results) or {"fp32": []}
    first, *others = groups
    table = per_op(groups[first])
    extra = {p: per_op(groups[p]) for p in others}
    notes = "".join(f"; {_MD_PRECISION[p]}" for p in others)
    head = _MD_HEAD.format(precisions=",".join(groups), first=first, others=notes)
    columns = "".join(f" {p} pass |" for p in others)
    lines = [
        *head.splitlines(),
        "",
        f"| operator | opsets | pass | unsupported | wrong | internal error | ort |{columns}"
        " limitations |",
        "|---|---|---|---|---|---|---|" + "---|" * len(others) + "---|",
    ]
    ops = sorted(set(table) | set(SUPPORTED_OPS))
    for op in ops:
        row = table.get(op, Counter())
        support = op_support(op)
        cells = " | ".join(str(row[s]) for s in STATUSES)
        more = "".join(f" {_precision_cell(extra[p].get(op))} |" for p in others)
        lines.append(
            f"| {op} | {support.opsets} | {cells} | {row['ort']} |{more} {support.limits} |"
        )
    lines.append("")
    for precision, group in groups.items():
        counts = summary(group)
        lines.append(f"Overall at {precision}: {len(group)} cases, "
                     + ", ".join(f"{s} {n}" for s, n in counts.items()) + ".")  # fmt: skip
    lines.append("")
    return "\n".join(lines)


def _precisions(text: str) -> list[str]:
    """The `--precision` list: comma-separated names of PRECISIONS, each once."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PRECISIONS]
    if bad or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {', '.join(PRECISIONS)} (each once), got {text!r}"
        )
    return names


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `conformance` on the CLI's subparsers."""
    p = subparsers.add_parser("conformance", help=COMMANDS["conformance"])
    p.add_argument("--json", metavar="FILE", help="write the JSON report to FILE")
    p.add_argument("-k", metavar="PATTERN", default="", help="only cases matching PATTERN")
    p.add_argument("--markdown", metavar="FILE", help="write the operator table (operators.md)")
    p.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: cores)")
    p.add_argument(
        "--precision",
        type=_precisions,
        default=["fp32"],
        metavar="LIST",
        help="fp32, fp16, int8 (the quantized cases) or auto, or a comma-separated list run in"
        " turn (default fp32)",
    )
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run the cases at each precision, print the tables, write the reports; 0 unless an
    internal error occurred."""
    results = []
    for precision in getattr(args, "precision", None) or ["fp32"]:
        start = time.perf_counter()
        group = run_all(args.k, getattr(args, "jobs", 0), precision)
        results += group
        print(format_table(group))
        slowest = sorted(group, key=lambda r: -r.seconds)[:5]
        print("slowest: " + ", ".join(f"{r.name} {r.seconds:.0f} s" for r in slowest))
        print(f"{len(group)} cases at {precision} in {time.perf_counter() - start:.0f} s")
        sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(report_json(results), indent=1) + "\n")
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(operators_markdown(results))
    sys.stdout.flush()
    return 1 if summary(results)["internal_error"] else 0
