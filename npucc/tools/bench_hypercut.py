"""`npucc bench hypercut`: plan the light zoo models on the mesh presets with every method."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import onnx

from npucc.backend.hypercut.beam import BeamOptions
from npucc.backend.planner import ESTIMATES, METHODS, PlanOptions, plan_graph
from npucc.errors import NpuccError
from npucc.target import load_target
from npucc.tools.bench_args import check_output_dir, choose
from npucc.transforms.graph_pipeline import import_model

ZOO = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
MODELS = {
    "resnet50": ZOO / "light_resnet50.onnx",
    "googlenet": ZOO / "light_inception_v1.onnx",
    "vgg19": ZOO / "light_vgg19.onnx",
    "zfnet512": ZOO / "light_zfnet512.onnx",
    "transformer": Path(__file__).parents[2] / "models" / "transformer_encoder.onnx",
}
PLATFORMS = ("mesh8x8", "mesh16x16")
BATCHES = (1, 64)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `hypercut` under `npucc bench`."""
    p = subparsers.add_parser("hypercut", help="HyperCut vs baselines (zoo + encoder)")
    p.add_argument("--json", type=Path, required=True, help="write the runs here")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    p.add_argument("--platforms", default=",".join(PLATFORMS), help="comma-separated targets")
    p.add_argument(
        "--batches", default=",".join(map(str, BATCHES)), help="comma-separated batch sizes"
    )
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated plan searches")
    p.add_argument(
        "--beam-width", type=int, default=BeamOptions().width, help="HyperCut beam width"
    )
    p.add_argument(
        "--sa-iterations",
        type=int,
        default=PlanOptions().sa_iterations,
        help="simulated-annealing iterations",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the plan searches")
    p.add_argument(
        "--model",
        choices=sorted(ESTIMATES, reverse=True),
        default="set",
        help="price plans by the SET-aligned model (set: the SET comparison) or as the "
        "lowering will execute them (exec: what compiling uses)",
    )
    return p


def main(args: argparse.Namespace) -> int:
    """Run every model x platform x batch x method and write the JSON report."""
    models = choose(args.models, MODELS, "model")
    platforms = choose(args.platforms, PLATFORMS, "platform")
    methods = choose(args.methods, METHODS, "method")
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        raise NpuccError(f"--batches takes integers, got '{args.batches}'") from None
    check_output_dir(args.json)
    runs = []
    for model in models:
        graph = import_model(MODELS[model])
        for platform in platforms:
            target = load_target(platform)
            for batch in batches:
                for method in methods:
                    options = PlanOptions(
                        method=method,
                        batch=batch,
                        seed=args.seed,
                        beam=BeamOptions(width=args.beam_width),
                        sa_iterations=args.sa_iterations,
                        estimate=args.model,
                    )
                    plan = plan_graph(graph, target, options)
                    cost = plan.cost
                    runs.append(
                        {
                            "model": model,
                            "platform": platform,
                            "batch": batch,
                            "method": method,
                            "estimate": args.model,
                            "energy_pj": cost.energy_pj,
                            "latency_cycles": cost.latency_cycles,
                            "edp": cost.edp,
                            "dram_bytes": int(cost.dram_bytes),
                            "noc_byte_hops": int(cost.noc_byte_hops),
                            "search_s": plan.search_s,
                        }
                    )
                    print(
                        f"{model:10s} {platform:9s} b={batch:<3d} {method:17s} "
                        f"edp={cost.edp:.4g} search={plan.search_s:.2f}s",
                        flush=True,
                    )
    args.json.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    return 0
