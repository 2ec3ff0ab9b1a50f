"""Reference models and the onnx wheel's light models: import, canonical ops, numerics."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from apart import run_apart
from frontend_testutil import LIGHT, MODELS, assert_matches_onnxruntime, imported

from npucc.checking import model_file, randomize_weights
from npucc.frontend.onnx_import import load_model
from npucc.transforms.graph_pipeline import import_model

CANONICAL = {
    "conv2d", "gemm", "matmul", "add", "sub", "mul", "div", "max", "min", "relu", "clip",
    "maxpool", "avgpool", "globalavgpool", "globalmaxpool", "concat", "reshape", "transpose",
    "softmax", "lrn", "attention", "layernorm", "gelu",
}  # fmt: skip


def _canonical(g) -> None:
    assert g.layers
    assert {layer.op for layer in g.layers} <= CANONICAL
    assert len({layer.name for layer in g.layers}) == len(g.layers)
    for t in g.tensors.values():
        assert all(isinstance(d, int) and d >= 0 for d in t.shape)
    g.verify()


def test_reference_models_exist():
    names = {p.name for p in MODELS}
    assert {"small_cnn.onnx", "mlp.onnx", "residual_block.onnx", "lrn_concat.onnx"} <= names
    assert {"transformer_encoder.onnx", "decoder_block.onnx"} <= names
    # BERT-base-sized encoder with float16 weights: 29 MB; everything else is small
    assert all(p.stat().st_size < 32_000_000 for p in MODELS)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_reference_model_imports_and_matches_onnxruntime(path):
    g = imported(path)
    _canonical(g)
    assert_matches_onnxruntime(g, path)


@pytest.mark.xdist_group("whole-model")  # one whole network at a time (tests/conftest.py)
@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem)
def test_light_model_imports_and_matches_onnxruntime(path):
    run_apart(_light_model_matches, path)


def _light_model_matches(path: Path) -> None:
    """Import the light model at `path`, check its graph canonical, compare with onnxruntime."""
    # NOTE: seeded random weights: the zoo's own make light SqueezeNet's logits about 6.7e9,
    # where a one-ulp difference of summation order (512) decides a softmax of 0 or 1/968
    # NOTE: written to a file, not held: onnxruntime maps its weights (VGG-19's are 548 MB)
    with tempfile.TemporaryDirectory(prefix="npucc-light-") as folder:
        written = model_file(randomize_weights(load_model(path), seed=0), folder)
        g = import_model(written)
        _canonical(g)
        assert_matches_onnxruntime(g, written)


def test_light_models_present():
    assert len(LIGHT) == 9


def test_small_cnn_canonicalisation():
    g = import_model(MODELS[[p.name for p in MODELS].index("small_cnn.onnx")])
    ops = [layer.op for layer in g.layers]
    assert ops == ["conv2d", "maxpool", "conv2d", "avgpool", "reshape", "gemm", "softmax"]
    conv1 = g.layers[0]
    assert "act" not in conv1.attrs and len(conv1.inputs) == 3  # BN folded
    assert g.layers[1].attrs["act"] == "relu"  # relu fused, then sunk onto the max pool
    assert g.outputs == ["probs"]  # the Identity's graph output name survives
    assert g.layers[-1].outputs == ["probs"]
    assert g.layers[5].attrs["trans_b"] == 1
    assert all(t.data is None or any(n in layer.inputs for layer in g.layers)
               for n, t in g.tensors.items())  # fmt: skip


def test_mlp_old_clip_and_dropout():
    g = import_model(MODELS[[p.name for p in MODELS].index("mlp.onnx")], {"x": (3, 64)})
    assert g.opset == 10
    # MatMul + bias Add pairs are gemms (fold-matmul-bias), the Clip fused into the first
    assert [layer.op for layer in g.layers] == ["gemm", "gemm", "gemm", "softmax"]
    dense = g.layers[1]
    act = (dense.attrs["act"], dense.attrs["act_min"], dense.attrs["act_max"])
    assert act == ("clip", 0.0, 6.0)
    assert g.tensors[g.outputs[0]].shape == (3, 10)


def test_lrn_concat_old_softmax_and_ceil_pools():
    g = import_model(MODELS[[p.name for p in MODELS].index("lrn_concat.onnx")])
    ops = [layer.op for layer in g.layers]
    assert ops[-4:] == ["reshape", "softmax", "reshape", "globalavgpool"]
    assert g.layers[-3].attrs["axis"] == 1
    assert g.tensors[g.layers[-3].outputs[0]].shape == (1, 16 * 7 * 7)
    pool = next(layer for layer in g.layers if layer.op == "maxpool")
    assert pool.attrs["pads"] == (0, 0, 1, 1)  # ceil_mode folded into bottom/right
    concat = next(layer for layer in g.layers if layer.op == "concat")
    assert concat.attrs["axis"] == 1
    clip = next(layer for layer in g.layers if layer.attrs.get("act") == "clip")
    assert (clip.attrs["act_min"], clip.attrs["act_max"]) == (0.0, 6.0)
    same = next(layer for layer in g.layers if layer.name == "branch_b")
    assert same.attrs["pads"] == (1, 1, 1, 1)


def test_residual_block_bn_without_conv_and_groups():
    g = import_model(MODELS[[p.name for p in MODELS].index("residual_block.onnx")])
    assert [layer.op for layer in g.layers[:2]] == ["mul", "add"]
    assert g.tensors[g.layers[0].inputs[1]].shape == (16, 1, 1)
    convs = [layer for layer in g.layers if layer.op == "conv2d"]
    assert [c.attrs["group"] for c in convs] == [1, 1, 4, 1]
    assert convs[-1].attrs["dilations"] == (2, 2)
    # fuse-residual: the residual Add and its Relu became conv2's epilogue (a 4th input)
    residual = next(layer for layer in g.layers if "residual" in layer.src)
    assert residual.op == "conv2d" and len(residual.inputs) == 4
    assert residual.attrs["act"] == "relu" and "r2" in residual.src
