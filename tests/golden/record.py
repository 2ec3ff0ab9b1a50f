"""Golden outputs of the compiler: sha256 of streams and images, DAN schedules, HyperCut EDPs.

Issue 14's redesign must change no output. `python tests/golden/record.py --write` records
the fixture `golden.json` (run on the code before a change); `--check` recomputes every entry
and lists the ones that differ (exit 1). `--quick` keeps to the shipped models on
davinci-core and the DAN workloads (test_golden.py checks part of that in the suite); without
it the light model zoo is compiled and plans are made on the meshes too.

    python tests/golden/record.py --check            # everything (about 10 minutes)
    python tests/golden/record.py --check --quick    # about 25 s
    python tests/golden/record.py --write --only stream/mesh8x8-sa   # re-record an intended change
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # NOTE: as a script it checks this tree's npucc, not the installed
FIXTURE = Path(__file__).with_name("golden.json")
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted((ROOT / "models").glob("*.onnx"))
ZOO = (
    "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512",
)  # fmt: skip
MESH_MODELS = ("small_cnn", "residual_block", "transformer_encoder")
INPUT_SHAPES = {"mlp": {"x": (2, 64)}}


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _compile(model: onnx.ModelProto | Path, target: str, **kw: object) -> dict[str, str]:
    import npucc

    program = npucc.compile(model, target, **kw)  # type: ignore[arg-type]
    return {"cmd": _sha(program.stream), "bin": _sha(program.image)}


def _stream_entries(quick: bool) -> Iterator[tuple[str, Callable[[], object]]]:
    from npucc.checking import randomize_weights
    from npucc.frontend.onnx_import import load_model

    for path in MODELS:
        shapes = INPUT_SHAPES.get(path.stem)
        yield (
            f"stream/davinci-core/{path.stem}",
            lambda p=path, s=shapes: _compile(load_model(p, s), "davinci-core"),
        )
        yield (
            f"stream/davinci-core-original/{path.stem}",
            lambda p=path, s=shapes: _compile(
                load_model(p, s), "davinci-core", schedule="original"
            ),
        )
    if quick:
        return
    for name in ZOO:
        yield (
            f"stream/davinci-core/light_{name}",
            lambda n=name: _compile(
                randomize_weights(load_model(LIGHT / f"light_{n}.onnx"), seed=0), "davinci-core"
            ),
        )
    for stem in MESH_MODELS:
        yield (
            f"stream/mesh8x8/{stem}",
            lambda s=stem: _compile(load_model(ROOT / "models" / f"{s}.onnx"), "mesh8x8"),
        )
    for method in ("sa", "layer-sequential", "layer-pipelined"):
        yield (
            f"stream/mesh8x8-{method}/residual_block",
            lambda m=method: _compile(
                load_model(ROOT / "models" / "residual_block.onnx"), "mesh8x8", search=m
            ),
        )


def _dan_entries() -> Iterator[tuple[str, Callable[[], object]]]:
    from npucc.backend.schedule.registry import schedule_graph
    from npucc.target.cost import TraceSpillModel
    from npucc.tools.bench_dan import METHODS
    from npucc.tools.dan_command import DEFAULT_CAPACITY
    from npucc.tools.dan_workloads import WORKLOADS

    def one(name: str, method: str) -> dict[str, object]:
        graph = WORKLOADS[name]()
        schedule, r = schedule_graph(graph, method, DEFAULT_CAPACITY, TraceSpillModel())
        text = json.dumps(
            [list(schedule.order), sorted(schedule.offsets.items()), list(schedule.spills)]
        )
        return {"schedule": _sha(text), "metrics": r.metrics()}

    for name in WORKLOADS:
        for method in ("dan-mpas", *METHODS):
            yield f"dan/{name}/{method}", lambda n=name, m=method: one(n, m)


def _hypercut_entries() -> Iterator[tuple[str, Callable[[], object]]]:
    from npucc.backend.hypercut.beam import BeamOptions
    from npucc.backend.planner import METHODS, PlanOptions, plan_graph
    from npucc.target import load_target
    from npucc.tools.bench_hypercut import MODELS as HC_MODELS
    from npucc.transforms.graph_pipeline import import_model

    graphs: dict[str, object] = {}

    def one(model: str, platform: str, batch: int, method: str) -> dict[str, object]:
        if model not in graphs:
            graphs[model] = import_model(HC_MODELS[model])
        options = PlanOptions(
            method=method,
            batch=batch,
            seed=0,
            beam=BeamOptions(width=16),
            sa_iterations=3000,
            estimate="set",
        )
        cost = plan_graph(graphs[model], load_target(platform), options).cost  # type: ignore[arg-type]
        return {"edp": repr(cost.edp), "latency": repr(cost.latency_cycles)}

    for model in ("resnet50", "googlenet", "vgg19", "transformer"):
        for platform in ("mesh8x8", "mesh16x16"):
            for batch in (1, 64):
                for method in METHODS:
                    yield (
                        f"hypercut-set/{model}/{platform}/b{batch}/{method}",
                        lambda a=model, p=platform, b=batch, m=method: one(a, p, b, m),
                    )


def entries(quick: bool) -> Iterator[tuple[str, Callable[[], object]]]:
    """Every golden entry as (key, function computing its value)."""
    yield from _stream_entries(quick)
    yield from _dan_entries()
    if not quick:
        yield from _hypercut_entries()


def main() -> int:
    """Record or check the fixture."""
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="keys starting with this")
    args = parser.parse_args()
    golden = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    bad = 0
    for key, fn in entries(args.quick):
        if not key.startswith(args.only):
            continue
        value = json.loads(json.dumps(fn()))
        if args.write:
            golden[key] = value
            print(f"recorded {key}", flush=True)
        elif golden.get(key) != value:
            bad += 1
            print(f"DIFFERS  {key}: {golden.get(key)} != {value}", flush=True)
        else:
            print(f"same     {key}", flush=True)
    if args.write:
        FIXTURE.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    print(f"{bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
