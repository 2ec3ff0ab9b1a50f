"""Sub-batch slicing of a plan: which layers split along the batch, and the lowering order."""

from __future__ import annotations

import pytest

from npucc.backend.lower.subbatch import Part, loop_parts, part_positions, part_spans, separable
from npucc.ir.graph_text import graph_from_text
from npucc.ir.plan import Group, Rect, Step

Z = "0" * 64


def graph(*lines: str):
    """A graph made of `lines` (the graph IR's text form)."""
    return graph_from_text('graph "t" opset=13 {\n' + "".join(f"  {x}\n" for x in lines) + "}\n")


CHAIN = graph(
    'input %"x" : f32[12,8]',
    '%"a" = relu(%"x") : f32[12,8] loc("a")',
    '%"b" = softmax(%"a") {axis = 1} : f32[12,8] loc("b")',
    '%"c" = relu(%"b") : f32[12,8] loc("c")',
    'output %"c"',
)


@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ('%"y" = softmax(%"x") {axis = 1} : f32[4,8] loc("s")', True),
        ('%"y" = softmax(%"x") {axis = 0} : f32[4,8] loc("s")', False),
        ('%"y" = transpose(%"x") {perm = [0, 1]} : f32[4,8] loc("t")', True),
        ('%"y" = transpose(%"x") {perm = [1, 0]} : f32[8,4] loc("t")', False),
        ('%"y" = reduce(%"x") {axes = [1], op = "sum"} : f32[4,1] loc("r")', True),
        ('%"y" = reduce(%"x") {axes = [0], op = "sum"} : f32[1,8] loc("r")', False),
    ],
)
def test_a_layer_splits_when_its_rows_need_only_the_same_rows(line, ok):
    g = graph('input %"x" : f32[4,8]', line, 'output %"y"')
    assert separable(g, g.layers[0], 2) is ok
    assert not separable(g, g.layers[0], 3)  # 4 rows do not split in 3


def test_a_row_constant_keeps_an_add_whole_a_broadcast_one_does_not():
    for shape, ok in (("[1,8]", True), ("[8]", True), ("[4,8]", False)):
        g = graph(
            'input %"x" : f32[4,8]',
            f'const %"k" : f32{shape} sha256={Z}',
            '%"y" = add(%"x", %"k") : f32[4,8] loc("s")',
            'output %"y"',
        )
        assert separable(g, g.layers[0], 2) is ok, shape


def _steps(*groups: tuple[int, ...], nsub: int, loop: bool) -> tuple[Step, ...]:
    if loop:  # one step per layer, in one sub-batch loop
        return tuple(Step((Group(g, Rect(0, 0, 2, 2)),), nsub, s > 0) for s, g in enumerate(groups))
    rects = [Group(g, Rect(i, 0, 1, 1)) for i, g in enumerate(groups)]
    return (Step(tuple(rects), nsub),)


def test_a_pipelined_step_lowers_as_a_wavefront():
    parts = loop_parts(CHAIN, _steps((0,), (1,), (2,), nsub=2, loop=False))
    assert [(p.layer, p.part) for p in parts] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert [p.stage for p in parts] == [0, 0, 1, 1, 2, 2]
    parts = loop_parts(CHAIN, _steps((0,), (1,), (2,), nsub=3, loop=False))
    assert [(p.layer, p.part) for p in parts][:4] == [(0, 0), (0, 1), (1, 0), (0, 2)]


def test_a_loop_runs_one_sub_batch_through_all_its_steps_then_the_next():
    parts = loop_parts(CHAIN, _steps((0,), (1,), (2,), nsub=2, loop=True))
    assert [(p.layer, p.part, p.parts) for p in parts] == [
        (0, 0, 2), (1, 0, 2), (2, 0, 2), (0, 1, 2), (1, 1, 2), (2, 1, 2),
    ]  # fmt: skip
    assert part_positions(parts, 3) == [(0, 3), (1, 4), (2, 5)]  # by sub-batch
    assert part_spans(parts, 3) == [(0, 3), (1, 4), (2, 5)]
    piped = loop_parts(CHAIN, _steps((0,), (1,), (2,), nsub=3, loop=False))
    assert part_positions(piped, 3)[1] == (2, 4, 6)


def test_a_loop_with_a_layer_that_cannot_split_runs_whole_and_no_split_keeps_graph_order():
    g = graph(
        'input %"x" : f32[4,8]',
        '%"a" = relu(%"x") : f32[4,8] loc("a")',
        '%"b" = softmax(%"a") {axis = 0} : f32[4,8] loc("b")',
        'output %"b"',
    )
    assert loop_parts(g, _steps((0,), (1,), nsub=2, loop=True)) == [Part(0), Part(1)]
    assert loop_parts(CHAIN, _steps((0,), (1,), (2,), nsub=1, loop=False)) == [
        Part(0), Part(1), Part(2),
    ]  # fmt: skip
