"""`npucc inspect MODEL.onnx [--json]` and `npucc ops [--json]`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from npucc.tools.cli_parsing import add_model_options

Adder = Callable[[str], argparse.ArgumentParser]
OptionAdder = Callable[[argparse.ArgumentParser], None]


def add_inspect_parsers(add: Adder, common: OptionAdder) -> None:
    """Register `inspect` and `ops` through the CLI's `add(name)`."""
    inspect = add("inspect")
    inspect.add_argument("model", help="ONNX model to inspect")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_model_options(
        inspect,
        "what a compile does with an operator npucc cannot lower (host: lists the host "
        "segments it would make)",
    )
    common(inspect)
    ops = add("ops")
    ops.add_argument("--json", action="store_true", help="print JSON instead of text")
    ops.add_argument(
        "--supported", action="store_true", help="only the operators npucc lowers or folds"
    )
    common(ops)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print a model's I/O, opset, MACs, weights and per-operator support."""
    from npucc.tools.cli_parsing import parse_input_shapes
    from npucc.tools.model_info import inspect_model

    info = inspect_model(
        args.model, parse_input_shapes(args.input_shape), args.batch, args.fallback
    )
    print(json.dumps(info, indent=1) if args.json else format_inspection(info))
    return 0


def format_inspection(info: dict[str, Any]) -> str:
    """The text form of `inspect_model`'s data."""
    from npucc.frontend.op_support import REFUSES
    from npucc.tools.model_info import format_value

    opsets = ", ".join(f"{d} {v}" for d, v in info["opsets"].items())
    lines = [f"model {info['model']} (graph '{info['graph']}', opset {opsets})"]
    for kind in ("inputs", "outputs"):
        lines.append(f"{kind}:")
        width = max((len(v["name"]) for v in info[kind]), default=0)
        lines += [f"  {v['name']:<{width}}  {format_value(v)}" for v in info[kind]]
    w = info["weights"]
    lines.append(
        f"weights: {w['bytes']:,} bytes in {w['tensors']} tensors ({w['elements']:,} elements)"
    )
    if info["macs"] is None:
        lines.append("MACs: unknown (the frontend stopped, see below)")
    else:
        at = ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in info["macs_shapes"].items())
        note = (
            f"; symbolic dims of {', '.join(info['symbolic_set_to_1'])} set to 1"
            if info["symbolic_set_to_1"]
            else ""
        )
        lines.append(f"MACs: {info['macs']:,} per inference (at {at}{note})")
    nodes = sum(row["count"] for row in info["operators"])
    lines.append(f"operators ({nodes} nodes):")
    width = max((len(_op_name(row)) for row in info["operators"]), default=8)
    for row in info["operators"]:
        status = ", ".join(
            f"{s} {n}" if len(row["status"]) > 1 else s for s, n in row["status"].items()
        )
        reasons = "; ".join(row["reasons"])
        limits = (
            f" (limits: {row['limits']})" if row["limits"] and REFUSES not in row["status"] else ""
        )
        lines.append(
            f"  {_op_name(row):<{width}} {row['count']:>5}  {status}"
            + (f": {reasons}" if reasons else limits)
        )
    if info["host_segments"]:
        lines.append(f"host segments ({len(info['host_segments'])}, run by onnxruntime):")
        lines += [f"  node '{h['name']}' ({h['op']})" for h in info["host_segments"]]
    elif info["fallback"] == "error" and any(REFUSES in row["status"] for row in info["operators"]):
        lines.append("(--fallback host would run the refused nodes on the host)")
    if info["compile_error"]:
        lines.append(f"the frontend stops at: {info['compile_error']}")
    return "\n".join(lines)


def _op_name(row: dict[str, Any]) -> str:
    return row["op"] if row["domain"] == "ai.onnx" else f"{row['domain']}.{row['op']}"


def cmd_ops(args: argparse.Namespace) -> int:
    """Print the supported-operator table (docs/operators.md's opsets and limitations)."""
    from npucc.frontend.op_support import REFUSES, all_operators

    rows = [r for r in all_operators() if not (args.supported and r.status == REFUSES)]
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=1))
        return 0
    width = max(len(r.op) for r in rows)
    print(f"{'operator':<{width}}  {'npucc':<7}  opsets; limitations")
    for r in rows:
        print(f"{r.op:<{width}}  {r.status:<7}  {r.opsets}" + (f"; {r.limits}" if r.limits else ""))
    return 0
