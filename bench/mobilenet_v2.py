"""MobileNet v2 (width 1.0, 224x224) in the node patterns tf2onnx emits for Keras' MobileNetV2.

TensorFlow and tf2onnx are not installed here, so the graph is built with onnx.helper in the
exported form: an NHWC input and a Transpose to NCHW; each regular Conv with its
BatchNormalization folded into weights and bias; each depthwise Conv (group = channels, no
bias) followed by the per-channel Mul and Add that tf2onnx leaves of its BatchNormalization
(constants [C, 1, 1]); ReLU6 as Clip(0, 6); stride-2 convs with Keras' asymmetric (0, 1)
padding; the head as ReduceMean over H and W, MatMul + Add and Softmax. Random weights.

Run: python bench/mobilenet_v2.py OUT.onnx
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (expansion t, output channels c, repeats n, first stride s): Keras' inverted residual settings
BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip


class _Net:
    """Accumulates the nodes and initializers of the graph."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, name: str, data: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(data, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], stem: str, **attrs: object) -> str:
        self.count += 1
        out = f"{stem}_{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def relu6(self, x: str) -> str:
        return self.node("Clip", [x, "relu6_min", "relu6_max"], "Relu6")

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int, act: bool) -> str:
        """A Conv whose BatchNormalization tf2onnx folded (weights and bias), then ReLU6."""
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        b = self.rng.standard_normal(cout) * 0.1
        name = f"conv{self.count}"
        pads = (0, 0, 1, 1) if stride == 2 else (k // 2,) * 4
        y = self.node(
            "Conv",
            [x, self.const(f"{name}/W", w), self.const(f"{name}/B", b)],
            "Conv2D",
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=list(pads),
            dilations=[1, 1],
            group=1,
        )
        return self.relu6(y) if act else y

    def depthwise(self, x: str, c: int, stride: int) -> str:
        """Depthwise 3x3 Conv (no bias), the BatchNormalization as Mul + Add, then ReLU6."""
        w = self.rng.standard_normal((c, 1, 3, 3)) * np.sqrt(2.0 / 9)
        name = f"dw{self.count}"
        pads = (0, 0, 1, 1) if stride == 2 else (1, 1, 1, 1)
        y = self.node(
            "Conv",
            [x, self.const(f"{name}/W", w)],
            "depthwise",
            kernel_shape=[3, 3],
            strides=[stride, stride],
            pads=list(pads),
            dilations=[1, 1],
            group=c,
        )
        scale = self.rng.uniform(0.5, 1.5, (c, 1, 1))
        shift = self.rng.standard_normal((c, 1, 1)) * 0.1
        y = self.node("Mul", [y, self.const(f"{name}/bn_mul", scale)], "BatchNorm_mul")
        y = self.node("Add", [y, self.const(f"{name}/bn_add", shift)], "BatchNorm_add")
        return self.relu6(y)


def build(seed: int = 0, size: int = 224) -> onnx.ModelProto:
    """The whole network, input `input_1` [1, size, size, 3] (NHWC) -> softmax [1, 1000]."""
    net = _Net(seed)
    net.const("relu6_min", np.float32(0.0))
    net.const("relu6_max", np.float32(6.0))
    x = net.node("Transpose", ["input_1"], "input_nchw", perm=[0, 3, 1, 2])
    x = net.conv(x, 3, 32, 3, 2, act=True)
    cin = 32
    for t, c, n, s in BLOCKS:
        for i in range(n):
            stride = s if i == 0 else 1
            y = net.conv(x, cin, cin * t, 1, 1, act=True) if t != 1 else x
            y = net.depthwise(y, cin * t, stride)
            y = net.conv(y, cin * t, c, 1, 1, act=False)
            x = net.node("Add", [x, y], "add") if stride == 1 and cin == c else y
            cin = c
    x = net.conv(x, cin, 1280, 1, 1, act=True)
    x = net.node("ReduceMean", [x], "global_average_pooling2d", axes=[2, 3], keepdims=0)
    w = net.rng.standard_normal((1280, 1000)) * np.sqrt(1.0 / 1280)
    x = net.node("MatMul", [x, net.const("predictions/W", w)], "predictions_matmul")
    x = net.node("Add", [x, net.const("predictions/B", np.zeros(1000))], "predictions_add")
    y = net.node("Softmax", [x], "predictions", axis=-1)
    graph = helper.make_graph(
        net.nodes,
        "mobilenetv2_1.00_224",
        [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, [1, size, size, 3])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 1000])],
        net.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(build(), sys.argv[1] if len(sys.argv) > 1 else "mobilenet_v2.onnx")
