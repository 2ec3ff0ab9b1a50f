"""Codegen's printer: instructions alike but for their addresses share one template."""

from __future__ import annotations

from types import SimpleNamespace

from npucc.codegen.ddr_layout import DdrLayout
from npucc.codegen.printer import Printer, resolve
from npucc.ir.instr_text import format_instr
from npucc.ir.isa import BufRef, Copy, DdrRef, MemRef, VBinary, VFill, VUnary
from npucc.ir.isa_cost import instr_energy
from npucc.ir.replay import Replay
from npucc.ir.stream_text import line_head
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _replay(offsets: dict[int, int], homes: dict[int, list[tuple[int, int]]]) -> SimpleNamespace:
    """What the printer reads of a Replay: its buffers' offsets, the moved ones' homes (by
    position; here each node's position is its id) and `offset_at`."""
    stub = SimpleNamespace(offsets=offsets, homes=homes, position=list(range(16)))
    stub.offset_at = lambda node, buf: Replay.offset_at(stub, node, buf)  # type: ignore[arg-type]
    return stub


def _expected(printer: Printer, replay, tiers, instr, node: int, pipe: str) -> tuple[str, float]:
    resolved = resolve(instr, node, replay, printer.layout, TARGET, tiers.__getitem__)
    return line_head(pipe, format_instr(resolved, TARGET)), instr_energy(TARGET, resolved)


def test_the_printer_prints_as_format_instr_and_prices_as_instr_energy():
    layout = DdrLayout(addr={"x": 0x1000, "y": 0x80000})
    printer = Printer(TARGET, layout)
    replay = _replay({}, {})
    render = printer.core(replay, []).render(Copy)
    for key, off in (("x", 0), ("x", 16), ("y", 3)):
        instr = Copy(MemRef("UB", 256 * off), DdrRef(key, off), (2, 8), (8, 1), (16, 1))
        assert render(instr, 0, "MTE2") == _expected(printer, replay, [], instr, 0, "MTE2")
    assert len(printer.forms) == 1


def test_buffer_operands_at_their_offset_at_the_node_a_spill_moves_them():
    tiers = ["UB", "UB", "L1"]
    replay = _replay({0: 64, 1: 128, 2: 0}, {1: [(0, 128), (5, 512)]})
    printer = Printer(TARGET, DdrLayout())
    core = printer.core(replay, tiers)
    render = core.render(VBinary)
    for node in (2, 5, 9):
        instr = VBinary("add", BufRef(0, "UB", 3), BufRef(1, "UB", 2), BufRef(1, "UB", 0), (4,),
                        (1,), (1,), (1,))  # fmt: skip
        assert render(instr, node, "VECTOR") == _expected(printer, replay, tiers, instr, node,
                                                          "VECTOR")  # fmt: skip
    copy = Copy(BufRef(0, "UB", 1), BufRef(2, "L1", 7), (4,), (1,), (1,))
    assert core.render(Copy)(copy, 1, "MTE1") == _expected(printer, replay, tiers, copy, 1,
                                                           "MTE1")  # fmt: skip
    assert core.offs == [64, None, 0]  # buffer 1 moves: Replay.offset_at at each node


def test_floats_equal_but_printed_apart_do_not_share_a_template():
    printer = Printer(TARGET, DdrLayout())
    core = printer.core(_replay({}, {}), [])
    for value in (0.0, -0.0, 0, 1, 1.0):
        instr = VFill(MemRef("UB", 64), (4,), (1,), value)
        want = line_head("VECTOR", format_instr(instr, TARGET))
        assert core.render(VFill)(instr, 0, "VECTOR")[0] == want
    for scalars in ((1.0,), (1,), (-0.0,)):
        instr = VUnary("muls", MemRef("UB", 0), MemRef("UB", 64), (4,), (1,), (1,), scalars)
        want = line_head("VECTOR", format_instr(instr, TARGET))
        assert core.render(VUnary)(instr, 0, "VECTOR")[0] == want
    assert len(printer.forms) == 8


def test_a_form_is_kept_per_pipe():
    printer = Printer(TARGET, DdrLayout())
    render = printer.core(_replay({}, {}), []).render(Copy)
    instr = Copy(MemRef("UB", 0), MemRef("UB", 64), (4,), (1,), (1,))
    assert render(instr, 0, "VECTOR")[0].startswith("  VECTOR copy ")
    assert render(instr, 0, "MTE1")[0].startswith("  MTE1 copy ")
    assert len(printer.forms) == 2
