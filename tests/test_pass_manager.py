"""Typed passes: IR types checked by the pass manager, one CompileOptions, the explicit pipeline."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import ClassVar

import pytest

import npucc
from npucc import compiler
from npucc.backend.lower import LowerTiles
from npucc.backend.planner import HypercutPass
from npucc.compiler import pipeline
from npucc.errors import InternalError
from npucc.ir.graph import Graph
from npucc.ir.plan import PlannedGraph
from npucc.options import CompileOptions
from npucc.passes import CompileContext, GraphPass, PassManager
from npucc.target import load_target
from npucc.tools.cli import _parser, compile_options
from npucc.transforms.graph_pipeline import import_model

ROOT = Path(__file__).resolve().parents[1]
SMALL_CNN = ROOT / "models" / "small_cnn.onnx"


@dataclasses.dataclass(frozen=True, slots=True)
class ReturnsNothing(GraphPass):
    """A broken pass: declares a Graph result and returns None."""

    name: ClassVar[str] = "returns-nothing"

    def run(self, ir: Graph, ctx: CompileContext) -> None:  # type: ignore[override]
        return None


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_model(SMALL_CNN)


def test_a_pass_given_the_wrong_ir_fails_naming_the_pass(graph):
    ctx = CompileContext(load_target("davinci-core"))
    with pytest.raises(InternalError, match=r"pass 'lower-tiles' expects PlannedGraph, got Graph"):
        PassManager([LowerTiles()]).run(graph, ctx)


def test_a_pass_returning_the_wrong_ir_fails_naming_the_pass(graph):
    ctx = CompileContext(load_target("davinci-core"))
    with pytest.raises(InternalError, match=r"pass 'returns-nothing' should return Graph, got"):
        PassManager([ReturnsNothing()]).run(graph, ctx)


@dataclasses.dataclass(frozen=True, slots=True)
class Keeps(GraphPass):
    """A pass that returns its graph."""

    name: ClassVar[str] = "keeps"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        return ir


def test_the_heap_is_trimmed_after_each_pass(graph, monkeypatch):
    calls = []
    monkeypatch.setattr("npucc.passes.trim_heap", lambda: calls.append(1))
    PassManager([Keeps(), Keeps()]).run(graph, CompileContext(load_target("davinci-core")))
    assert len(calls) == 2


def test_passes_are_frozen_dataclasses_whose_ir_types_chain():
    passes = pipeline(CompileOptions())
    for p in passes:
        assert dataclasses.is_dataclass(p) and type(p).__dataclass_params__.frozen, p.name
        for f in dataclasses.fields(p):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(p, f.name, getattr(p, f.name))
    for before, after in zip(passes, passes[1:], strict=False):
        outputs = before.output_ir if isinstance(before.output_ir, tuple) else (before.output_ir,)
        assert all(issubclass(t, after.input_ir) for t in outputs), (before.name, after.name)


def test_the_pipeline_is_the_documented_pass_order():
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("## Pipeline and passes") :]
    block = section[section.index("```\n") + 4 : section.index("\n```", section.index("```\n"))]
    documented = [name.strip() for name in re.split(r"→", block) if name.strip()]
    assert [p.name for p in pipeline(CompileOptions())] == documented


CLI = [
    "--target", "mesh8x8", "--schedule", "original", "--search", "sa", "--beam-width", "17",
    "--batch", "2", "--input-shape", "input=2x3x32x32", "--print-ir-after", "hypercut,codegen",
    "--print-ir-before", "schedule", "--print-ir-after-all", "--dump-dir", "d", "-j", "3",
]  # fmt: skip


def test_cli_and_api_build_the_same_options_and_pass_fields(monkeypatch):
    args = _parser().parse_args([str(SMALL_CNN), "-o", "x.cmd", *CLI])
    from_cli = compile_options(
        args,
        print_before=frozenset(args.print_ir_before.split(",")),
        print_after=frozenset(args.print_ir_after.split(",")),
        print_after_all=args.print_ir_after_all,
        dump_dir=args.dump_dir,
    )
    seen: list[CompileOptions] = []
    monkeypatch.setattr(compiler, "compile_program", lambda model, options: seen.append(options))
    npucc.compile(
        SMALL_CNN,
        "mesh8x8",
        "original",
        {"input": (2, 3, 32, 32)},
        search="sa",
        beam_width=17,
        batch=2,
        print_after=frozenset({"hypercut", "codegen"}),
        print_before=frozenset({"schedule"}),
        print_after_all=True,
        dump_dir="d",
        jobs=3,
    )
    assert seen == [from_cli]
    passes = pipeline(from_cli)
    assert passes == pipeline(seen[0])
    by_name = {p.name: p for p in passes}
    assert by_name["import-onnx"].input_shapes == {"input": (2, 3, 32, 32)}
    assert by_name["hypercut"] == HypercutPass(search="sa", beam_width=17)
    assert by_name["schedule"].method == "original"
    assert by_name["schedule"].jobs == by_name["lower-tiles"].jobs == 3


def test_a_single_core_plan_is_trivial_and_prints_as_the_graph(graph):
    planned = npucc.compile_until(SMALL_CNN, "hypercut")
    assert isinstance(planned, PlannedGraph)
    plan = planned.plan
    assert (plan.rows, plan.cols, len(plan.steps), len(plan.steps[0].groups)) == (1, 1, 1, 1)
    assert plan.steps[0].groups[0].layers == tuple(range(len(planned.graph.layers)))
    assert planned.to_text() == graph.to_text()


def test_jobs_default_to_npucc_jobs(monkeypatch):
    monkeypatch.setenv("NPUCC_JOBS", "5")
    by_name = {p.name: p for p in pipeline(CompileOptions())}
    assert by_name["lower-tiles"].jobs == by_name["schedule"].jobs == 5
    assert {p.name: p for p in pipeline(CompileOptions(jobs=2))}["schedule"].jobs == 2
