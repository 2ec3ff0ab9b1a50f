"""fuse-attention, fuse-layernorm and fuse-gelu: matched patterns become one layer; unmatched
variants still compile through the individual operators; both agree with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import npucc
from npucc.backend.lower.work import layer_work
from npucc.transforms.graph_pipeline import import_model

RNG = np.random.default_rng(7)


class Net:
    """A tiny graph builder: nodes, float constants, int64 shapes."""

    def __init__(self) -> None:
        self.nodes, self.inits, self.k = [], [], 0

    def c(self, value, dtype=np.float32) -> str:
        self.k += 1
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), f"c{self.k}"))
        return f"c{self.k}"

    def n(self, op, *inputs, **attrs) -> str:
        self.k += 1
        self.nodes.append(helper.make_node(op, list(inputs), [f"t{self.k}"], **attrs))
        return f"t{self.k}"

    def model(self, inputs: dict, out: str, opset: int = 13) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "y"
        g = helper.make_graph(
            self.nodes,
            "m",
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            self.inits,
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


def check(model: onnx.ModelProto) -> list[str]:
    """Compare npucc with onnxruntime; returns the canonical ops of the compiled graph."""
    feeds = {
        v.name: RNG.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for v in model.graph.input
    }
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = npucc.compile(model, target="davinci-core").run(feeds)["y"]
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max() + 1e-5
    return [layer.op for layer in import_model(model).layers]


def attention_net(scale_op="Div", mask=True, prescale=False, seq=24, heads=2, d=8, axis=-1):
    """Multi-head self-attention on x [1, seq, heads*d] in the exported-PyTorch layout."""
    n, h = Net(), heads * d

    def proj(tag: str, perm: list[int]) -> str:
        w = n.c(RNG.standard_normal((h, h)) * 0.3)
        r = n.n("Reshape", n.n("MatMul", "x", w), n.c([1, seq, heads, d], np.int64))
        return n.n("Transpose", r, perm=perm)

    q, k, v = proj("q", [0, 2, 1, 3]), proj("k", [0, 2, 3, 1]), proj("v", [0, 2, 1, 3])
    if prescale:
        q = n.n("Mul", q, n.c(d**-0.5))
    s = n.n("MatMul", q, k)
    if not prescale:
        s = n.n(scale_op, s, n.c(d**0.5 if scale_op == "Div" else d**-0.5))
    if mask:
        s = n.n("Add", s, n.c(np.triu(np.full((seq, seq), -1e4), 1)))
    o = n.n("MatMul", n.n("Softmax", s, axis=axis), v)
    o = n.n("Reshape", n.n("Transpose", o, perm=[0, 2, 1, 3]), n.c([1, seq, h], np.int64))
    n.n("Identity", o)
    return n.model({"x": [1, seq, h]}, "y")


@pytest.mark.parametrize(("scale_op", "mask"), [("Div", True), ("Mul", False)])
def test_attention_fused(scale_op, mask):
    ops = check(attention_net(scale_op, mask))
    assert ops.count("attention") == 1 and "softmax" not in ops
    assert ops.count("transpose") == 1  # q, k, v transposes absorbed as strides


def test_attention_long_sequence_streams_blocks():
    assert "attention" in check(attention_net(seq=300, heads=1, d=16))


def test_attention_prescaled_query_fused():
    assert "attention" in check(attention_net(prescale=True))


def test_attention_unmatched_variant_compiles():
    ops = check(attention_net(axis=-2))  # softmax over the queries: not an attention
    assert "attention" not in ops and "softmax" in ops


def layernorm_net(axes=(-1,), affine=True):
    n = Net()
    m = n.n("ReduceMean", "x", axes=list(axes))
    d = n.n("Sub", "x", m)
    var = n.n("ReduceMean", n.n("Pow", d, n.c(2.0)), axes=list(axes))
    y = n.n("Div", d, n.n("Sqrt", n.n("Add", var, n.c(1e-5))))
    if affine:
        y = n.n("Add", n.n("Mul", y, n.c(RNG.uniform(0.5, 1.5, 16))), n.c(RNG.standard_normal(16)))
    n.n("Identity", y)
    return n.model({"x": [2, 5, 16]}, "y")


@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_fused(affine):
    ops = check(layernorm_net(affine=affine))
    assert ops == ["layernorm"]


def test_layernorm_unmatched_variant_compiles():
    ops = check(layernorm_net(axes=(1,), affine=False))
    assert "layernorm" not in ops and "reduce" in ops


def gelu_net(order: str):
    n = Net()
    e = n.n("Add", n.n("Erf", n.n("Div", "x", n.c(np.sqrt(2.0)))), n.c(1.0))
    if order == "x_first":
        n.n("Mul", n.n("Mul", "x", e), n.c(0.5))
    elif order == "half_first":
        n.n("Mul", "x", n.n("Mul", e, n.c(0.5)))
    else:  # 0.5 is 0.45: not a GELU
        n.n("Mul", n.n("Mul", "x", e), n.c(0.45))
    return n.model({"x": [3, 40]}, "y")


@pytest.mark.parametrize("order", ["x_first", "half_first"])
def test_gelu_fused(order):
    assert check(gelu_net(order)) == ["gelu"]


def test_gelu_unmatched_variant_compiles():
    assert "gelu" not in check(gelu_net("other"))


def tanh_gelu_net(form: str):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as exporters write it."""
    n = Net()
    if form == "pow":  # HF NewGELU: x ** 3, and (0.5 * x) * h
        cube = n.n("Pow", "x", n.c(3.0))
    else:  # x * x * x, and (x * h) * 0.5
        cube = n.n("Mul", "x", n.n("Mul", "x", "x"))
    coeff = 0.05 if form == "other" else 0.044715
    inner = n.n("Add", "x", n.n("Mul", n.c(coeff), cube))
    h = n.n("Add", n.c(1.0), n.n("Tanh", n.n("Mul", n.c(np.sqrt(2 / np.pi)), inner)))
    if form == "pow":
        n.n("Mul", n.n("Mul", n.c(0.5), "x"), h)
    else:
        n.n("Mul", n.n("Mul", "x", h), n.c(0.5))
    return n.model({"x": [3, 40]}, "y")


