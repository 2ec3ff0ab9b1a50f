"""FileCheck-style tests of each graph rewrite: graph IR text in, one pass, printed IR text out.

Constants parsed from text are zeros that remember a digest; a case fills the constants its
pass reads, and digests print as `sha256=...`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from npucc.ir.dtypes import NUMPY_DTYPES
from npucc.ir.graph import Graph
from npucc.ir.graph_text import graph_from_text
from npucc.passes import CompileContext
from npucc.target import load_target
from npucc.transforms.graph_pipeline import frontend_passes

PIPELINE = [p.name for p in frontend_passes()]
PASS_CLASS = {p.name: type(p) for p in frontend_passes()}


# the precision a pass's case runs at (the others: the target's own, fp32)
PRECISIONS = {"import-int8": "int8"}


def rewrite(name: str, text: str, consts: dict[str, list[float]] | None = None) -> Graph:
    """Parse `text`, fill the constants `consts` (of their declared types), run pass `name` on
    it and verify."""
    g = graph_from_text(text)
    for t, values in (consts or {}).items():
        kind = NUMPY_DTYPES[g.tensors[t].dtype]
        g.tensors[t].data = np.asarray(values).astype(kind).reshape(g.tensors[t].shape)
    target = load_target("davinci-core")
    target = target.at_precision(PRECISIONS.get(name, target.precision))
    g = PASS_CLASS[name]().run(g, CompileContext(target))
    g.verify()
    return g


def printed(g: Graph) -> str:
    """The text form with digests elided."""
    return re.sub(r"sha256=[0-9a-f]+", "sha256=...", g.to_text())


IMPORT_INT8_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2]
  const %"s" : f32[] sha256=0
  const %"z" : i8[] sha256=0
  const %"w" : i8[3,2] sha256=0
  const %"ws" : f32[3] sha256=0
  const %"wz" : i8[3] sha256=0
  const %"b" : i32[3] sha256=0
  const %"bs" : f32[3] sha256=0
  const %"bz" : i32[3] sha256=0
  const %"ys" : f32[] sha256=0
  const %"yz" : i8[] sha256=0
  %"q" = onnx.QuantizeLinear(%"x", %"s", %"z") : i8[1,2] loc("q")
  %"d" = onnx.DequantizeLinear(%"q", %"s", %"z") : f32[1,2] loc("dq")
  %"wd" = onnx.DequantizeLinear(%"w", %"ws", %"wz") {axis=0} : f32[3,2] loc("dqw")
  %"bd" = onnx.DequantizeLinear(%"b", %"bs", %"bz") {axis=0} : f32[3] loc("dqb")
  %"g" = onnx.Gemm(%"d", %"wd", %"bd") {transB=1} : f32[1,3] loc("fc")
  %"r" = onnx.Relu(%"g") : f32[1,3] loc("relu")
  %"yq" = onnx.QuantizeLinear(%"r", %"ys", %"yz") : i8[1,3] loc("qy")
  %"y" = onnx.DequantizeLinear(%"yq", %"ys", %"yz") : f32[1,3] loc("dqy")
  output %"y"
}
"""
IMPORT_INT8_CONSTS = {"s": 0.5, "z": 2, "w": [1, 2, 3, 4, 5, 6], "ws": [0.1, 0.2, 0.4],
                      "wz": [0, 0, 0], "b": [10, -20, 30], "bs": [0.05, 0.1, 0.2],
                      "bz": [0, 0, 0], "ys": 0.25, "yz": -5}  # fmt: skip
