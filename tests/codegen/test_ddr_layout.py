"""The DDR layout and the const image: every const's bytes at its address, zeros between."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from npucc.codegen.ddr_layout import build_image, layout_ddr
from npucc.compiler import compile_to
from npucc.ir.dtypes import NUMPY_DTYPES
from npucc.ir.program import TiledProgram
from npucc.options import CompileOptions

MODEL = Path(__file__).resolve().parents[2] / "models" / "small_cnn.onnx"


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_image_holds_each_const_at_its_address_and_zeros_between(precision: str) -> None:
    program = compile_to(MODEL, "lower-tiles", CompileOptions(precision=precision))
    assert isinstance(program, TiledProgram)
    layout = layout_ddr(program)
    consts = [t for t in program.tensors.values() if t.role == "const"]
    assert consts
    before = {t.key: np.array(t.data) for t in consts}
    built = build_image(program, layout)
    image = np.frombuffer(built, np.uint8)
    assert image.size == layout.image_size
    storage = np.dtype(NUMPY_DTYPES[program.target.dtype])
    covered = np.zeros(image.size, bool)
    for t in consts:
        assert t.data is not None
        start = layout.addr[t.key]
        expected = before[t.key].reshape(-1).astype(storage)
        got = image[start : start + expected.nbytes].view(storage)
        np.testing.assert_array_equal(got, expected)
        covered[start : start + expected.nbytes] = True
        # a const already of the storage type reads its values from the image, read-only
        np.testing.assert_array_equal(t.data, before[t.key])
        assert np.shares_memory(t.data, image) == (t.data.dtype == storage)
        assert not (np.shares_memory(t.data, image) and t.data.flags.writeable)
    assert (precision == "fp32") == all(np.shares_memory(t.data, image) for t in consts)
    assert not image[~covered].any()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_consts_keep_their_values_and_storage_typed_ones_read_the_image(precision: str) -> None:
    program = compile_to(MODEL, "lower-tiles", CompileOptions(precision=precision))
    assert isinstance(program, TiledProgram)
    consts = [t for t in program.tensors.values() if t.role == "const"]
    before = {t.key: t.data.copy() for t in consts if t.data is not None}
    image = build_image(program, layout_ddr(program))
    storage = np.dtype(NUMPY_DTYPES[program.target.dtype])
    for t in consts:
        assert t.data is not None
        np.testing.assert_array_equal(t.data, before[t.key])
        assert t.data.shape == before[t.key].shape and t.data.dtype == before[t.key].dtype
        in_image = np.shares_memory(t.data, np.frombuffer(image, np.uint8))
        assert in_image == (t.data.dtype == storage)
    assert build_image(program, layout_ddr(program)) == image  # a second build: the same bytes