@pytest.mark.parametrize("form", ["pow", "products"])
def test_tanh_gelu_fused(form):
    assert check(tanh_gelu_net(form)) == ["gelu"]
    layer = import_model(tanh_gelu_net(form)).layers[0]
    assert layer.attrs["approximate"] == "tanh"


def test_tanh_gelu_unmatched_variant_compiles():
    assert "gelu" not in check(tanh_gelu_net("other"))


def tf2onnx_depthwise_net(c=8, bias=False):
    """tf2onnx's depthwise conv: Conv(group=C) -> Mul, Add by [C, 1, 1] (its BN) -> Clip(0, 6)."""
    n = Net()
    w = [n.c(RNG.standard_normal((c, 1, 3, 3)))] + ([n.c(RNG.standard_normal(c))] if bias else [])
    y = n.n("Conv", "x", *w, group=c, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    y = n.n("Mul", y, n.c(RNG.uniform(0.5, 1.5, (c, 1, 1))))
    y = n.n("Add", n.c(RNG.standard_normal((1, c, 1, 1))), y)
    n.n("Clip", y, n.c(0.0), n.c(6.0))
    return n.model({"x": (1, c, 6, 5)}, "y")


@pytest.mark.parametrize("bias", [False, True])
def test_conv_affine_folded_into_the_depthwise_conv(bias):
    assert check(tf2onnx_depthwise_net(bias=bias)) == ["conv2d"]


def tf2onnx_layernorm_net(form: str, gamma=True, beta=True):
    """LayerNorm over the last axis as tf2onnx writes it: SquaredDifference as Sub + Mul(d, d),
    Rsqrt as Sqrt + Reciprocal; `centred`: d * inv, then * gamma, + beta; `bn`:
    tf.nn.batch_normalization's x * inv + (beta - mean * inv), inv = rsqrt * gamma; `keras3`:
    x * inv + (-mean * inv + beta)."""
    n = Net()
    x = "x"
    m = n.n("ReduceMean", x, axes=[-1], keepdims=1)
    d = n.n("Sub", x, m)
    var = n.n("ReduceMean", n.n("Mul", d, d), axes=[-1], keepdims=1)
    r = n.n("Reciprocal", n.n("Sqrt", n.n("Add", var, n.c(1e-3))))
    g_, b_ = n.c(RNG.uniform(0.5, 1.5, 16)), n.c(RNG.standard_normal(16))
    if form == "centred":
        y = n.n("Mul", d, r)
        y = n.n("Mul", y, g_) if gamma else y
        y = n.n("Add", y, b_) if beta else y
    else:
        inv = n.n("Mul", r, g_) if gamma else r
        xs = n.n("Mul", x, inv)
        if form == "bn":
            res = n.n("Sub", b_, n.n("Mul", m, inv))
        else:
            res = n.n("Mul", n.n("Neg", m), inv)
            res = n.n("Add", res, b_) if beta else res
        y = n.n("Add", xs, res)
    n.n("Identity", y)
    return n.model({"x": [2, 5, 16]}, "y")


@pytest.mark.parametrize(
    ("form", "gamma", "beta"),
    [("centred", True, True), ("centred", False, False), ("bn", True, True),
     ("bn", False, True), ("keras3", True, True), ("keras3", True, False)],
)  # fmt: skip
def test_tf2onnx_layernorm_fused(form, gamma, beta):
    assert check(tf2onnx_layernorm_net(form, gamma, beta)) == ["layernorm"]


def test_global_average_pool_layernorm_fused():
    """tf2onnx's spatial mean: GlobalAveragePool -> Sub -> Mul -> GlobalAveragePool -> Add ->
    Sqrt -> Reciprocal -> Mul normalises each [h, w] plane."""
    n = Net()
    m = n.n("GlobalAveragePool", "x")
    d = n.n("Sub", "x", m)
    var = n.n("GlobalAveragePool", n.n("Mul", d, d))
    n.n("Mul", d, n.n("Reciprocal", n.n("Sqrt", n.n("Add", var, n.c(1e-5)))))
    assert check(n.model({"x": [1, 6, 4, 5]}, "y")) == ["layernorm"]


def test_layernorm_whose_centred_input_has_another_reader_is_not_fused():
    n = Net()
    m = n.n("ReduceMean", "x", axes=[-1], keepdims=1)
    d = n.n("Sub", "x", m)
    var = n.n("ReduceMean", n.n("Mul", d, d), axes=[-1], keepdims=1)
    r = n.n("Reciprocal", n.n("Sqrt", n.n("Add", var, n.c(1e-3))))
    n.n("Add", n.n("Mul", "x", r), n.n("Mul", d, n.c(2.0)))  # d is read twice: not a layernorm
    ops = check(n.model({"x": [2, 5, 16]}, "y"))
    assert "layernorm" not in ops


def keras_mha_net(seq=12, heads=2, dh=8, dm=16):
    """Keras MultiHeadAttention as exported: EinsumDense projections (abc,cde->abde + bias),
    the query scaled by 1/sqrt(dh), scores einsum aecd,abcd->acbe (key, query), softmax over
    the keys, aecd combine acbe,aecd->abcd, output projection abcd,cde->abe + bias."""
    n = Net()

    def proj(src: str) -> str:
        w = n.c(RNG.standard_normal((dm, heads, dh)) * 0.3)
        y = n.n("Einsum", src, w, equation="abc,cde->abde")
        return n.n("Add", y, n.c(RNG.standard_normal((heads, dh)) * 0.1))

    q, k, v = proj("x"), proj("x"), proj("x")
    s = n.n("Einsum", k, n.n("Mul", q, n.c(dh**-0.5)), equation="aecd,abcd->acbe")
    o = n.n("Einsum", n.n("Softmax", s, axis=3), v, equation="acbe,aecd->abcd")
    o = n.n("Einsum", o, n.c(RNG.standard_normal((heads, dh, dm)) * 0.3), equation="abcd,cde->abe")
    n.n("Add", o, n.c(RNG.standard_normal(dm) * 0.1))
    return n.model({"x": [2, seq, dm]}, "y")


def test_keras_multi_head_attention_fused():
    """The frontend lowers the einsums to matmuls, reshapes and transposes; the scores come
    out transposed (K Qᵀ, then a transpose): still one attention, no softmax left."""
    ops = check(keras_mha_net())
    assert ops.count("attention") == 1 and "softmax" not in ops


def residual_net(bias: bool, relu: bool, swap: bool):
    """A ResNet-style block: conv 3x3 (16 -> 16) on x, + x (operands in either order), relu."""
    n = Net()
    w = [n.c(RNG.standard_normal((16, 16, 3, 3)) * 0.1)] + (
        [n.c(RNG.standard_normal(16))] if bias else []
    )
    y = n.n("Conv", "x", *w, pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    y = n.n("Add", *(("x", y) if swap else (y, "x")))
    if relu:
        y = n.n("Relu", y)
    n.n("Identity", y)
    return n.model({"x": [1, 16, 20, 20]}, "y")


@pytest.mark.parametrize(("bias", "relu", "swap"), [(True, True, False), (False, False, True)])
def test_residual_add_fused_into_the_conv(bias, relu, swap):
    assert check(residual_net(bias, relu, swap)) == ["conv2d"]


def test_residual_add_fused_into_the_gemm_keeps_the_layer_work():
    n = Net()
    e = n.n("Gemm", "a", n.c(RNG.standard_normal((40, 24))), n.c(RNG.standard_normal(24)))
    n.n("Relu", n.n("Add", "r", e))
    model = n.model({"a": [8, 40], "r": [8, 24]}, "y")
    assert check(model) == ["gemm"]
    (work,) = layer_work(import_model(model))
    assert work.macs == 8 * 40 * 24 and len(work.sources) == 3  # Gemm, Add and Relu
    (row,) = npucc.compile(model, target="davinci-core").stats["layers"]
    assert row["macs"] == work.macs and row["ddr_read"] > 0


def test_residual_of_a_shared_conv_output_is_not_fused():
    n = Net()
    y = n.n("Conv", "x", n.c(RNG.standard_normal((4, 4, 1, 1))), kernel_shape=[1, 1])
    n.n("Mul", n.n("Add", y, "x"), y)
    assert check(n.model({"x": [1, 4, 5, 5]}, "y")) == ["conv2d", "add", "mul"]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_residual_fuse_into_dense_layers_through_their_views(approximate):
    """A transformer MLP on [1, S, D] activations: each dense layer is a gemm viewed back as
    [1, S, N]; its gelu and its residual add still fuse into it (sink-views)."""
    n = Net()
    h = n.n(
        "Add", n.n("MatMul", "x", n.c(RNG.standard_normal((40, 64)))), n.c(RNG.standard_normal(64))
    )
    g = n.n("Gelu", h, approximate=approximate)
    out = n.n(
        "Add",
        n.n("MatMul", g, n.c(RNG.standard_normal((64, 40)) / 8)),
        n.c(RNG.standard_normal(40)),
    )
    n.n("Add", out, "x")
    model = n.model({"x": [1, 24, 40]}, "y", opset=20)
    ops = check(model)
    assert [op for op in ops if op != "reshape"] == ["gemm", "gemm"]
    first, second = (layer for layer in import_model(model).layers if layer.op == "gemm")
    assert first.attrs["act"] == ("gelu_tanh" if approximate == "tanh" else "gelu")
    assert len(second.inputs) == 4  # the residual
