"""Build the reference ONNX models (random weights, fixed seed) and check each with onnxruntime.

Run: python models/build_models.py  (writes models/*.onnx next to this script)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SEED = 20240601


class Builder:
    """Accumulates nodes and initializers of one model graph."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def const(self, name: str, data: np.ndarray) -> str:
        """Add an initializer; returns its name."""
        self.inits.append(numpy_helper.from_array(np.asarray(data), name))
        return name

    def weight(self, name: str, *shape: int) -> str:
        """A float32 weight, He-scaled so activations stay O(1)."""
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        data = self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        return self.const(name, data.astype(np.float32))

    def node(self, op: str, inputs: list[str], output: str, **attrs: object) -> str:
        """Add a node named after its output; returns the output name."""
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def conv(self, x: str, name: str, c_in: int, c_out: int, k: int, **attrs: object) -> str:
        """Conv with weights and bias."""
        group = int(attrs.get("group", 1))  # type: ignore[call-overload]
        w = self.weight(f"{name}.w", c_out, c_in // group, k, k)
        b = self.const(f"{name}.b", (self.rng.standard_normal(c_out) * 0.1).astype(np.float32))
        return self.node("Conv", [x, w, b], name, **attrs)

    def bn(self, x: str, name: str, c: int) -> str:
        """Inference BatchNormalization with non-trivial statistics."""
        r = self.rng
        params = [
            self.const(f"{name}.scale", r.uniform(0.5, 1.5, c).astype(np.float32)),
            self.const(f"{name}.bias", (r.standard_normal(c) * 0.1).astype(np.float32)),
            self.const(f"{name}.mean", (r.standard_normal(c) * 0.1).astype(np.float32)),
            self.const(f"{name}.var", r.uniform(0.5, 2.0, c).astype(np.float32)),
        ]
        return self.node("BatchNormalization", [x, *params], name, epsilon=1e-5)

    def model(
        self, name: str, inputs: dict[str, list[int]], outputs: list[str], opset: int
    ) -> onnx.ModelProto:
        """The finished, checked model."""
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="npucc-models"
        )
        model.ir_version = 7
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(model, full_check=True)
        return model


