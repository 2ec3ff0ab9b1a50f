"""Precisions of a target: the [precision.NAME] tables, the target at a precision, element sizes."""

from __future__ import annotations

import pytest

from npucc.errors import NpuccError
from npucc.target import TIERS, load_target, target_from_dict, target_from_json


def test_davinci_core_states_fp16_and_int8_and_keeps_its_fp32_figures():
    t = load_target("davinci-core")
    assert t.supported_precisions() == ["fp32", "fp16", "int8"]
    fp32 = t.at_precision("fp32")
    assert (fp32.cube.m0, fp32.cube.n0, fp32.cube.k0, fp32.vector.width) == (16, 16, 8, 64)
    assert "precision" not in fp32.to_dict() and fp32.accumulator is None
    assert all(fp32.tier_bytes(tier) == 4 for tier in (*TIERS, "DDR"))


def test_fp16_is_the_16x16x16_fractal_into_fp32_with_128_lanes():
    t = load_target("davinci-core").at_precision("fp16")
    assert (t.dtype, t.acc_dtype, t.precision) == ("f16", "f32", "fp16")
    assert (t.cube.m0, t.cube.n0, t.cube.k0, t.cube.macs, t.vector.width) == (16, 16, 16, 4096, 128)
    assert {tier: t.tier_bytes(tier) for tier in (*TIERS, "DDR")} == {
        "L1": 2, "UB": 2, "L0A": 2, "L0B": 2, "L0C": 4, "DDR": 2
    }  # fmt: skip
    # what a stream embeds: the target at fp16 alone, and it round-trips
    assert "precision" not in t.to_dict() and t.to_dict()["target"]["accumulator"] == "f32"
    again = target_from_json(t.to_json())
    assert again == t and again.supported_precisions() == ["fp16"]
    assert t.at_precision("fp16") == t


@pytest.mark.parametrize(
    ("target", "precision", "message"),
    [
        (
            "mesh8x8",
            "fp16",
            "target 'mesh8x8' does not support precision fp16 (supports: fp32, int8)",
        ),
        ("davinci-core", "bf16", "unknown precision 'bf16'"),
    ],
)
def test_an_unsupported_precision_is_refused(target, precision, message):
    with pytest.raises(NpuccError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_target(target).at_precision(precision)


def test_a_target_at_fp16_has_no_fp32_to_go_back_to():
    with pytest.raises(NpuccError, match="supports: fp16"):
        load_target("davinci-core").at_precision("fp16").at_precision("fp32")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["precision"].update(fp8={}), r"unknown precision '\[precision.fp8\]'"),
        (lambda d: d["precision"]["fp16"].pop("k0"), "missing key 'precision.fp16.k0'"),
        (lambda d: d["precision"]["fp16"].update(k0=0), "'precision.fp16.k0' must be positive"),
        (lambda d: d["precision"]["fp16"].update(accumulator="f8"), "fp16.accumulator"),
        (lambda d: d["target"].update(accumulator="f8"), "'target.accumulator' must be one of"),
    ],
)
def test_a_bad_precision_table_names_its_key(edit, message):
    data = load_target("davinci-core").to_dict()
    edit(data)
    with pytest.raises(NpuccError, match=message):
        target_from_dict(data, "t.toml")
