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


MODELS = {
    "small_cnn": small_cnn,
    "mlp": mlp,
    "residual_block": residual_block,
    "lrn_concat": lrn_concat,
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
