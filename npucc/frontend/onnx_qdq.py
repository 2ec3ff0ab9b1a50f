"""int8 import of a quantized model (docs/precision.md, "The int8 datapath").

At `--precision int8` every tensor the program stores is int8, so a QDQ model (as
onnxruntime's `quantize_static` writes it; a QOperator one is first put in QDQ form,
npucc.frontend.onnx_qop) becomes an integer program before legalize-onnx:
- DequantizeLinear -> Conv / Gemm / MatMul (constant int8 weights, optional int32 bias) ->
  [Relu | Clip] -> QuantizeLinear becomes one canonical conv2d or gemm on the int8 tensors:
  int8 x int8 products summed in int32 with the bias, requantized to the output's scale and zero
  point (attrs `qin` the input's zero point, `qzp`, `qlo`, `qhi`; input 2 the per-channel
  requant records, `REQUANT_BYTES` each: the int32 bias minus qin * sum(w) and the float32
  scale x_scale * w_scale / y_scale, as onnxruntime's QLinearConv computes them);
- DequantizeLinear -> MaxPool / a view -> QuantizeLinear of the same scale and zero point runs on
  the int8 values (a selection or a move commutes with the quantization);
- DequantizeLinear(s) -> Add / Sum, AveragePool, GlobalAveragePool, ReduceMean (H, W) or
  Softmax -> QuantizeLinear becomes that canonical vector layer with attr `q` (the scale and
  zero point of each input, then the output's): its instructions compute in float32 on the
  dequantized values and quantize their result, as the QDQ model does;
- a graph input read only by a QuantizeLinear and a graph output written by a DequantizeLinear
  keep their float types: the host quantizes and dequantizes them (`Tensor.quant`).
uint8 activations are held as int8 (value - 128, zero point - 128), which is exact. Any other
layer, a weight zero point other than 0 (after that shift) and a requantization between two
scales is refused: "has no int8 form".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import add_const, fresh_name, node_error, onnx_op
from npucc.frontend.onnx_conv_pool import conv, pool
from npucc.frontend.onnx_qop import qoperator_to_qdq
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.isa import REQUANT_BYTES
from npucc.passes import CompileContext, GraphPass

# ops on int8 values that commute with a quantization of one scale and zero point
SELECT_OPS = frozenset({"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
                        "Identity"})  # fmt: skip
CUBE_OPS = frozenset({"Conv", "Gemm", "MatMul"})
# ops on the vector pipe, computing in float32 on dequantized values -> the rewriting method
VECTOR_OPS = {"AveragePool": "_pool", "GlobalAveragePool": "_pool", "ReduceMean": "_pool",
              "Add": "_add", "Sum": "_add", "Softmax": "_softmax"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class QParams:
    """A quantized tensor: the int8 tensor holding it, its scale(s) and zero point(s)."""

    name: str  # the int8 tensor (an activation, or a constant whose data is the int values)
    scale: np.ndarray  # float32, 0-d (per tensor) or 1-d (per axis)
    zp: np.ndarray  # int64, as scale (int8 after the uint8 shift)
    axis: int


def _const(g: Graph, layer: Layer, index: int, default: float | None = None) -> np.ndarray:
    """The data of constant input `index` (or `default` when absent)."""
    name = layer.inputs[index] if len(layer.inputs) > index else ""
    if not name:
        if default is None:
            raise node_error(layer, f"input {index} is missing")
        return np.asarray(default)
    if not g.is_const(name):
        raise node_error(layer, f"input '{name}' must be constant for int8")
    data = g.tensors[name].data
    assert data is not None
    return data


def _shift(layer: Layer, zp_data: np.ndarray) -> int:
    """The int8 offset of a quantized type: -128 for uint8 (held as int8), 0 for int8."""
    kind = zp_data.dtype
    if kind == np.uint8:
        return -128
    if kind == np.int8:
        return 0
    raise node_error(layer, f"int8 needs int8 or uint8 quantization, not {kind}")


class Int8Import:
    """The rewrite of one graph (see the module doc)."""

    def __init__(self, g: Graph, block: int = 1) -> None:
        """`block`: the channels of a depthwise conv's dense blocks (the cube's n0)."""
        self.g = g
        self.block = block
        self.act: dict[str, QParams] = {}  # float tensor -> the int8 activation it dequantizes
        self.const: dict[str, QParams] = {}  # float tensor -> the int constant it dequantizes

    def run(self) -> None:
        """Rewrite every layer in order (a QOperator model's first in QDQ form); refuse what
        has no int8 form."""
        g = self.g
        qoperator_to_qdq(g, SELECT_OPS)
        for layer in list(g.layers):
            if not g.has_layer(layer):
                continue  # removed with the layer before it
            op = onnx_op(layer)
            if op == "DequantizeLinear":
                self._dequantize(layer)
            elif op == "QuantizeLinear":
                self._quantize(layer)
            elif op in CUBE_OPS:
                self._cube(layer, op)
            elif op in VECTOR_OPS:
                getattr(self, VECTOR_OPS[op])(layer, op)
            elif op in SELECT_OPS:
                self._select(layer, op)
            else:
                raise node_error(layer, f"{op or layer.op} has no int8 form (docs/precision.md)")
        for name in g.outputs:
            self._output(name)
        for name in g.inputs:
            if g.tensors[name].quant is None:
                raise NpuccError(f"graph input '{name}' is not quantized: an int8 program's "
                                 "inputs are read only by a QuantizeLinear")  # fmt: skip

    # ------------------------------------------------------------------------ Q and DQ

    def _params(self, layer: Layer, name: str, constant: bool = False) -> QParams:
        """The scale, zero point and axis of a Q/DQ layer over tensor `name` (`constant`: a
        DequantizeLinear of a constant, whose quantized type may also be int32: a bias)."""
        scale = _const(self.g, layer, 1).astype(np.float32)
        zp_raw = _const(self.g, layer, 2, 0.0)
        if not zp_raw.shape and zp_raw.dtype.kind == "f":
            zp_raw = np.zeros((), np.int8) if self._is_int8_of(layer) else np.zeros((), np.uint8)
        # NOTE: a constant's data is shifted by the _dequantize of its own type; only its zero
        # point's type is checked here (an int32 bias has zero point 0, no shift)
        shift = 0 if constant and zp_raw.dtype == np.int32 else _shift(layer, zp_raw)
        axis = int(layer.attrs.get("axis", 1))
        if scale.ndim > 1 or zp_raw.shape != scale.shape or "block_size" in layer.attrs:
            raise node_error(layer, "int8 needs per-tensor or per-axis scales")
        if not np.all(scale > 0):
            raise node_error(layer, "int8 needs positive scales")
        return QParams(name, scale, zp_raw.astype(np.int64) + shift, axis)

    def _is_int8_of(self, layer: Layer) -> bool:
        """Whether the quantized side of a Q/DQ layer without a zero point is int8."""
        side = layer.inputs[0] if onnx_op(layer) == "DequantizeLinear" else layer.outputs[0]
        return self.g.tensors[side].dtype == "i8"

    def _dequantize(self, layer: Layer) -> None:
        g, (out,) = self.g, layer.outputs
        q = self._params(layer, layer.inputs[0], g.is_const(layer.inputs[0]))
        if g.is_const(q.name):
            data = g.tensors[q.name].data
            assert data is not None
            if data.dtype not in (np.int8, np.uint8, np.int32):
                raise node_error(layer, f"int8 needs int8, uint8 or int32 constants, not "
                                        f"{data.dtype}")  # fmt: skip
            shift = -128 if data.dtype == np.uint8 else 0
            self.const[out] = QParams(q.name, q.scale, q.zp, q.axis)
            g.tensors[q.name].data = data.astype(np.int64) + shift
        else:
            if q.scale.ndim:
                raise node_error(layer, "int8 activations need one scale per tensor")
            self.act[out] = q
        g.remove_layer(layer)

    def _quantize(self, layer: Layer) -> None:
        g, (x,), (out,) = self.g, layer.inputs[:1], layer.outputs
        q = self._params(layer, out)
        if q.scale.ndim:
            raise node_error(layer, "int8 activations need one scale per tensor")
        if x in g.inputs:
            if len(g.users(x)) != 1:
                raise node_error(layer, f"graph input '{x}' is read by float layers too")
            g.tensors[x].quant = (float(q.scale), int(q.zp))
            g.remove_layer(layer)
            g.replace_uses(out, x)
            return
        src = self.act.get(x)
        if src is None or not _same(src, q):
            raise node_error(layer, f"requantizing '{x}' has no int8 form (a float producer, or "
                                    "another scale or zero point)")  # fmt: skip
        g.remove_layer(layer)
        g.replace_uses(out, src.name)

    def _consumer_q(self, layer: Layer) -> tuple[QParams, list[Layer], str]:
        """The QuantizeLinear that a layer's float output feeds (through a Relu or Clip): its
        params, the layers to drop and the fused activation."""
        g, tensor, act = self.g, layer.outputs[0], ""
        dropped: list[Layer] = []
        while True:
            users = g.users(tensor)
            if len(users) != 1 or tensor in g.outputs:
                raise node_error(layer, "int8 needs its output quantized by one QuantizeLinear")
            user = users[0]
            op = onnx_op(user)
            if op == "QuantizeLinear":
                return self._params(user, user.outputs[0]), [*dropped, user], act
            if op in ("Relu", "Clip") and not act:
                act, tensor = op, user.outputs[0]
                dropped.append(user)
                continue
            raise node_error(layer, f"int8 needs its output quantized, not read by {op}")

    # ------------------------------------------------------------------------ layers

    def _select(self, layer: Layer, op: str) -> None:
        """A selection or view of an int8 tensor, quantized again with the same parameters (or
        of a graph input, quantized after it: the host quantizes the input instead)."""
        g = self.g
        x = self.act.get(layer.inputs[0])
        if x is None and layer.inputs[0] in g.inputs and op != "Identity":
            self._select_input(layer, op)
            return
        if x is None:
            raise node_error(layer, f"{op} of a float tensor has no int8 form")
        if op == "Identity":  # the same dequantized values under another name
            self.act[layer.outputs[0]] = x
            g.remove_layer(layer)
            return
        y, dropped, act = self._consumer_q(layer)
        if act or not _same(x, y):
            raise node_error(layer, f"{op} between two quantizations has no int8 form")
        for d in dropped:
            g.remove_layer(d)
        g.set_inputs(layer, [x.name, *layer.inputs[1:]])
        g.replace_uses(dropped[-1].outputs[0], layer.outputs[0])
        g.tensors[layer.outputs[0]].dtype = "i8"

    def _select_input(self, layer: Layer, op: str) -> None:
        """A selection or view of a float graph input that one QuantizeLinear quantizes: the
        quantization moves onto the input (it commutes with a selection)."""
        g, name = self.g, layer.inputs[0]
        y, dropped, act = self._consumer_q(layer)
        if act or len(g.users(name)) != 1:
            raise node_error(layer, f"{op} of graph input '{name}' has no int8 form (another "
                                    "reader, or an activation before quantizing)")  # fmt: skip
        g.tensors[name].quant = (float(y.scale), int(y.zp))
        for d in dropped:
            g.remove_layer(d)
        g.replace_uses(dropped[-1].outputs[0], layer.outputs[0])
        g.tensors[layer.outputs[0]].dtype = "i8"

    def _cube(self, layer: Layer, op: str) -> None:
        """Conv, Gemm or MatMul on int8 operands into one requantizing conv2d or gemm."""
        g = self.g
        x = self.act.get(layer.inputs[0])
        w = self.const.get(layer.inputs[1])
        if x is None or w is None:
            raise node_error(layer, f"int8 {op} needs a quantized input and constant quantized "
                                    "weights")  # fmt: skip
        b_name = layer.inputs[2] if len(layer.inputs) > 2 else ""
        b = self.const.get(b_name) if b_name else None
        if b_name and b is None:
            raise node_error(layer, "int8 needs a quantized (int32) bias")
        w_data = g.tensors[w.name].data
        assert w_data is not None
        trans_b = int(layer.attrs.get("transB", 0)) if op == "Gemm" else 0
        if op == "Gemm" and (int(layer.attrs.get("transA", 0)) or layer.attrs.get("alpha", 1.0)
                             != 1.0 or layer.attrs.get("beta", 1.0) != 1.0):  # fmt: skip
            raise node_error(layer, "int8 Gemm needs transA=0, alpha=1 and beta=1")
        if op != "Conv" and (len(g.tensors[x.name].shape) != 2 or w_data.ndim != 2):
            raise node_error(layer, f"int8 {op} needs 2-D operands")
        # output channels on axis 0 of a conv weight and of Gemm's B^T, axis 1 of B [K, N]
        n_axis = 0 if op == "Conv" or trans_b else 1
        n = w_data.shape[n_axis]
        if w.scale.ndim and w.axis % w_data.ndim != n_axis:
            raise node_error(layer, "int8 needs weight scales per output channel")
        if np.any(w.zp != 0) or np.abs(w_data).max(initial=0) > 127:
            raise node_error(layer, "int8 needs int8 weights with zero point 0")
        bias = np.zeros(n, np.int64)
        if b is not None:
            b_data = g.tensors[b.name].data
            assert b_data is not None
            bias = np.broadcast_to(b_data.reshape(-1), (n,)).astype(np.int64)
        weights = Int8Weights(w_data, n_axis, np.broadcast_to(w.scale, (n,)), bias, w.name)
        if op == "Conv":
            attrs = dict(layer.attrs)
            group = int(attrs.get("group", 1))
            extra = {}
            if group > 1 and w_data.shape[1] == 1 and group == n and n % self.block == 0:
                weights, attrs["group"] = _blocked(weights, self.block), n // self.block
                extra["dense"] = self.block
            self._requantizing(layer, x, weights, "conv2d", attrs, extra)
        else:
            self._requantizing(layer, x, weights, "gemm", {"trans_b": trans_b})

    def _vector(
        self, layer: Layer, new: Layer, ins: list[QParams], shape: tuple[int, ...] | None = None
    ) -> None:
        """Replace `layer` (and the QuantizeLinear it feeds) by the int8 vector layer `new`
        on the int8 tensors of `ins`: its instructions dequantize what they read and quantize
        what they write (attr `q`, isa.QUANT_ARITY), a fused Relu or Clip a clip of the int8
        result; with `shape`, `new` writes that shape and a reshape the layer's output."""
        g = self.g
        y, dropped, act = self._consumer_q(layer)
        lo, hi = _bounds(g, dropped, act, y)
        out = dropped[-1].outputs[0]
        pairs = [v for q in (*ins, y) for v in (float(q.scale), float(q.zp))]
        tail = []
        if shape is not None:
            direct = add_tensor(g, f"{out}.{new.op}", shape, "i8")
            tail = [Layer(f"{layer.name}.view", "reshape", [direct], [out], {})]
            out = direct
        new.outputs = [out]
        new.attrs["q"] = tuple(pairs)
        if (lo, hi) != (-128, 127):  # NOTE: Q(relu(v)) = max(Q(v), zp): Q is monotone
            new.attrs.update(act="clip", act_min=float(lo), act_max=float(hi))
        new.src = (*layer.src, *(s for d in dropped for s in d.src))
        for d in dropped:
            g.remove_layer(d)
        g.replace_layer(layer, [new, *tail])
        g.tensors[out].dtype = g.tensors[new.outputs[0]].dtype = "i8"

    def _input(self, layer: Layer, index: int) -> QParams:
        """The int8 activation input `index` of `layer` dequantizes (refused if none)."""
        x = self.act.get(layer.inputs[index]) if len(layer.inputs) > index else None
        if x is None:
            raise node_error(layer, f"{onnx_op(layer)} of a float tensor has no int8 form")
        return x

    def _pool(self, layer: Layer, op: str) -> None:
        """An average over windows of an int8 tensor: one float32 mean per window of the
        dequantized values, quantized (the vector pipe's `vreduce mean` with `q`)."""
        g, x = self.g, self._input(layer, 0)
        shape = g.tensors[x.name].shape
        a = layer.attrs
        if len(shape) != 4:
            raise node_error(layer, f"int8 {op} needs a 4-D input")
        if op == "AveragePool":
            onnx_pool = Layer(layer.name, layer.op, [x.name], layer.outputs, a)
            (new,) = pool(g, onnx_pool)
            pads = any(new.attrs.get("pads", ())) or any(new.attrs.get("ceil_pads", ()))
            if pads and not new.attrs.get("count_include_pad", 0):
                raise node_error(layer, "int8 AveragePool needs windows of one size (no pads, "
                                        "or pads counted, no ceil_mode)")  # fmt: skip
        else:
            axes = sorted(int(v) % 4 for v in a.get("axes", (2, 3)))
            if op == "ReduceMean" and axes != [2, 3]:
                raise node_error(layer, "int8 ReduceMean needs axes 2, 3")
            new = Layer(layer.name, "globalavgpool", [x.name], layer.outputs, {})
            if not int(a.get("keepdims", 1)):
                self._vector(layer, new, [x], (*shape[:2], 1, 1))
                return
        self._vector(layer, new, [x])

    def _add(self, layer: Layer, op: str) -> None:
        """The sum of two int8 tensors of the same shape: dequantized, added in float32,
        quantized (one `vbinary add` with `q`)."""
        g = self.g
        if len(layer.inputs) != 2:
            raise node_error(layer, f"int8 {op} needs two inputs")
        a, b = self._input(layer, 0), self._input(layer, 1)
        if g.tensors[a.name].shape != g.tensors[b.name].shape:
            raise node_error(layer, f"int8 {op} needs inputs of one shape")
        self._vector(layer, Layer(layer.name, "add", [a.name, b.name], layer.outputs, {}), [a, b])

    def _softmax(self, layer: Layer, op: str) -> None:
        """Softmax over the last axis of an int8 tensor: in float32 on the dequantized values,
        quantized (`vsoftmax` with `q`)."""
        g, x = self.g, self._input(layer, 0)
        rank = len(g.tensors[x.name].shape)
        if int(layer.attrs.get("axis", -1)) % rank != rank - 1:
            raise node_error(layer, "int8 Softmax needs the last axis")
        new = Layer(layer.name, "softmax", [x.name], layer.outputs, {"axis": rank - 1})
        self._vector(layer, new, [x])

    def _requantizing(
        self,
        layer: Layer,
        x: QParams,
        w: Int8Weights,
        kind: str,
        attrs: dict,
        extra: dict | None = None,
    ) -> None:
        """Replace `layer` (and the QuantizeLinear it feeds) by one requantizing conv2d or gemm
        of the int8 tensor `x` (see the module doc); `attrs` are the ONNX node's, `extra`
        canonical attributes the new layer carries too (a depthwise conv's `dense`)."""
        g = self.g
        y, dropped, act = self._consumer_q(layer)
        n = w.data.shape[w.n_axis]
        moved = np.moveaxis(w.data, w.n_axis, 0).reshape(n, -1)
        zx = int(x.zp)
        folded = w.bias - zx * moved.sum(axis=1)
        if np.abs(folded).max(initial=0) >= 1 << 31:
            raise node_error(layer, "int8 bias beyond int32")
        # NOTE: as onnxruntime's QLinearConv: (x_scale * w_scale) / y_scale in float32
        scale = (np.float32(x.scale) * w.scale.astype(np.float32)) / np.float32(y.scale)
        records = np.zeros((n, REQUANT_BYTES), np.uint8)
        records[:, :4] = folded.astype("<i4").view(np.uint8).reshape(n, 4)
        records[:, 4:] = scale.astype("<f4").view(np.uint8).reshape(n, 4)
        w_key = add_const(g, f"{w.name}.i8", w.data.astype(np.int8))
        p_key = add_const(g, f"{layer.name}.requant", records.view(np.int8).reshape(-1))
        lo, hi = _bounds(g, dropped, act, y)
        out = dropped[-1].outputs[0]
        q_attrs = {"qin": zx, "qzp": int(y.zp), "qlo": lo, "qhi": hi}
        if kind == "conv2d":
            onnx_conv = Layer(layer.name, "onnx.Conv", [x.name, w_key, p_key], [out], attrs)
            new = conv(g, onnx_conv)[0]
        else:
            new = Layer(layer.name, "gemm", [x.name, w_key, p_key], [out], attrs)
        new.attrs.update(q_attrs, **(extra or {}))
        new.src = (*layer.src, *(s for d in dropped for s in d.src))
        for d in dropped:
            g.remove_layer(d)
        g.replace_layer(layer, [new])
        g.tensors[out].dtype = "i8"

    def _output(self, name: str) -> None:
        """A graph output: the dequantization of an int8 tensor, done by the host."""
        g = self.g
        q = self.act.get(name)
        if q is None or q.name in g.inputs:
            raise NpuccError(f"graph output '{name}' is not a DequantizeLinear of an int8 "
                             "layer's output (an int8 program's outputs are)")  # fmt: skip
        producer = g.producer(q.name)
        assert producer is not None
        g.replace_uses(q.name, name)
        g.set_outputs(producer, [name if t == q.name else t for t in producer.outputs])
        g.tensors[name].quant = (float(q.scale), int(q.zp))
        for other, params in list(self.act.items()):
            if params.name == q.name:
                self.act[other] = QParams(name, params.scale, params.zp, params.axis)


def add_tensor(g: Graph, base: str, shape: tuple[int, ...], dtype: str) -> str:
    """Register a new activation tensor; returns its name."""
    name = fresh_name(g, base)
    g.add_tensor(Tensor(name, shape, dtype))
    return name


@dataclass(frozen=True, slots=True)
class Int8Weights:
    """The constant operand of a requantizing layer: int weights and per-channel figures."""

    data: np.ndarray  # integer weights (a conv's [N, C/group, kh, kw], a gemm's B or B^T)
    n_axis: int  # the output-channel axis of `data`
    scale: np.ndarray  # float32 [N]: each output channel's weight scale
    bias: np.ndarray  # int64 [N]: the int32 bias (in units of x_scale * w_scale)
    name: str  # a stem for the int8 constant's name


def _blocked(w: Int8Weights, block: int) -> Int8Weights:
    """A depthwise conv's weights [C, 1, kh, kw] as C / `block` dense groups of `block`
    channels, zero off the diagonal: the same sums in `block` times fewer cube instructions
    (each of `block` output columns, as the cube computes anyway)."""
    c = w.data.shape[0]
    dense = np.zeros((c, block, *w.data.shape[2:]), w.data.dtype)
    dense[np.arange(c), np.arange(c) % block] = w.data[:, 0]
    return Int8Weights(dense, 0, w.scale, w.bias, w.name)


def _same(a: QParams, b: QParams) -> bool:
    """Whether two per-tensor quantizations are the same."""
    return bool(np.float32(a.scale) == np.float32(b.scale) and int(a.zp) == int(b.zp))


def _bounds(g: Graph, dropped: list[Layer], act: str, y: QParams) -> tuple[int, int]:
    """The int8 saturation bounds of an output, narrowed by a fused Relu or Clip."""
    lo, hi = -128, 127
    zp, scale = int(y.zp), np.float32(y.scale)
    if act == "Relu":
        lo = max(lo, zp)
    elif act == "Clip":
        clip = dropped[0]
        for index, is_lo in ((1, True), (2, False)):
            if len(clip.inputs) > index and clip.inputs[index]:
                bound = float(_const(g, clip, index))
                q = int(np.clip(np.rint(np.float32(bound) / scale) + zp, -128, 127))
                lo, hi = (max(lo, q), hi) if is_lo else (lo, min(hi, q))
    return lo, hi


@dataclass(frozen=True, slots=True)
class ImportInt8(GraphPass):
    """At int8: a quantized model's layers as integer layers (npucc.frontend.onnx_qdq)."""

    name = "import-int8"

    def run(self, ir: Graph, ctx: CompileContext) -> Graph:
        """Rewrite the graph at int8 precision; leave it unchanged at any other."""
        if ctx.target.dtype == "i8":
            Int8Import(ir, ctx.target.cube.n0).run()
        return ir
