"""Long differential-fuzzing runs: random models on random targets, checked against onnxruntime.

Usage: python bench/fuzz.py --examples N --seed S [--workers K] [--shrink] [--save DIR]

The N examples are drawn in chunks of CHUNK by hypothesis (tests/fuzz: fuzz_models.models and
fuzz_targets.targets), chunk i from seed (S, i), so a run's examples depend on N and S only,
not on K. Each example is checked by fuzz_check.check_example in one of K worker processes
(TIMEOUT seconds each). The run prints the examples run, examples per second, failures by
class, timeouts (examples slower than TIMEOUT: reported, not failures, since the property
was not violated), how many examples were refused (a true capacity refusal), spilled, crossed
cores and used the NoC, and the slowest cases. With --shrink, the first failure of each class is
reproduced and minimised by hypothesis and saved to DIR (default tests/fuzz/regressions) as
<class>-<seed>-<chunk>.onnx + .toml. Exit status 1 when an example failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

from fuzz_check import Outcome, check_example  # noqa: E402
from fuzz_models import models  # noqa: E402
from fuzz_regress import REGRESSIONS, save_regression  # noqa: E402
from fuzz_targets import schedules, targets  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

CHUNK = 25
TIMEOUT = 60  # seconds one example may take


class ExampleTimeout(BaseException):
    """An example ran longer than TIMEOUT (a BaseException: the property does not catch it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise ExampleTimeout


def _describe(model: Any, target: Any) -> str:
    ops = Counter(n.op_type for n in model.graph.node)
    mem = target.memory
    caps = ",".join(f"{t}={mem.capacity(t)}" for t in ("L1", "UB", "L0A", "L0B", "L0C"))
    return f"{target.name} {target.mesh.rows}x{target.mesh.cols} {caps}; " + " ".join(
        f"{op}x{k}" if k > 1 else op for op, k in sorted(ops.items())
    )


def _settings(examples: int, phases: tuple[Phase, ...]) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )


def run_chunk(job: tuple[int, int, int]) -> list[dict[str, Any]]:
    """Check `count` examples of chunk (seed, index); one record per example."""
    base, index, count = job
    records: list[dict[str, Any]] = []
    signal.signal(signal.SIGALRM, _alarm)

    @seed(base * 100_003 + index)
    @_settings(count, (Phase.generate,))
    @given(models(), targets(), schedules())
    def body(model: Any, target: Any, schedule: str) -> None:
        signal.alarm(TIMEOUT)
        try:
            out = check_example(model, target, schedule)
        except ExampleTimeout:
            out = Outcome(detail=f"over {TIMEOUT} s", seconds=TIMEOUT)
        finally:
            signal.alarm(0)
        records.append(
            {
                "chunk": index,
                "failure": out.failure,
                "detail": out.detail,
                "refused": out.refused,
                "spilled": out.spilled,
                "noc": out.noc,
                "cross_core": out.cross_core,
                "cores": out.cores,
                "seconds": out.seconds,
                "timeout": out.seconds >= TIMEOUT,
                "what": f"{schedule} on {_describe(model, target)}",
            }
        )

    body()
    return records


def shrink(base: int, index: int, count: int, failure: str, directory: Path) -> Path | None:
    """Reproduce chunk (base, index), minimise its first `failure` and save it; its path."""
    saved: list[Path] = []
    name = f"{failure.replace(':', '-')}-{base}-{index}"

    @seed(base * 100_003 + index)
    @_settings(count, (Phase.generate, Phase.shrink))
    @given(models(), targets(), schedules())
    def body(model: Any, target: Any, schedule: str) -> None:
        if check_example(model, target, schedule).failure == failure:
            saved[:] = [save_regression(model, target, schedule, name, directory)]  # minimal last
            raise AssertionError(failure)

    try:
        body()
    except AssertionError:
        pass
    return saved[0] if saved else None


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer as the command line says; 1 when an example failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shrink", action="store_true", help="minimise and save failures")
    parser.add_argument("--save", type=Path, default=REGRESSIONS)
    parser.add_argument("--slowest", type=int, default=5)
    args = parser.parse_args(argv)
    jobs = [
        (args.seed, i, min(CHUNK, args.examples - start))
        for i, start in enumerate(range(0, args.examples, CHUNK))
    ]
    start = time.perf_counter()
    records: list[dict[str, Any]] = []
    with multiprocessing.get_context("fork").Pool(args.workers) as pool:
        for chunk in pool.imap_unordered(run_chunk, jobs):
            records.extend(chunk)
            print(f"\r{len(records)}/{args.examples} examples", end="", file=sys.stderr)
    print(file=sys.stderr)
    wall = time.perf_counter() - start
    failures = [r for r in records if r["failure"]]
    by_class = Counter(r["failure"] for r in failures)
    print(f"examples run: {len(records)} in {wall:.0f} s ({len(records) / wall:.2f} examples/s,"
          f" {args.workers} workers)")  # fmt: skip
    print(f"failures: {len(failures)}" + "".join(f"\n  {k}: {v}" for k, v in by_class.items()))
    print(f"timeouts (over {TIMEOUT} s, not failures): {sum(r['timeout'] for r in records)}")
    refused = Counter(r["refused"] for r in records if r["refused"])
    print(f"refused (true capacity refusals, then enlarged and checked): {sum(refused.values())}"
          + "".join(f" {t}={n}" for t, n in sorted(refused.items())))  # fmt: skip
    for key, label in (
        ("spilled", "spilled"),
        ("cross_core", "crossed cores"),
        ("noc", "used the NoC"),
    ):
        print(f"{label}: {sum(r[key] for r in records)}")
    print(f"multi-core targets: {sum(r['cores'] > 1 for r in records)}")
    print("slowest:")
    for r in sorted(records, key=lambda r: -r["seconds"])[: args.slowest]:
        print(f"  {r['seconds']:6.2f} s  {r['what']}")
    shown: set[str] = set()
    for r in failures:
        if r["failure"] in shown:
            continue
        shown.add(r["failure"])
        print(f"first {r['failure']} (chunk {r['chunk']}): {r['detail']}\n    {r['what']}")
        if args.shrink:
            count = next(j[2] for j in jobs if j[1] == r["chunk"])
            path = shrink(args.seed, r["chunk"], count, r["failure"], args.save)
            print(f"    minimised: {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
