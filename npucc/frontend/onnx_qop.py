"""A QOperator-form model in QDQ form, for import-int8 (docs/precision.md, "The int8 datapath").

onnxruntime's `quantize_static(..., quant_format=QOperator)` writes QLinearConv and
QLinearMatMul nodes, and runs selections (MaxPool, Flatten, ...) on the int8 tensors directly.
Each becomes the QDQ nodes it stands for, which `Int8Import` then makes one integer layer:
- QLinearConv(x, xs, xz, w, ws, wz, ys, yz[, B]) is DequantizeLinear(x) and of w (per output
  channel, axis 0) and of the int32 B (scale xs * ws, zero point 0) -> Conv -> QuantizeLinear
  (ys, yz);
- QLinearMatMul(a, as, az, b, bs, bz, ys, yz) is DequantizeLinear(a), of b (per column, axis 1)
  -> MatMul -> QuantizeLinear;
- a selection on an int8 tensor is DequantizeLinear -> the op -> QuantizeLinear with the
  parameters of its input (those of the QuantizeLinear or QLinear node that wrote it).
Other QOperator nodes (QLinearAdd, QGemm, ... of com.microsoft) are refused on import.
"""

from __future__ import annotations

import numpy as np

from npucc.frontend.graph_edit import add_const, fresh_layer_name, fresh_name, onnx_op
from npucc.ir.graph import Graph, Layer, Tensor

QLINEAR = {"QLinearConv": "Conv", "QLinearMatMul": "MatMul"}


def qoperator_to_qdq(g: Graph, selections: frozenset[str]) -> None:
    """Rewrite every QLinearConv, QLinearMatMul and int8 selection of `g` in QDQ form."""
    params: dict[str, tuple[str, str]] = {}  # int8 tensor -> (scale, zero point) constants
    for layer in list(g.layers):
        op = onnx_op(layer)
        if op == "QuantizeLinear" and len(layer.inputs) > 2:
            params[layer.outputs[0]] = (layer.inputs[1], layer.inputs[2])
        elif op in QLINEAR:
            _qlinear(g, layer, op, params)
        elif op in selections and layer.inputs[0] in params:
            _selection(g, layer, params)


def _float(g: Graph, base: str, like: str) -> str:
    """A new float32 activation of tensor `like`'s shape."""
    name = fresh_name(g, base)
    g.add_tensor(Tensor(name, g.tensors[like].shape, "f32"))
    return name


def _node(g: Graph, base: str, op: str, inputs: list[str], out: str, **attrs: object) -> Layer:
    return Layer(fresh_layer_name(g, base), f"onnx.{op}", inputs, [out], dict(attrs))


def _qlinear(g: Graph, layer: Layer, op: str, params: dict[str, tuple[str, str]]) -> None:
    """A QLinearConv or QLinearMatMul as DequantizeLinear -> Conv / MatMul -> QuantizeLinear."""
    x, xs, xz, w, ws, wz, ys, yz, *bias = layer.inputs
    (out,) = layer.outputs
    axis = 0 if op == "QLinearConv" else 1
    name = layer.name
    dx, dw, y = _float(g, f"{x}.dq", x), _float(g, f"{w}.dq", w), _float(g, f"{out}.f32", out)
    new = [
        _node(g, f"{name}.dq_x", "DequantizeLinear", [x, xs, xz], dx),
        _node(g, f"{name}.dq_w", "DequantizeLinear", [w, ws, wz], dw, axis=axis),
    ]
    inputs = [dx, dw]
    if bias and bias[0]:
        xs_data, ws_data = g.tensors[xs].data, g.tensors[ws].data
        assert xs_data is not None and ws_data is not None  # QLinear scales are constants
        n = g.tensors[bias[0]].shape[0]
        scale = np.broadcast_to(xs_data.astype(np.float32) * ws_data.astype(np.float32), (n,))
        b_scale = add_const(g, f"{bias[0]}.scale", np.ascontiguousarray(scale))
        b_zp = add_const(g, f"{bias[0]}.zero_point", np.zeros(n, np.int32))
        db = _float(g, f"{bias[0]}.dq", bias[0])
        new.append(_node(g, f"{name}.dq_b", "DequantizeLinear", [bias[0], b_scale, b_zp], db,
                         axis=0))  # fmt: skip
        inputs.append(db)
    new.append(Layer(name, f"onnx.{QLINEAR[op]}", inputs, [y], dict(layer.attrs)))
    new.append(_node(g, f"{name}.q", "QuantizeLinear", [y, ys, yz], out))
    params[out] = (ys, yz)
    g.replace_layer(layer, new)


def _selection(g: Graph, layer: Layer, params: dict[str, tuple[str, str]]) -> None:
    """A selection on an int8 tensor as DequantizeLinear -> the op -> QuantizeLinear."""
    x, (out,) = layer.inputs[0], layer.outputs
    scale, zp = params[x]
    dx, y = _float(g, f"{x}.dq", x), _float(g, f"{out}.f32", out)
    new = [
        _node(g, f"{layer.name}.dq", "DequantizeLinear", [x, scale, zp], dx),
        Layer(layer.name, layer.op, [dx, *layer.inputs[1:]], [y], dict(layer.attrs)),
        _node(g, f"{layer.name}.q", "QuantizeLinear", [y, scale, zp], out),
    ]
    params[out] = (scale, zp)
    g.replace_layer(layer, new)
