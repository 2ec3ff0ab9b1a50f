"""hcest18: the hypercut pass alone on light ResNet-50 b1 mesh8x8, its CPU s and its plan.

`python bench/hcest18/pass_cpu.py`: the passes before hypercut, then the hypercut pass timed
by `process_time`; prints its CPU s, the reported estimate's latency and a hash of the plan
(steps and offchip)."""

from __future__ import annotations

import hashlib
import time

import onnx

from npucc.compiler import pipeline
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

MODEL = "/tmp/r50rand.onnx"


def main() -> None:
    """Time the pass and print its figures."""
    target = load_target("mesh8x8")
    passes = pipeline(CompileOptions(target="mesh8x8"))
    split = [p.name for p in passes].index("hypercut")
    ctx = CompileContext(target)
    graph = PassManager(passes[:split]).run(onnx.load(MODEL), ctx)
    start = time.process_time()
    plan = passes[split].run(graph, ctx).plan
    cpu = time.process_time() - start
    key = repr((plan.steps, sorted(plan.offchip))).encode()
    print(
        f"hypercut_cpu {cpu:.2f} s  latency {plan.cost.latency_cycles:.0f} "
        f"steps {hashlib.sha256(key).hexdigest()[:8]}"
    )


if __name__ == "__main__":
    main()
