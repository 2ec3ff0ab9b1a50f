"""Codegen's printer: instructions alike but for their addresses share one template."""

from __future__ import annotations

from npucc.codegen.ddr_layout import DdrLayout
from npucc.codegen.emit import _Printer
from npucc.ir.instr_text import format_instr
from npucc.ir.isa import Copy, DdrRef, MemRef, VFill, VUnary
from npucc.ir.isa_cost import instr_energy
from npucc.target import load_target

TARGET = load_target("davinci-core")


def _print(printer: _Printer, instr) -> tuple[str, float]:
    return printer.body(instr, 0, None, [])  # MemRef and DdrRef operands need no replay


def test_the_printer_prints_as_format_instr_and_prices_as_instr_energy():
    layout = DdrLayout(addr={"x": 0x1000, "y": 0x80000})
    printer = _Printer(TARGET, layout)
    for key, off in (("x", 0), ("x", 16), ("y", 3)):
        instr = Copy(MemRef("UB", 256 * off), DdrRef(key, off), (2, 8), (8, 1), (16, 1))
        resolved = Copy(MemRef("UB", 256 * off), MemRef("DDR", layout.addr[key] + 4 * off),
                        (2, 8), (8, 1), (16, 1))  # fmt: skip
        assert _print(printer, instr) == (
            format_instr(resolved, TARGET),
            instr_energy(TARGET, resolved),
        )
    assert len(printer.forms) == 1


def test_floats_equal_but_printed_apart_do_not_share_a_template():
    printer = _Printer(TARGET, DdrLayout())
    for value in (0.0, -0.0, 0, 1, 1.0):
        instr = VFill(MemRef("UB", 64), (4,), (1,), value)
        assert _print(printer, instr)[0] == format_instr(instr, TARGET)
    for scalars in ((1.0,), (1,), (-0.0,)):
        instr = VUnary("muls", MemRef("UB", 0), MemRef("UB", 64), (4,), (1,), (1,), scalars)
        assert _print(printer, instr)[0] == format_instr(instr, TARGET)
    assert len(printer.forms) == 8
