"""MobileNet v2 (1.0, 224x224) as ONNX, built with onnx.helper and seeded random weights.

torch/torchvision are not installed on this machine (a wheel lies on disk, but torchvision
needs a 5.5 GB CUDA build of torch here), so the network is written out from torchvision's
`mobilenet_v2` layer table as its ONNX export (eval mode, BatchNorm folded into the convs)
has it: Conv+Clip(0, 6) stem, 17 inverted-residual blocks (1x1 expand + Clip, 3x3 depthwise
+ Clip, 1x1 project, Add when the shapes allow), 1x1 conv to 1280 + Clip, GlobalAveragePool,
Flatten, Gemm to 1000 classes: 3,487,816 parameters (torchvision's 3,504,872 less one per
BatchNorm channel, the folding's), 14.0 MB in f32.

    python bench/mobilenet_v2.py OUT.onnx      # or import mobilenet_v2() from bench code
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (expansion t, output channels c, repeats n, first stride s): torchvision's table
BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip


class _Builder:
    """Nodes and seeded He-initialised initializers of one graph."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def _init(self, name: str, data: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(data.astype(np.float32), name))
        return name

    def conv(
        self, x: str, c_in: int, c_out: int, k: int, stride: int, group: int, relu6: bool
    ) -> str:
        """Conv (+ bias, BatchNorm folded) and optionally Clip(0, 6)."""
        self.count += 1
        name = f"conv{self.count}"
        fan_in = c_in // group * k * k
        w = self.rng.standard_normal((c_out, c_in // group, k, k)) * np.sqrt(2.0 / fan_in)
        b = self.rng.standard_normal(c_out) * 0.01
        out = f"{name}.out"
        self.nodes.append(helper.make_node(
            "Conv", [x, self._init(f"{name}.w", w), self._init(f"{name}.b", b)], [out], name=name,
            kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group,
        ))  # fmt: skip
        if not relu6:
            return out
        lo, hi = self._init(f"{name}.min", np.array(0.0)), self._init(f"{name}.max", np.array(6.0))
        self.nodes.append(helper.make_node("Clip", [out, lo, hi], [f"{name}.clip"]))
        return f"{name}.clip"

    def node(self, op: str, inputs: list[str], **attrs: object) -> str:
        """Append one node; returns its output."""
        self.count += 1
        out = f"{op.lower()}{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out


def mobilenet_v2(seed: int = 0, classes: int = 1000) -> onnx.ModelProto:
    """The network with seeded random weights (opset 13)."""
    b = _Builder(seed)
    x = b.conv("input", 3, 32, 3, 2, 1, relu6=True)
    c_in = 32
    for t, c, n, s in BLOCKS:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            y = x if t == 1 else b.conv(x, c_in, hidden, 1, 1, 1, relu6=True)
            y = b.conv(y, hidden, hidden, 3, stride, hidden, relu6=True)
            y = b.conv(y, hidden, c, 1, 1, 1, relu6=False)
            x = b.node("Add", [x, y]) if stride == 1 and c_in == c else y
            c_in = c
    x = b.conv(x, c_in, 1280, 1, 1, 1, relu6=True)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.rng.standard_normal((classes, 1280)) * np.sqrt(1.0 / 1280)
    fc = [x, b._init("fc.w", w), b._init("fc.b", np.zeros(classes))]
    out = b.node("Gemm", fc, transB=1)
    graph = helper.make_graph(
        b.nodes,
        "mobilenet_v2",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, classes])],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    onnx.save(mobilenet_v2(), sys.argv[1] if len(sys.argv) > 1 else "mobilenet_v2.onnx")
