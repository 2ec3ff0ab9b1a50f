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

npucc compiles float32 models with static shapes, so a node case's non-float inputs (shapes,
indices, pads, axes, ...) are frozen into initializers holding the case's values; when npucc
then asks for a constant operand (Conv weights, Clip bounds, ...), every input but the first
is frozen too and the message says so.
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

from npucc.tools.cli_parsing import COMMANDS

STATUSES = ("pass", "unsupported", "wrong", "internal_error")
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


def _npucc_status(case: Case, ort_outs: list[list[Any]] | None) -> tuple[str, str]:
    """npucc's status and message on the case."""
    import npucc
    from npucc.errors import NpuccError

    names = [v.name for v in case.model.graph.output]
    note = ""
    for index, (feeds, want) in enumerate(case.data):
        if want is None:
            if ort_outs is None:
                return "unsupported", "no reference output (onnxruntime failed)"
            want = ort_outs[index]
        frozen = _shape_like(feeds, case.model)
        try:
            program = npucc.compile(_freeze(case.model, feeds, frozen), target="davinci-core")
        except NpuccError as exc:
            if not any(w in str(exc) for w in ("constant", "static")) or len(feeds) < 2:
                return "unsupported", _one_line(exc)
            frozen = set(list(feeds)[1:])
            note = " (inputs after the first frozen as constants)"
            try:
                program = npucc.compile(_freeze(case.model, feeds, frozen), target="davinci-core")
            except NpuccError as exc2:
                return "unsupported", _one_line(exc2) + note
        got = program.run({k: v for k, v in feeds.items() if k not in frozen})
        for name, w in zip(names, want, strict=False):
            if w is None:
                continue
            problem = _close(got[name], w)
            if problem:
                return "wrong", f"data set {index}, output '{name}': {problem}{note}"
    return "pass", note.strip()


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


def run_case(name: str) -> Result:
    """Run one case (in a worker); never raises."""
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
                status, message = _npucc_status(case, ort_outs)
    except _NotTensor as exc:
        status, message = "unsupported", f"input '{exc}' is not a tensor"
    except _Timeout:
        status, message = "internal_error", f"timeout after {limit} s"
    except Exception as exc:  # any other failure is a compiler bug
        status, message = "internal_error", f"{type(exc).__name__}: {_one_line(exc)}"
    finally:
        signal.alarm(0)
    case.model, case.data = None, []  # type: ignore[assignment]
    return Result(name, case.op, status, message, ort, time.perf_counter() - start)


def run_all(pattern: str = "", jobs: int = 0) -> list[Result]:
    """Run every case whose name or operator matches `pattern` (fnmatch or substring).

    Whole-model cases are started first (they are the longest), results come back in case order.
    """
    cases = [(c.name, c.op) for c in all_cases()]
    chosen = [n for n, op in cases if _match(pattern, n, op)]
    order = sorted(range(len(chosen)), key=lambda i: not chosen[i].startswith("light/"))
    jobs = jobs or min(len(chosen), os.cpu_count() or 1) or 1
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, initializer=_worker_init) as pool:
        results = list(pool.imap(run_case, [chosen[i] for i in order], chunksize=1))
    by_name = {r.name: r for r in results}
    return [by_name[n] for n in chosen]


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


def report_json(results: list[Result]) -> dict[str, Any]:
    """The JSON report: cases and the summary."""
    cases = [
        {"name": r.name, "op": r.op, "status": r.status, "message": r.message} for r in results
    ]
    return {"cases": cases, "summary": summary(results)}


def per_op(results: list[Result]) -> dict[str, Counter]:
    """Counts per operator: each status and onnxruntime's passes ('ort')."""
    table: dict[str, Counter] = {}
    for r in results:
        row = table.setdefault(r.op, Counter())
        row[r.status] += 1
        row["ort"] += r.ort == "pass"
    return dict(sorted(table.items()))


def format_table(results: list[Result]) -> str:
    """The per-operator text table and the overall line."""
    head = (
        f"{'operator':<28}{'cases':>6}"
        + "".join(f"{s:>15}" for s in STATUSES)
        + f"{'ort pass':>10}"
    )
    lines = [head]
    for op, row in per_op(results).items():
        total = sum(row[s] for s in STATUSES)
        cells = "".join(f"{row[s]:>15}" for s in STATUSES)
        lines.append(f"{op:<28}{total:>6}{cells}{row['ort']:>10}")
    overall = summary(results)
    ort = sum(r.ort == "pass" for r in results)
    cells = "".join(f"{overall[s]:>15}" for s in STATUSES)
    lines.append(f"{'TOTAL':<28}{len(results):>6}{cells}{ort:>10}")
    return "\n".join(lines)


def operators_markdown(results: list[Result]) -> str:
    """docs/operators.md: per operator, accepted opsets, limitations and pass counts."""
    from npucc.frontend.onnx_import import SUPPORTED_OPS
    from npucc.frontend.op_support import op_support

    table = per_op(results)
    lines = [
        "# Operators",
        "",
        "Generated by `npucc conformance --markdown docs/operators.md`; do not edit by hand.",
        "Counts are the ONNX backend node test cases of each operator (plus whole-model cases",
        "under `model`), compiled for davinci-core and run in the interpreter; `ort` is how many",
        "of them onnxruntime passes. Every tensor is float32 with a static shape.",
        "",
        "| operator | opsets | pass | unsupported | wrong | internal error | ort | limitations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ops = sorted(set(table) | set(SUPPORTED_OPS))
    for op in ops:
        row = table.get(op, Counter())
        support = op_support(op)
        cells = " | ".join(str(row[s]) for s in STATUSES)
        lines.append(f"| {op} | {support.opsets} | {cells} | {row['ort']} | {support.limits} |")
    overall = summary(results)
    lines += ["", "Overall: " + ", ".join(f"{s} {n}" for s, n in overall.items()), ""]
    return "\n".join(lines)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `conformance` on the CLI's subparsers."""
    p = subparsers.add_parser("conformance", help=COMMANDS["conformance"])
    p.add_argument("--json", metavar="FILE", help="write the JSON report to FILE")
    p.add_argument("-k", metavar="PATTERN", default="", help="only cases matching PATTERN")
    p.add_argument("--markdown", metavar="FILE", help="write the operator table (operators.md)")
    p.add_argument("-j", "--jobs", type=int, default=0, help="worker processes (default: cores)")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    """Run the cases, print the table, write the reports; 0 unless an internal error occurred."""
    start = time.perf_counter()
    results = run_all(args.k, getattr(args, "jobs", 0))
    print(format_table(results))
    slowest = sorted(results, key=lambda r: -r.seconds)[:5]
    print("slowest: " + ", ".join(f"{r.name} {r.seconds:.0f} s" for r in slowest))
    print(f"{len(results)} cases in {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(report_json(results), indent=1) + "\n")
    if getattr(args, "markdown", None):
        Path(args.markdown).write_text(operators_markdown(results))
    sys.stdout.flush()
    return 1 if summary(results)["internal_error"] else 0