IMPORT_INT8_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2]
  const %"s" : f32[] sha256=...
  const %"z" : i8[] sha256=...
  const %"w" : i8[3,2] sha256=...
  const %"ws" : f32[3] sha256=...
  const %"wz" : i8[3] sha256=...
  const %"b" : i32[3] sha256=...
  const %"bs" : f32[3] sha256=...
  const %"bz" : i32[3] sha256=...
  const %"ys" : f32[] sha256=...
  const %"yz" : i8[] sha256=...
  const %"w.i8" : i8[3,2] sha256=...
  const %"fc.requant" : i8[24] sha256=...
  %"y" = gemm(%"x", %"w.i8", %"fc.requant") {qhi = 127, qin = 2, qlo = -5, qzp = -5, trans_b = 1} : f32[1,3] loc("fc")
  output %"y"
}
"""  # noqa: E501 (the gemm line)

FOLD_CONSTANTS_IN = """
graph "g" opset=13 {
  input %"x" : f32[2]
  const %"a" : f32[2] sha256=0
  const %"b" : f32[2] sha256=0
  %"s" = onnx.Add(%"a", %"b") : f32[2] loc("sum")
  %"y" = onnx.Mul(%"x", %"s") : f32[2] loc("scale")
  output %"y"
}
"""
FOLD_CONSTANTS_OUT = """
graph "g" opset=13 {
  input %"x" : f32[2]
  const %"a" : f32[2] sha256=...
  const %"b" : f32[2] sha256=...
  const %"s" : f32[2] sha256=...
  %"y" = onnx.Mul(%"x", %"s") : f32[2] loc("scale")
  output %"y"
}
"""

DROP_IDENTITY_IN = """
graph "g" opset=13 {
  input %"x" : f32[2]
  %"t" = onnx.Identity(%"x") : f32[2] loc("id")
  %"y" = onnx.Relu(%"t") : f32[2] loc("relu")
  %"z" = onnx.Identity(%"y") : f32[2] loc("out")
  output %"z"
}
"""
DROP_IDENTITY_OUT = """
graph "g" opset=13 {
  input %"x" : f32[2]
  %"z" = onnx.Relu(%"x") : f32[2] loc("relu")
  output %"z"
}
"""

GATHER_INDEX_VIEWS_IN = """
graph "g" opset=13 {
  input %"ids" : i64[2,3]
  const %"emb" : f32[10,4] sha256=0
  const %"shape" : i64[1] sha256=0
  %"flat" = onnx.Reshape(%"ids", %"shape") : i64[6] loc("flatten")
  %"e" = onnx.Gather(%"emb", %"flat") {axis = 0} : f32[6,4] loc("lookup")
  output %"e"
}
"""
GATHER_INDEX_VIEWS_OUT = """
graph "g" opset=13 {
  input %"ids" : i64[2,3]
  const %"emb" : f32[10,4] sha256=...
  const %"shape" : i64[1] sha256=...
  %"e.gathered" = onnx.Gather(%"emb", %"ids") {axis = 0} : f32[2,3,4] loc("lookup")
  %"e" = reshape(%"e.gathered") : f32[6,4] loc("lookup.view")
  output %"e"
}
"""

FOLD_BATCHNORM_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  const %"w" : f32[2,2,1,1] sha256=0
  const %"s" : f32[2] sha256=0
  const %"b" : f32[2] sha256=0
  const %"m" : f32[2] sha256=0
  const %"v" : f32[2] sha256=0
  %"c" = onnx.Conv(%"x", %"w") : f32[1,2,4,4] loc("conv")
  %"y" = onnx.BatchNormalization(%"c", %"s", %"b", %"m", %"v") : f32[1,2,4,4] loc("bn")
  %"z" = onnx.BatchNormalization(%"x", %"s", %"b", %"m", %"v") : f32[1,2,4,4] loc("bn2")
  output %"y"
  output %"z"
}
"""
FOLD_BATCHNORM_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  const %"w" : f32[2,2,1,1] sha256=...
  const %"s" : f32[2] sha256=...
  const %"b" : f32[2] sha256=...
  const %"m" : f32[2] sha256=...
  const %"v" : f32[2] sha256=...
  const %"w.bn" : f32[2,2,1,1] sha256=...
  const %"w.bn_bias" : f32[2] sha256=...
  const %"bn2.scale" : f32[2,1,1] sha256=...
  const %"bn2.shift" : f32[2,1,1] sha256=...
  %"y" = onnx.Conv(%"x", %"w.bn", %"w.bn_bias") : f32[1,2,4,4] loc("conv")
  %"z.scaled" = onnx.Mul(%"x", %"bn2.scale") : f32[1,2,4,4] loc("bn2.mul")
  %"z" = onnx.Add(%"z.scaled", %"bn2.shift") : f32[1,2,4,4] loc("bn2")
  output %"y"
  output %"z"
}
"""

FOLD_CONV_AFFINE_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  const %"w" : f32[2,1,1,1] sha256=0
  const %"s" : f32[2,1,1] sha256=0
  const %"t" : f32[1,2,1,1] sha256=0
  const %"u" : f32[4] sha256=0
  %"c" = conv2d(%"x", %"w") {group = 2} : f32[1,2,4,4] loc("dw")
  %"m" = mul(%"c", %"s") : f32[1,2,4,4] loc("bn_mul")
  %"a" = add(%"t", %"m") : f32[1,2,4,4] loc("bn_add")
  %"y" = clip(%"a") {max = 6.0, min = 0.0} : f32[1,2,4,4] loc("relu6")
  %"c2" = conv2d(%"y", %"w") {group = 2} : f32[1,2,4,4] loc("dw2")
  %"z" = mul(%"c2", %"u") : f32[1,2,4,4] loc("by_column")
  output %"z"
}
"""
FOLD_CONV_AFFINE_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  const %"w" : f32[2,1,1,1] sha256=...
  const %"s" : f32[2,1,1] sha256=...
  const %"t" : f32[1,2,1,1] sha256=...
  const %"u" : f32[4] sha256=...
  const %"w.affine" : f32[2,1,1,1] sha256=...
  const %"w.affine_bias" : f32[2] sha256=...
  %"a" = conv2d(%"x", %"w.affine", %"w.affine_bias") {group = 2} : f32[1,2,4,4] loc("dw")
  %"y" = clip(%"a") {max = 6.0, min = 0.0} : f32[1,2,4,4] loc("relu6")
  %"c2" = conv2d(%"y", %"w") {group = 2} : f32[1,2,4,4] loc("dw2")
  %"z" = mul(%"c2", %"u") : f32[1,2,4,4] loc("by_column")
  output %"z"
}
"""
FOLD_CONV_AFFINE_CONSTS = {"w": [1.0] * 2, "s": [2, 3], "t": [0.5, -1], "u": [1, 2, 3, 4]}

FUSE_ATTENTION_IN = """
graph "g" opset=13 {
  input %"q" : f32[1,4,8]
  input %"k" : f32[1,8,4]
  input %"v" : f32[1,4,8]
  const %"scale" : f32[] sha256=0
  %"qk" = matmul(%"q", %"k") : f32[1,4,4] loc("qk")
  %"sc" = mul(%"qk", %"scale") : f32[1,4,4] loc("scale")
  %"p" = softmax(%"sc") {axis = 2} : f32[1,4,4] loc("softmax")
  %"o" = matmul(%"p", %"v") : f32[1,4,8] loc("pv")
  output %"o"
}
"""
FUSE_ATTENTION_OUT = """
graph "g" opset=13 {
  input %"q" : f32[1,4,8]
  input %"k" : f32[1,8,4]
  input %"v" : f32[1,4,8]
  const %"scale" : f32[] sha256=...
  %"o" = attention(%"q", %"k", %"v") {k_strides = [32, 1, 4], q_strides = [32, 8, 1], scale = 0.125, v_strides = [32, 8, 1]} : f32[1,4,8] loc("pv")
  output %"o"
}
"""  # noqa: E501

FUSE_LAYERNORM_IN = """
graph "g" opset=13 {
  input %"x" : f32[2,8]
  const %"eps" : f32[] sha256=0
  %"mu" = reduce(%"x") {axes = [1], op = "mean"} : f32[2,1] loc("mean")
  %"d" = sub(%"x", %"mu") : f32[2,8] loc("center")
  %"sq" = pows(%"d") {scalar = 2.0} : f32[2,8] loc("square")
  %"var" = reduce(%"sq") {axes = [1], op = "mean"} : f32[2,1] loc("variance")
  %"ve" = add(%"var", %"eps") : f32[2,1] loc("plus_eps")
  %"sd" = sqrt(%"ve") : f32[2,1] loc("std")
  %"y" = div(%"d", %"sd") : f32[2,8] loc("normalise")
  output %"y"
}
"""
FUSE_LAYERNORM_OUT = """
graph "g" opset=13 {
  input %"x" : f32[2,8]
  const %"eps" : f32[] sha256=...
  %"y" = layernorm(%"x") {axis = 1, epsilon = 9.999999747378752e-06} : f32[2,8] loc("normalise")
  output %"y"
}
"""

FUSE_GELU_IN = """
graph "g" opset=13 {
  input %"x" : f32[4]
  const %"sqrt2" : f32[] sha256=0
  const %"one" : f32[] sha256=0
  const %"half" : f32[] sha256=0
  %"h" = div(%"x", %"sqrt2") : f32[4] loc("scale")
  %"e" = erf(%"h") : f32[4] loc("erf")
  %"p" = add(%"e", %"one") : f32[4] loc("plus_one")
  %"m" = mul(%"x", %"p") : f32[4] loc("times_x")
  %"y" = mul(%"m", %"half") : f32[4] loc("half")
  output %"y"
}
"""
FUSE_GELU_OUT = """
graph "g" opset=13 {
  input %"x" : f32[4]
  const %"sqrt2" : f32[] sha256=...
  const %"one" : f32[] sha256=...
  const %"half" : f32[] sha256=...
  %"y" = gelu(%"x") {approximate = "none"} : f32[4] loc("half")
  output %"y"
}
"""

FUSE_ACTIVATIONS_IN = """
graph "g" opset=13 {
  input %"a" : f32[4]
  input %"b" : f32[4]
  input %"h" : f32[2,4]
  const %"w" : f32[4,3] sha256=0
  %"s" = add(%"a", %"b") : f32[4] loc("add")
  %"y" = relu(%"s") : f32[4] loc("relu")
  %"t" = mul(%"a", %"b") : f32[4] loc("mul")
  %"z" = clip(%"t") {max = 6.0, min = 0.0} : f32[4] loc("clip")
  %"u" = relu(%"t") : f32[4] loc("shared")
  %"p" = gemm(%"h", %"w") : f32[2,3] loc("fc")
  %"q" = gelu(%"p") {approximate = "tanh"} : f32[2,3] loc("gelu")
  %"v" = gelu(%"y") : f32[4] loc("gelu_of_an_add")
  output %"z"
  output %"u"
  output %"q"
  output %"v"
}
"""
FUSE_ACTIVATIONS_OUT = """
graph "g" opset=13 {
  input %"a" : f32[4]
  input %"b" : f32[4]
  input %"h" : f32[2,4]
  const %"w" : f32[4,3] sha256=...
  %"y" = add(%"a", %"b") {act = "relu"} : f32[4] loc("add")
  %"t" = mul(%"a", %"b") : f32[4] loc("mul")
  %"z" = clip(%"t") {max = 6.0, min = 0.0} : f32[4] loc("clip")
  %"u" = relu(%"t") : f32[4] loc("shared")
  %"q" = gemm(%"h", %"w") {act = "gelu_tanh"} : f32[2,3] loc("fc")
  %"v" = gelu(%"y") : f32[4] loc("gelu_of_an_add")
  output %"z"
  output %"u"
  output %"q"
  output %"v"
}
"""

# a reshape of a gemm's output sinks past its gelu and its residual add (the other operand
# viewed as the gemm's shape), not past a broadcasting add nor a view something else reads
SINK_VIEWS_IN = """
graph "g" opset=13 {
  input %"h" : f32[2,4]
  input %"r" : f32[1,2,3]
  input %"s" : f32[3]
  const %"w" : f32[4,3] sha256=0
  %"p" = gemm(%"h", %"w") : f32[2,3] loc("fc1")
  %"pv" = reshape(%"p") : f32[1,2,3] loc("fc1.view")
  %"g" = gelu(%"pv") : f32[1,2,3] loc("gelu")
  %"q" = gemm(%"h", %"w") : f32[2,3] loc("fc2")
  %"qv" = reshape(%"q") : f32[1,2,3] loc("fc2.view")
  %"y" = add(%"r", %"qv") : f32[1,2,3] loc("res")
  %"o" = gemm(%"h", %"w") : f32[2,3] loc("fc3")
  %"ov" = reshape(%"o") : f32[1,2,3] loc("fc3.view")
  %"z" = add(%"ov", %"s") : f32[1,2,3] loc("bias")
  %"k" = gemm(%"h", %"w") : f32[2,3] loc("fc4")
  %"kv" = reshape(%"k") : f32[1,2,3] loc("fc4.view")
  %"u" = relu(%"kv") : f32[1,2,3] loc("relu")
  output %"g"
  output %"y"
  output %"z"
  output %"u"
  output %"kv"
}
"""
SINK_VIEWS_OUT = """
graph "g" opset=13 {
  input %"h" : f32[2,4]
  input %"r" : f32[1,2,3]
  input %"s" : f32[3]
  const %"w" : f32[4,3] sha256=...
  %"p" = gemm(%"h", %"w") : f32[2,3] loc("fc1")
  %"g.gelu" = gelu(%"p") : f32[2,3] loc("gelu")
  %"g" = reshape(%"g.gelu") : f32[1,2,3] loc("fc1.view")
  %"q" = gemm(%"h", %"w") : f32[2,3] loc("fc2")
  %"r.view" = reshape(%"r") : f32[2,3] loc("res.view")
  %"y.add" = add(%"r.view", %"q") : f32[2,3] loc("res")
  %"y" = reshape(%"y.add") : f32[1,2,3] loc("fc2.view")
  %"o" = gemm(%"h", %"w") : f32[2,3] loc("fc3")
  %"ov" = reshape(%"o") : f32[1,2,3] loc("fc3.view")
  %"z" = add(%"ov", %"s") : f32[1,2,3] loc("bias")
  %"k" = gemm(%"h", %"w") : f32[2,3] loc("fc4")
  %"kv" = reshape(%"k") : f32[1,2,3] loc("fc4.view")
  %"u" = relu(%"kv") : f32[1,2,3] loc("relu")
  output %"g"
  output %"y"
  output %"z"
  output %"u"
  output %"kv"
}
"""

# the add of a conv (the later one, "join": the fused conv takes the add's place), with its
# activation, and of a gemm; not after an activation, nor with broadcasting
FUSE_SHORTCUT_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2,64,64]
  input %"s" : f32[1,3,128,128]
  const %"wx" : f32[32,2,1,1] sha256=0
  const %"bx" : f32[32] sha256=0
  const %"ws" : f32[32,3,1,1] sha256=0
  const %"w3" : f32[32,2,3,3] sha256=0
  %"p" = conv2d(%"s", %"ws") {strides = [2, 2]} : f32[1,32,64,64] loc("proj")
  %"y" = conv2d(%"x", %"wx", %"bx", %"p") {act = "relu"} : f32[1,32,64,64] loc("conv")
  %"q" = conv2d(%"s", %"ws") {act = "relu", strides = [2, 2]} : f32[1,32,64,64] loc("proj_act")
  %"z" = conv2d(%"x", %"wx", none, %"q") : f32[1,32,64,64] loc("kept")
  %"p3" = conv2d(%"s", %"ws") {strides = [2, 2]} : f32[1,32,64,64] loc("proj3")
  %"u" = conv2d(%"x", %"w3", none, %"p3") {pads = [1, 1, 1, 1]} : f32[1,32,64,64] loc("taps")
  output %"y"
  output %"z"
  output %"u"
}
"""
FUSE_SHORTCUT_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2,64,64]
  input %"s" : f32[1,3,128,128]
  const %"wx" : f32[32,2,1,1] sha256=...
  const %"bx" : f32[32] sha256=...
  const %"ws" : f32[32,3,1,1] sha256=...
  const %"w3" : f32[32,2,3,3] sha256=...
  const %"wx.shortcut" : f32[32,5,1,1] sha256=...
  const %"wx.shortcut_bias" : f32[32] sha256=...
  %"y" = conv2d(%"x", %"wx.shortcut", %"wx.shortcut_bias", none, %"s") {act = "relu", s_strides = [2, 2]} : f32[1,32,64,64] loc("conv")
  %"q" = conv2d(%"s", %"ws") {act = "relu", strides = [2, 2]} : f32[1,32,64,64] loc("proj_act")
  %"z" = conv2d(%"x", %"wx", none, %"q") : f32[1,32,64,64] loc("kept")
  %"p3" = conv2d(%"s", %"ws") {strides = [2, 2]} : f32[1,32,64,64] loc("proj3")
  %"u" = conv2d(%"x", %"w3", none, %"p3") {pads = [1, 1, 1, 1]} : f32[1,32,64,64] loc("taps")
  output %"y"
  output %"z"
  output %"u"
}
"""  # noqa: E501 (the fused conv line)

FUSE_RESIDUAL_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  input %"h" : f32[2,4]
  input %"r" : f32[2,3]
  const %"w" : f32[2,2,1,1] sha256=0
  const %"b" : f32[2] sha256=0
  const %"g" : f32[4,3] sha256=0
  const %"k" : f32[3] sha256=0
  %"c" = conv2d(%"x", %"w") {group = 1} : f32[1,2,4,4] loc("conv")
  %"y" = add(%"x", %"c") {act = "relu"} : f32[1,2,4,4] loc("add")
  %"c2" = conv2d(%"y", %"w", %"b") : f32[1,2,4,4] loc("conv2")
  %"c3" = conv2d(%"y", %"w") : f32[1,2,4,4] loc("conv3")
  %"z" = add(%"c2", %"c3") : f32[1,2,4,4] loc("join")
  %"d" = conv2d(%"z", %"w") {act = "relu"} : f32[1,2,4,4] loc("conv_act")
  %"u" = add(%"d", %"z") : f32[1,2,4,4] loc("after_act")
  %"e" = gemm(%"h", %"g") : f32[2,3] loc("fc")
  %"v" = add(%"e", %"r") : f32[2,3] loc("fc_add")
  %"q" = add(%"v", %"k") : f32[2,3] loc("broadcast")
  output %"u"
  output %"q"
}
"""
FUSE_RESIDUAL_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  input %"h" : f32[2,4]
  input %"r" : f32[2,3]
  const %"w" : f32[2,2,1,1] sha256=...
  const %"b" : f32[2] sha256=...
  const %"g" : f32[4,3] sha256=...
  const %"k" : f32[3] sha256=...
  %"y" = conv2d(%"x", %"w", none, %"x") {act = "relu", group = 1} : f32[1,2,4,4] loc("conv")
  %"c3" = conv2d(%"y", %"w") : f32[1,2,4,4] loc("conv3")
  %"z" = conv2d(%"y", %"w", %"b", %"c3") : f32[1,2,4,4] loc("conv2")
  %"d" = conv2d(%"z", %"w") {act = "relu"} : f32[1,2,4,4] loc("conv_act")
  %"u" = add(%"d", %"z") : f32[1,2,4,4] loc("after_act")
  %"v" = gemm(%"h", %"g", none, %"r") : f32[2,3] loc("fc")
  %"q" = add(%"v", %"k") : f32[2,3] loc("broadcast")
  output %"u"
  output %"q"
}
"""

PRUNE_UNUSED_IN = """
graph "g" opset=13 {
  input %"x" : f32[4]
  const %"c" : f32[4] sha256=0
  const %"unused" : f32[4] sha256=0
  %"y" = add(%"x", %"c") : f32[4] loc("live")
  %"dead" = mul(%"x", %"c") : f32[4] loc("dead")
  output %"y"
}
"""
PRUNE_UNUSED_OUT = """
graph "g" opset=13 {
  input %"x" : f32[4]
  const %"c" : f32[4] sha256=...
  %"y" = add(%"x", %"c") : f32[4] loc("live")
  output %"y"
}
"""

FOLD_MATMUL_BIAS_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,4,3]
  const %"w" : f32[3,2] sha256=0
  const %"b" : f32[1,2] sha256=0
  const %"c" : f32[4,1] sha256=0
  %"m" = matmul(%"x", %"w") : f32[1,4,2] loc("mm")
  %"y" = add(%"b", %"m") : f32[1,4,2] loc("bias")
  %"n" = matmul(%"x", %"w") : f32[1,4,2] loc("mm2")
  %"z" = add(%"n", %"c") : f32[1,4,2] loc("rows")
  output %"y"
  output %"z"
}
"""
FOLD_MATMUL_BIAS_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,4,3]
  const %"w" : f32[3,2] sha256=...
  const %"b" : f32[1,2] sha256=...
  const %"c" : f32[4,1] sha256=...
  const %"b.row" : f32[2] sha256=...
  %"x.rows" = reshape(%"x") : f32[4,3] loc("mm.rows")
  %"y.rows" = gemm(%"x.rows", %"w", %"b.row") ATTRS : f32[4,2] loc("mm")
  %"y" = reshape(%"y.rows") : f32[1,4,2] loc("bias.view")
  %"n" = matmul(%"x", %"w") : f32[1,4,2] loc("mm2")
  %"z" = add(%"n", %"c") : f32[1,4,2] loc("rows")
  output %"y"
  output %"z"
}
""".replace("ATTRS", "{alpha = 1.0, beta = 1.0, trans_a = 0, trans_b = 0}")

SINK_POOLS_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2,6,6]
  const %"w" : f32[2,2,1,1] sha256=0
  %"a" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,6,6] loc("ca")
  %"b" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,6,6] loc("cb")
  %"c" = concat(%"a", %"b") {axis = 1} : f32[1,4,6,6] loc("cat")
  %"p" = maxpool(%"c") {kernel = [2, 2], strides = [2, 2]} : f32[1,4,3,3] loc("pool")
  %"d" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,6,6] loc("cd")
  %"q" = avgpool(%"d") {kernel = [2, 2], strides = [2, 2]} : f32[1,2,3,3] loc("avg")
  output %"p"
  output %"q"
}
"""
SINK_POOLS_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2,6,6]
  const %"w" : f32[2,2,1,1] sha256=...
  %"a" = conv2d(%"x", %"w") : f32[1,2,6,6] loc("ca")
  %"a.maxpool" = maxpool(%"a") {act = "relu", kernel = [2, 2], strides = [2, 2]} : f32[1,2,3,3] loc("pool.0")
  %"b" = conv2d(%"x", %"w") : f32[1,2,6,6] loc("cb")
  %"b.maxpool" = maxpool(%"b") {act = "relu", kernel = [2, 2], strides = [2, 2]} : f32[1,2,3,3] loc("pool.1")
  %"p" = concat(%"a.maxpool", %"b.maxpool") {axis = 1} : f32[1,4,3,3] loc("cat")
  %"d" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,6,6] loc("cd")
  %"q" = avgpool(%"d") {kernel = [2, 2], strides = [2, 2]} : f32[1,2,3,3] loc("avg")
  output %"p"
  output %"q"
}
"""  # noqa: E501
SPLIT_CONCAT_CONV_IN = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  const %"w" : f32[2,2,1,1] sha256=0
  const %"s" : f32[1,4,1,1] sha256=0
  const %"b" : f32[1] sha256=0
  %"a" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,4,4] loc("e1")
  %"c" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,4,4] loc("e3")
  %"k" = concat(%"a", %"c") {axis = 1} : f32[1,4,4,4] loc("cat")
  %"y" = conv2d(%"k", %"s", %"b") {act = "relu"} : f32[1,1,4,4] loc("squeeze")
  output %"y"
}
"""
SPLIT_CONCAT_CONV_OUT = """
graph "g" opset=13 {
  input %"x" : f32[1,2,4,4]
  const %"w" : f32[2,2,1,1] sha256=...
  const %"s" : f32[1,4,1,1] sha256=...
  const %"b" : f32[1] sha256=...
  const %"s.c0" : f32[1,2,1,1] sha256=...
  const %"s.c2" : f32[1,2,1,1] sha256=...
  %"a" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,4,4] loc("e1")
  %"y.part0" = conv2d(%"a", %"s.c0") : f32[1,1,4,4] loc("squeeze.part0")
  %"c" = conv2d(%"x", %"w") {act = "relu"} : f32[1,2,4,4] loc("e3")
  %"y" = conv2d(%"c", %"s.c2", %"b", %"y.part0") {act = "relu"} : f32[1,1,4,4] loc("squeeze.part1")
  output %"y"
}
"""  # noqa: E501

