"""Einsum lowered to transposes, sums and batched matmuls, against onnxruntime."""

from __future__ import annotations

import pytest
from frontend_testutil import assert_matches_onnxruntime, tiny_model
from onnx import helper

from npucc.errors import NpuccError
from npucc.frontend import import_model
from npucc.tools.cli import main


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bihd,bjhd->bhij", [[2, 5, 3, 4], [2, 6, 3, 4]]),  # attention scores
        ("bhij,bjhd->bihd", [[2, 3, 5, 6], [2, 6, 3, 4]]),  # attention context
        ("ij,jk->ik", [[3, 4], [4, 5]]),
        ("ij,jk", [[3, 4], [4, 5]]),  # implicit output: ik
        ("ij->ji", [[3, 4]]),
        ("ijk->j", [[2, 3, 4]]),  # sums of one operand
        ("i,j->ij", [[3], [4]]),  # outer product
        ("i,i->", [[5], [5]]),  # dot product
        ("...ij,...jk->...ik", [[2, 3, 4, 5], [2, 3, 5, 2]]),
        ("bij,bjk,bkl->bil", [[2, 3, 4], [2, 4, 5], [2, 5, 2]]),  # three operands
        ("ab,cb->ac", [[3, 4], [5, 4]]),
        ("abc,cd->abd", [[2, 3, 4], [4, 6]]),
    ],
)
def test_einsum_matches_onnxruntime(equation, shapes):
    names = [f"x{k}" for k in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    model = tiny_model([node], dict(zip(names, shapes, strict=True)), ["y"], opset=12)
    g = import_model(model)
    assert "einsum" not in {layer.op for layer in g.layers}
    assert_matches_onnxruntime(g, model)


def test_einsum_attention_passes_npucc_check(tmp_path, capsys):
    nodes = [
        helper.make_node("Einsum", ["q", "k"], ["s"], equation="bihd,bjhd->bhij"),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("Einsum", ["p", "v"], ["y"], equation="bhij,bjhd->bihd"),
    ]
    shape = [1, 8, 2, 16]
    model = tiny_model(nodes, {"q": shape, "k": shape, "v": shape}, ["y"], opset=13)
    path = tmp_path / "einsum.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["check", str(path), "--quiet"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_einsum_diagonal_is_a_clean_error():
    node = helper.make_node("Einsum", ["x"], ["y"], equation="ii->i")
    with pytest.raises(NpuccError, match="repeated subscript"):
        import_model(tiny_model([node], {"x": [3, 3]}, ["y"], opset=12))
