"""The const image: each const's bytes at its address in the storage type, zeros between."""

from __future__ import annotations

import numpy as np
import pytest

from npucc.codegen.ddr_layout import DDR_ALIGN, build_image, layout_ddr
from npucc.ir.program import TiledProgram
from npucc.target import load_target


def _program(precision: str) -> TiledProgram:
    program = TiledProgram("t", load_target("davinci-core").at_precision(precision))
    rng = np.random.default_rng(0)
    program.add_tensor("w", "const", (3, 5), rng.standard_normal((3, 5)).astype(np.float32))
    program.add_tensor("x", "input", (4,))
    program.add_tensor("b", "const", (7,), rng.standard_normal(7))  # float64: converted
    program.add_tensor("big", "const", (2,), np.array([1e6, -1.5], np.float32))
    return program


@pytest.mark.parametrize(("precision", "storage"), [("fp32", "<f4"), ("fp16", "<f2")])
def test_image_holds_each_const_at_its_address(precision: str, storage: str) -> None:
    program = _program(precision)
    layout = layout_ddr(program)
    image = build_image(program, layout)
    assert isinstance(image, bytes) and len(image) == layout.image_size
    want = np.zeros(layout.image_size, np.uint8)
    for t in program.tensors.values():
        if t.role == "const":
            assert t.data is not None
            with np.errstate(over="ignore"):
                data = t.data.reshape(-1).astype(storage).tobytes()
            start = layout.addr[t.key]
            want[start : start + len(data)] = np.frombuffer(data, np.uint8)
    assert image == want.tobytes()
    assert layout.image_size == 3 * DDR_ALIGN  # consts only, each padded
    if precision == "fp16":  # beyond float16's range: +inf, as IEEE rounds
        big = np.frombuffer(image, storage, 2, layout.addr["big"])
        assert np.isinf(big[0]) and big[1] == -1.5