CASES = {
    "import-int8": (IMPORT_INT8_IN, IMPORT_INT8_CONSTS, IMPORT_INT8_OUT),
    "fold-constants": (FOLD_CONSTANTS_IN, {"a": [1, 2], "b": [3, 4]}, FOLD_CONSTANTS_OUT),
    "drop-identity": (DROP_IDENTITY_IN, {}, DROP_IDENTITY_OUT),
    "gather-index-views": (GATHER_INDEX_VIEWS_IN, {}, GATHER_INDEX_VIEWS_OUT),
    "fold-batchnorm": (
        FOLD_BATCHNORM_IN,
        {"w": [1, 0, 0, 1], "s": [1, 2], "b": [0, 1], "m": [0, 0], "v": [1, 1]},
        FOLD_BATCHNORM_OUT,
    ),
    "fold-conv-affine": (FOLD_CONV_AFFINE_IN, FOLD_CONV_AFFINE_CONSTS, FOLD_CONV_AFFINE_OUT),
    "fuse-attention": (FUSE_ATTENTION_IN, {"scale": [0.125]}, FUSE_ATTENTION_OUT),
    "fold-matmul-bias": (
        FOLD_MATMUL_BIAS_IN,
        {"w": [1, 2, 3, 4, 5, 6], "b": [1, 2], "c": [1, 2, 3, 4]},
        FOLD_MATMUL_BIAS_OUT,
    ),
    "fuse-layernorm": (FUSE_LAYERNORM_IN, {"eps": [1e-05]}, FUSE_LAYERNORM_OUT),
    "fuse-gelu": (
        FUSE_GELU_IN,
        {"sqrt2": [1.4142135623730951], "one": [1.0], "half": [0.5]},
        FUSE_GELU_OUT,
    ),
    "sink-views": (SINK_VIEWS_IN, {}, SINK_VIEWS_OUT),
    "fuse-activations": (FUSE_ACTIVATIONS_IN, {}, FUSE_ACTIVATIONS_OUT),
    "fuse-residual": (FUSE_RESIDUAL_IN, {}, FUSE_RESIDUAL_OUT),
    "fuse-shortcut": (FUSE_SHORTCUT_IN, {}, FUSE_SHORTCUT_OUT),
    "sink-pools": (SINK_POOLS_IN, {}, SINK_POOLS_OUT),
    "split-concat-conv": (SPLIT_CONCAT_CONV_IN, {"s": [1, 2, 3, 4]}, SPLIT_CONCAT_CONV_OUT),
    "prune-unused": (PRUNE_UNUSED_IN, {}, PRUNE_UNUSED_OUT),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rewrite_prints_the_expected_ir(name: str) -> None:
    text, consts, expected = CASES[name]
    assert printed(rewrite(name, text, consts)) == expected.lstrip("\n")


def test_every_rewrite_has_a_case() -> None:
    between = PIPELINE[1:]
    assert set(CASES) == {p for p in between if p != "legalize-onnx"}


def test_import_int8_folds_the_zero_point_into_the_int32_bias_and_the_scales() -> None:
    """bias' = bias - x_zp * sum(w) per output channel, scale = x_scale * w_scale / y_scale."""
    g = rewrite("import-int8", IMPORT_INT8_IN, IMPORT_INT8_CONSTS)
    raw = g.tensors["fc.requant"].data.astype(np.int8).view(np.uint8).reshape(3, 8)
    assert np.ascontiguousarray(raw[:, :4]).view("<i4").ravel().tolist() == [4, -34, 8]
    scale = np.ascontiguousarray(raw[:, 4:]).view("<f4").ravel()
    np.testing.assert_array_equal(scale, np.float32([0.2, 0.4, 0.8]))


def test_a_split_conv_takes_its_branches_input_channels_of_the_weights() -> None:
    consts = CASES["split-concat-conv"][1]
    g = rewrite("split-concat-conv", SPLIT_CONCAT_CONV_IN, consts)
    assert g.tensors["s.c0"].data.ravel().tolist() == [1.0, 2.0]
    assert g.tensors["s.c2"].data.ravel().tolist() == [3.0, 4.0]


def test_folded_constants_hold_the_values() -> None:
    g = rewrite("fold-constants", FOLD_CONSTANTS_IN, {"a": [1, 2], "b": [3, 4]})
    assert g.tensors["s"].data.tolist() == [4.0, 6.0]


def test_batchnorm_folds_into_the_conv_weights() -> None:
    consts = CASES["fold-batchnorm"][1]
    g = rewrite("fold-batchnorm", FOLD_BATCHNORM_IN, consts)
    scale = np.array([1, 2]) / np.sqrt(np.array([1, 1]) + 1e-5)
    w = np.array([1, 0, 0, 1]).reshape(2, 2, 1, 1) * scale.reshape(2, 1, 1, 1)
    np.testing.assert_allclose(g.tensors["w.bn"].data, w, rtol=1e-6)
    np.testing.assert_allclose(g.tensors["w.bn_bias"].data, [0, 1], atol=1e-6)


def test_conv_affine_folds_scale_and_shift_per_channel() -> None:
    """The depthwise conv's Mul by [2, 3] and Add of [0.5, -1] become its weights and bias;
    the Mul by a per-column constant after the second conv does not fold."""
    g = rewrite("fold-conv-affine", FOLD_CONV_AFFINE_IN, FOLD_CONV_AFFINE_CONSTS)
    np.testing.assert_array_equal(g.tensors["w.affine"].data.reshape(2), [2, 3])
    np.testing.assert_array_equal(g.tensors["w.affine_bias"].data, [0.5, -1])


# Exporters' variants: Keras MultiHeadAttention's einsums as the frontend lowers them (the
# scores computed transposed, K Qᵀ, with batch merges and a transpose of the last two dims),
# and tf.keras' LayerNorm through tf2onnx (x * inv + (beta - mean * inv)).
KERAS_ATTENTION_IN = """
graph "m" opset=13 {
  input %"q" : f32[1,4,2,2]
  input %"k" : f32[1,4,2,2]
  input %"v" : f32[1,4,2,2]
  const %"c1" : f32[] sha256=0
  %"t2" = mul(%"q", %"c1") : f32[1,4,2,2] loc("Mul_0")
  %"t3.t" = transpose(%"k") {perm = [0, 2, 1, 3]} : f32[1,2,4,2] loc("Einsum_1.transpose")
  %"t3.lhs" = reshape(%"t3.t") : f32[2,4,2] loc("Einsum_1.reshape")
  %"t3.t_1" = transpose(%"t2") {perm = [0, 2, 3, 1]} : f32[1,2,2,4] loc("Einsum_1.transpose_")
  %"t3.rhs" = reshape(%"t3.t_1") : f32[2,2,4] loc("Einsum_1.reshape_")
  %"t3.mm" = matmul(%"t3.lhs", %"t3.rhs") : f32[2,4,4] loc("Einsum_1.matmul")
  %"t3.prod" = reshape(%"t3.mm") : f32[1,2,4,4] loc("Einsum_1.reshape__")
  %"t3.t_2" = transpose(%"t3.prod") {perm = [0, 1, 3, 2]} : f32[1,2,4,4] loc("Einsum_1.transpose__")
  %"t3" = reshape(%"t3.t_2") : f32[1,2,4,4] loc("Einsum_1")
  %"t4" = softmax(%"t3") {axis = 3} : f32[1,2,4,4] loc("Softmax_2")
  %"y.lhs" = reshape(%"t4") : f32[2,4,4] loc("Einsum_3.reshape")
  %"y.t" = transpose(%"v") {perm = [0, 2, 1, 3]} : f32[1,2,4,2] loc("Einsum_3.transpose")
  %"y.rhs" = reshape(%"y.t") : f32[2,4,2] loc("Einsum_3.reshape_")
  %"y.mm" = matmul(%"y.lhs", %"y.rhs") : f32[2,4,2] loc("Einsum_3.matmul")
  %"y.prod" = reshape(%"y.mm") : f32[1,2,4,2] loc("Einsum_3.reshape__")
  %"y.t_1" = transpose(%"y.prod") {perm = [0, 2, 1, 3]} : f32[1,4,2,2] loc("Einsum_3.transpose_")
  %"y" = reshape(%"y.t_1") : f32[1,4,2,2] loc("Einsum_3")
  output %"y"
}
"""
KERAS_ATTENTION_OUT = """
graph "m" opset=13 {
  input %"q" : f32[1,4,2,2]
  input %"k" : f32[1,4,2,2]
  input %"v" : f32[1,4,2,2]
  const %"c1" : f32[] sha256=...
  %"t2" = mul(%"q", %"c1") : f32[1,4,2,2] loc("Mul_0")
  %"y.prod" = attention(%"t2", %"k", %"v") {k_strides = [16, 2, 4, 1], q_strides = [16, 2, 4, 1], scale = 1.0, v_strides = [16, 2, 4, 1]} : f32[1,2,4,2] loc("Einsum_3.reshape__")
  %"y.t_1" = transpose(%"y.prod") {perm = [0, 2, 1, 3]} : f32[1,4,2,2] loc("Einsum_3.transpose_")
  %"y" = reshape(%"y.t_1") : f32[1,4,2,2] loc("Einsum_3")
  output %"y"
}
"""  # noqa: E501
TF2ONNX_LAYERNORM_IN = """
graph "m" opset=13 {
  input %"x" : f32[2,5,16]
  const %"c5" : f32[] sha256=0
  const %"c9" : f32[16] sha256=0
  const %"c10" : f32[16] sha256=0
  %"t1" = reduce(%"x") {axes = [2], op = "mean"} : f32[2,5,1] loc("ReduceMean_0")
  %"t2" = sub(%"x", %"t1") : f32[2,5,16] loc("Sub_1")
  %"t3" = mul(%"t2", %"t2") : f32[2,5,16] loc("Mul_2")
  %"t4" = reduce(%"t3") {axes = [2], op = "mean"} : f32[2,5,1] loc("ReduceMean_3")
  %"t6" = add(%"t4", %"c5") : f32[2,5,1] loc("Add_4")
  %"t7" = sqrt(%"t6") : f32[2,5,1] loc("Sqrt_5")
  %"t8" = recip(%"t7") : f32[2,5,1] loc("Reciprocal_6")
  %"t11" = mul(%"t8", %"c9") : f32[2,5,16] loc("Mul_7")
  %"t12" = mul(%"x", %"t11") : f32[2,5,16] loc("Mul_8")
  %"t13" = mul(%"t1", %"t11") : f32[2,5,16] loc("Mul_9")
  %"t14" = sub(%"c10", %"t13") : f32[2,5,16] loc("Sub_10")
  %"y" = add(%"t12", %"t14") : f32[2,5,16] loc("Add_11")
  output %"y"
}
"""
TF2ONNX_LAYERNORM_OUT = """
graph "m" opset=13 {
  input %"x" : f32[2,5,16]
  const %"c5" : f32[] sha256=...
  const %"c9" : f32[16] sha256=...
  const %"c10" : f32[16] sha256=...
  const %"Add_11.gamma" : f32[16] sha256=...
  const %"Add_11.beta" : f32[16] sha256=...
  %"y" = layernorm(%"x", %"Add_11.gamma", %"Add_11.beta") {axis = 2, epsilon = 0.0010000000474974513} : f32[2,5,16] loc("Add_11")
  output %"y"
}
"""  # noqa: E501
EXPORTER_CASES = {
    "keras-attention": (
        "fuse-attention",
        KERAS_ATTENTION_IN,
        {"c1": [0.5**0.5]},
        KERAS_ATTENTION_OUT,
    ),
    "tf2onnx-layernorm": (
        "fuse-layernorm",
        TF2ONNX_LAYERNORM_IN,
        {"c5": [1e-3]},
        TF2ONNX_LAYERNORM_OUT,
    ),
}


@pytest.mark.parametrize("case", list(EXPORTER_CASES))
def test_exporter_variant_prints_the_expected_ir(case: str) -> None:
    name, text, consts, expected = EXPORTER_CASES[case]
    assert printed(rewrite(name, text, consts)) == expected.lstrip("\n")


FUSE_RESIDUAL_INT8_IN = """
graph "g" opset=13 {
  input %"x" : i8[1,2,4,4]
  const %"w" : i8[2,2,1,1] sha256=0
  const %"rq" : i8[16] sha256=0
  %"c" = conv2d(%"x", %"w", %"rq") {qhi = 127, qin = 0, qlo = -128, qzp = 3} : i8[1,2,4,4] loc("conv")
  %"y" = add(%"x", %"c") {q = [0.5, 1.0, 0.25, 3.0, 0.125, -128.0]} : i8[1,2,4,4] loc("add")
  output %"y"
}
"""  # noqa: E501
FUSE_RESIDUAL_INT8_OUT = """
graph "g" opset=13 {
  input %"x" : i8[1,2,4,4]
  const %"w" : i8[2,2,1,1] sha256=...
  const %"rq" : i8[16] sha256=...
  %"y" = conv2d(%"x", %"w", %"rq", %"x") {qhi = 127, qin = 0, qlo = -128, qzp = 3, res_q = [0.25, 3.0, 0.5, 1.0, 0.125, -128.0]} : i8[1,2,4,4] loc("conv")
  output %"y"
}
"""  # noqa: E501


def test_int8_residual_add_fused_with_its_operands_ordered_conv_first() -> None:
    """The add's (scale, zero point) pairs follow its inputs; res_q puts the conv's first."""
    assert printed(
        rewrite("fuse-residual", FUSE_RESIDUAL_INT8_IN)
    ) == FUSE_RESIDUAL_INT8_OUT.lstrip("\n")