def small_cnn() -> onnx.ModelProto:
    """conv+BN+relu, maxpool, strided padded conv, avgpool, flatten, gemm, softmax, identity."""
    b = Builder(SEED)
    x = b.conv("input", "conv1", 3, 8, 3, pads=[1, 1, 1, 1])
    x = b.node("Relu", [b.bn(x, "bn1", 8)], "relu1")
    x = b.node("MaxPool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Relu", [b.conv(x, "conv2", 8, 16, 3, strides=[2, 2], pads=[1, 1, 1, 1])], "relu2")
    x = b.node("AveragePool", [x], "pool2", kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Flatten", [x], "flatten", axis=1)
    x = b.node("Gemm", [x, b.weight("fc.w", 10, 256), b.weight("fc.b", 10)], "fc", transB=1)
    x = b.node("Softmax", [x], "softmax", axis=-1)
    b.node("Identity", [x], "probs")
    return b.model("small_cnn", {"input": [1, 3, 32, 32]}, ["probs"], 13)


def mlp() -> onnx.ModelProto:
    """gemm+relu, matmul+add+clip (opset 10 attribute form), dropout, matmul+add, softmax."""
    b = Builder(SEED + 1)
    x = b.node("Gemm", ["x", b.weight("fc1.w", 64, 128), b.weight("fc1.b", 128)], "fc1")
    x = b.node("Relu", [x], "relu1")
    x = b.node("MatMul", [x, b.weight("fc2.w", 128, 64)], "fc2")
    x = b.node("Add", [x, b.weight("fc2.b", 64)], "fc2.bias")
    x = b.node("Clip", [x], "relu6", min=0.0, max=6.0)
    x = b.node("Dropout", [x], "dropout", ratio=0.25)
    x = b.node("MatMul", [x, b.weight("fc3.w", 64, 10)], "fc3")
    x = b.node("Add", [x, b.weight("fc3.b", 10)], "logits")
    b.node("Softmax", [x], "probs", axis=1)
    return b.model("mlp", {"x": ["batch", 64]}, ["probs"], 10)


def residual_block() -> onnx.ModelProto:
    """BN on the input, conv-bn-relu-conv-bn + identity add + relu, grouped and dilated convs."""
    b = Builder(SEED + 2)
    x0 = b.bn("input", "bn0", 16)
    x = b.node("Relu", [b.bn(b.conv(x0, "conv1", 16, 16, 3, pads=[1, 1, 1, 1]), "bn1", 16)], "r1")
    x = b.bn(b.conv(x, "conv2", 16, 16, 3, pads=[1, 1, 1, 1]), "bn2", 16)
    x = b.node("Relu", [b.node("Add", [x, x0], "residual")], "r2")
    x = b.conv(x, "gconv", 16, 32, 3, group=4, pads=[1, 1, 1, 1])
    x = b.node("Relu", [b.bn(x, "bn3", 32)], "r3")
    x = b.conv(x, "dconv", 32, 16, 3, dilations=[2, 2], pads=[2, 2, 2, 2])
    b.node("Relu", [x], "output")
    return b.model("residual_block", {"input": [1, 16, 16, 16]}, ["output"], 13)


def lrn_concat() -> onnx.ModelProto:
    """LRN, ceil-mode pools, branches (clip via inputs, SAME conv) concatenated, softmax, GAP."""
    b = Builder(SEED + 3)
    x = b.node("Relu", [b.conv("image", "conv1", 3, 16, 5, pads=[2, 2, 2, 2])], "relu1")
    x = b.node("LRN", [x], "lrn", size=5, alpha=1e-3, beta=0.75, bias=2.0)
    x = b.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    lo, hi = b.const("clip.min", np.float32(0.0)), b.const("clip.max", np.float32(6.0))
    a = b.node("Clip", [b.conv(x, "branch_a", 16, 8, 1), lo, hi], "clip")
    c = b.conv(x, "branch_b", 16, 8, 3, auto_pad="SAME_UPPER")
    c = b.node("Relu", [c], "relu_b")
    x = b.node("Concat", [a, c], "concat", axis=-3)
    x = b.node("AveragePool", [x], "pool2", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    x = b.node("Softmax", [x], "softmax", axis=1)  # opset < 13: over the flattened C*H*W
    b.node("GlobalAveragePool", [x], "probs")
    return b.model("lrn_concat", {"image": [1, 3, 28, 28]}, ["probs"], 11)


class Transformer(Builder):
    """A Builder with the layers of a transformer (exported-PyTorch style node patterns)."""

    def __init__(self, seed: int, hidden: int, weight_dtype: type = np.float32) -> None:
        super().__init__(seed)
        self.hidden = hidden
        self.weight_dtype = weight_dtype  # float16: stored half, Cast to float32 in the graph

    def matrix(self, name: str, *shape: int) -> str:
        """A weight matrix (std 0.02, as BERT's initialiser) as float32 in the graph."""
        data = (self.rng.standard_normal(shape) * 0.02).astype(self.weight_dtype)
        if self.weight_dtype == F32:
            return self.const(name, data)
        return self.node("Cast", [self.const(f"{name}.half", data)], name, to=TensorProto.FLOAT)

    def linear(self, x: str, name: str, n_in: int, n_out: int) -> str:
        """MatMul by [n_in, n_out] + bias."""
        w = self.matrix(f"{name}.w", n_in, n_out)
        b = self.const(f"{name}.b", (self.rng.standard_normal(n_out) * 0.02).astype(F32))
        return self.node("Add", [self.node("MatMul", [x, w], f"{name}.mm"), b], name)

    def shape(self, name: str, *dims: int) -> str:
        """An int64 shape constant."""
        return self.const(name, np.array(dims, np.int64))

    def heads(self, x: str, name: str, seq: int, heads: int, perm: list[int]) -> str:
        """[1, S, H] -> [1, heads, S, d] (perm 0,2,1,3) or [1, heads, d, S] (perm 0,2,3,1)."""
        hidden = self.hidden
        r = self.node("Reshape", [x, self.shape(f"{name}.shape", 1, seq, heads, hidden // heads)],
                      f"{name}.split")  # fmt: skip
        return self.node("Transpose", [r], f"{name}.heads", perm=perm)

    def attention(self, x: str, name: str, seq: int, heads: int, mask: str) -> str:
        """Multi-head scaled dot-product attention with an additive mask, and the output proj."""
        h = self.hidden
        q = self.heads(self.linear(x, f"{name}.q", h, h), f"{name}.q", seq, heads, [0, 2, 1, 3])
        k = self.heads(self.linear(x, f"{name}.k", h, h), f"{name}.k", seq, heads, [0, 2, 3, 1])
        v = self.heads(self.linear(x, f"{name}.v", h, h), f"{name}.v", seq, heads, [0, 2, 1, 3])
        s = self.node("MatMul", [q, k], f"{name}.scores")
        scale = self.const(f"{name}.scale", np.array(np.sqrt(h // heads), F32))
        s = self.node("Div", [s, scale], f"{name}.scaled")
        s = self.node("Add", [s, mask], f"{name}.masked")
        p = self.node("Softmax", [s], f"{name}.probs", axis=-1)
        o = self.node("MatMul", [p, v], f"{name}.context")
        o = self.node("Transpose", [o], f"{name}.merge", perm=[0, 2, 1, 3])
        o = self.node("Reshape", [o, self.shape(f"{name}.flat", 1, seq, h)], f"{name}.concat")
        return self.linear(o, f"{name}.out", h, h)

    def layer_norm(self, x: str, name: str) -> str:
        """LayerNorm decomposed as older exporters write it."""
        h = self.hidden
        m = self.node("ReduceMean", [x], f"{name}.mean", axes=[-1])
        d = self.node("Sub", [x, m], f"{name}.centered")
        two = self.const(f"{name}.two", np.array(2.0, F32))
        v = self.node("ReduceMean", [self.node("Pow", [d, two], f"{name}.sq")], f"{name}.var",
                      axes=[-1])  # fmt: skip
        eps = self.const(f"{name}.eps", np.array(1e-12, F32))
        sd = self.node("Sqrt", [self.node("Add", [v, eps], f"{name}.var_eps")], f"{name}.std")
        y = self.node("Div", [d, sd], f"{name}.normed")
        g = self.const(f"{name}.gamma", (1 + 0.1 * self.rng.standard_normal(h)).astype(F32))
        b = self.const(f"{name}.beta", (0.1 * self.rng.standard_normal(h)).astype(F32))
        return self.node("Add", [self.node("Mul", [y, g], f"{name}.scaled"), b], name)

    def gelu(self, x: str, name: str) -> str:
        """Erf GELU decomposed as older exporters write it."""
        c = {k: self.const(f"{name}.{k}", np.array(v, F32))
             for k, v in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))}  # fmt: skip
        e = self.node("Erf", [self.node("Div", [x, c["sqrt2"]], f"{name}.div")], f"{name}.erf")
        e = self.node("Add", [e, c["one"]], f"{name}.add")
        return self.node("Mul", [self.node("Mul", [x, e], f"{name}.mul"), c["half"]], name)


F32 = np.float32
# Encoder sizes: BERT-base's layer (hidden 768, 12 heads of 64, FFN 3072), 2 layers, sequence
# 128. The weight matrices are stored as float16 and Cast to float32 in the graph (as
# mixed-precision exports do) so that the file is 28 MB instead of 57 MB.
ENCODER = {"hidden": 768, "heads": 12, "ffn": 3072, "layers": 2, "seq": 128}
DECODER = {"hidden": 256, "heads": 4, "ffn": 1024, "seq": 64}


def transformer_encoder() -> onnx.ModelProto:
    """BERT-style encoder: position embeddings (Gather), 2 post-LN layers, padding mask."""
    cfg = ENCODER
    b = Transformer(SEED + 4, cfg["hidden"], np.float16)
    h, seq = cfg["hidden"], cfg["seq"]
    table = b.matrix("pos.table", 512, h)
    pos = b.node("Gather", [table, b.const("pos.ids", np.arange(seq, dtype=np.int64))], "pos")
    x = b.layer_norm(b.node("Add", ["embeddings", pos], "embed"), "embed.ln")
    mask = np.zeros((1, 1, 1, seq), F32)
    mask[..., seq - 16 :] = -10000.0  # the last 16 tokens are padding
    m = b.const("attention_mask", mask)
    for i in range(cfg["layers"]):
        a = b.attention(x, f"l{i}.attn", seq, cfg["heads"], m)
        x = b.layer_norm(b.node("Add", [a, x], f"l{i}.res1"), f"l{i}.ln1")
        f = b.gelu(b.linear(x, f"l{i}.ffn1", h, cfg["ffn"]), f"l{i}.gelu")
        f = b.linear(f, f"l{i}.ffn2", cfg["ffn"], h)
        x = b.layer_norm(b.node("Add", [f, x], f"l{i}.res2"), f"l{i}.ln2")
    b.node("Identity", [x], "hidden_states")
    return b.model("transformer_encoder", {"embeddings": [1, seq, h]}, ["hidden_states"], 13)


def decoder_block() -> onnx.ModelProto:
    """Pre-LN GPT-style block: causal self-attention, LayerNormalization and Gelu ops."""
    cfg = DECODER
    b = Transformer(SEED + 5, cfg["hidden"])
    h, seq = cfg["hidden"], cfg["seq"]

    def ln(x: str, name: str) -> str:
        g = b.const(f"{name}.gamma", (1 + 0.1 * b.rng.standard_normal(h)).astype(F32))
        beta = b.const(f"{name}.beta", (0.1 * b.rng.standard_normal(h)).astype(F32))
        return b.node("LayerNormalization", [x, g, beta], name, axis=-1, epsilon=1e-5)

    causal = np.triu(np.full((seq, seq), -1e9, F32), k=1)
    mask = b.const("causal_mask", causal)
    a = b.attention(ln("x", "ln1"), "attn", seq, cfg["heads"], mask)
    x = b.node("Add", ["x", a], "res1")
    f = b.node("Gelu", [b.linear(ln(x, "ln2"), "ffn1", h, cfg["ffn"])], "gelu")
    f = b.linear(f, "ffn2", cfg["ffn"], h)
    b.node("Add", [x, f], "y")
    return b.model("decoder_block", {"x": [1, seq, h]}, ["y"], 20)


MODELS = {
    "small_cnn": small_cnn,
    "mlp": mlp,
    "residual_block": residual_block,
    "lrn_concat": lrn_concat,
    "transformer_encoder": transformer_encoder,
    "decoder_block": decoder_block,
}


def check_with_onnxruntime(path: Path) -> list[np.ndarray]:
    """Run the model once on seeded random inputs (symbolic dims set to 2)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in i.shape]).astype(
            np.float32
        )
        for i in session.get_inputs()
    }
    outputs = session.run(None, feeds)
    assert all(np.isfinite(o).all() for o in outputs), path
    return outputs


def main() -> None:
    """Write every model and check it."""
    for name, build in MODELS.items():
        path = HERE / f"{name}.onnx"
        onnx.save(build(), path)
        shapes = [o.shape for o in check_with_onnxruntime(path)]
        print(f"{path.name}: {path.stat().st_size} bytes, outputs {shapes}")


if __name__ == "__main__":
    main()
