"""Vector-pipe lowerings on the tiled IR: tiles fit their tier, cover the output, compute the op.

Each case lowers a one-layer graph of the graph IR (no frontend), checks the buffers live at
once in lowering order, then schedules, renders and interprets it with the real backend, on the
davinci-core target or on a tiny-memory variant that forces many tiles.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import npucc
from npucc.backend.lower import lower_graph
from npucc.backend.lower.context import LowerContext
from npucc.backend.lower.layout import boxes, coalesce
from npucc.backend.lower.pool import PoolGeom, _pool_cost
from npucc.checking import compare, random_inputs, run_onnxruntime
from npucc.compiler import backend_passes
from npucc.errors import NpuccError
from npucc.interp import run_stream
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.program import TiledProgram
from npucc.ir.stream_parse import parse_stream
from npucc.options import CompileOptions
from npucc.passes import CompileContext, PassManager
from npucc.target import load_target

TARGET = load_target("davinci-core")
TINY = TARGET.with_capacity(UB=4096, L1=4096)  # 1024 f32: forces many tiles on small tensors


def lowering_peaks(program: TiledProgram) -> dict[str, int]:
    """Peak live bytes per tier when the nodes run in lowering order."""
    graph = program.cores[0].graph
    live: dict[str, int] = {}
    peak: dict[str, int] = {}
    for node in graph.nodes:
        if node.op in ("ALLOC", "FREE"):
            buf = graph.buffers[node.bufs[0]]
            live[buf.tier] = live.get(buf.tier, 0) + (buf.size if node.op == "ALLOC" else -buf.size)
            peak[buf.tier] = max(peak.get(buf.tier, 0), live[buf.tier])
    return peak


def run_layer(op, inputs, out_shape, attrs=None, consts=None, target=TARGET, positive=False):
    """Lower and run one layer over random inputs; returns (output, inputs, program)."""
    rng = np.random.default_rng(0)
    g = Graph("t")
    names, feeds = [], {}
    for i, shape in enumerate(inputs):
        name = f"x{i}"
        data = rng.standard_normal(shape)
        data = np.asarray(np.abs(data) + 0.5 if positive else data, np.float32)
        if consts and i in consts:
            g.add_tensor(Tensor(name, tuple(shape), data=data))
        else:
            g.add_tensor(Tensor(name, tuple(shape)))
            g.inputs.append(name)
        names.append(name)
        feeds[name] = data
    g.add_tensor(Tensor("y", tuple(out_shape)))
    g.add_layer(Layer("L", op, names, ["y"], dict(attrs or {})))
    g.outputs.append("y")
    program = lower_graph(g, CompileContext(target))
    for tier, peak in lowering_peaks(program).items():
        assert peak <= target.memory.capacity(tier) // 2, f"{tier} peak {peak}"
    backend = PassManager(backend_passes(CompileOptions()))
    generated = backend.run(g, CompileContext(target))
    runtime = {n: feeds[n] for n in g.inputs}
    result = run_stream(parse_stream(generated.stream, "<test>"), generated.image, runtime)
    return result.outputs["y"], [feeds[n] for n in names], program


def close(got, ref):
    assert got.shape == ref.shape
    err = np.max(np.abs(got - ref)) if ref.size else 0.0
    assert err <= 1e-4 * np.max(np.abs(ref)) + 1e-6, err


# ------------------------------------------------------------------------- helpers


def test_boxes_cover_exactly():
    for dims, cap in [((7, 5, 3), 16), ((1,), 4), ((10,), 3), ((4, 100), 30), ((2, 3), 100)]:
        seen = np.zeros(dims, int)
        for starts, sizes in boxes(dims, cap):
            assert math.prod(sizes) <= cap
            seen[tuple(slice(s, s + n) for s, n in zip(starts, sizes, strict=True))] += 1
        assert (seen == 1).all()


def test_coalesce_merges_contiguous_and_broadcast():
    assert coalesce((2, 3, 4), (12, 4, 1), (0, 0, 1)) == ((6, 4), [(4, 1), (0, 1)])
    assert coalesce((1, 1), (1, 1)) == ((1,), [(1,)])
    assert coalesce((2, 1, 5), (5, 5, 1)) == ((10,), [(1,)])


# ------------------------------------------------------------------------- eltwise

BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize(
    "a,b",
    [((2, 3, 5, 7), (2, 3, 5, 7)), ((2, 3, 5, 7), (3, 1, 1)), ((1, 5), (4, 1)), ((6,), ())],
)
def test_binary(op, a, b):
    out_shape = np.broadcast_shapes(a, b)
    got, (x, y), _ = run_layer(op, [a, b], out_shape, target=TINY, positive=op == "div")
    close(got, BINARY[op](x, y))


@pytest.mark.parametrize(
    "a,b", [((3, 40, 50), (40, 1)), ((3, 40, 50), (3, 1, 50)), ((1, 1), (9, 300))]
)
def test_binary_broadcast_many_tiles(a, b):
    out_shape = np.broadcast_shapes(a, b)
    got, (x, y), _ = run_layer("sub", [a, b], out_shape, {"act": "relu"}, target=TINY)
    close(got, np.maximum(x - y, 0))


@pytest.mark.parametrize("a,b,consts", [((50, 64), (64,), None), ((8, 64, 16), (64, 1), {1})])
def test_small_broadcast_operand_loaded_once(a, b, consts):
    got, (x, y), program = run_layer("mul", [a, b], a, consts=consts, target=TINY)
    close(got, x * y)
    ops = [n.op for n in program.cores[0].graph.nodes]
    assert ops.count("COPY_IN") == ops.count("COPY_OUT") + 1 > 2


def test_binary_bigger_than_ub():
    shape = (3, 100, 300)  # 90000 elements > 65536
    got, (x, y), _ = run_layer("add", [shape, shape], shape)
    close(got, x + y)


UNARY = {
    "relu": lambda x: np.maximum(x, 0),
    "sqrt": np.sqrt,
    "recip": np.reciprocal,
    "log": np.log,
    "erf": np.vectorize(math.erf, otypes=[np.float32]),
    "exp": np.exp,
    "neg": np.negative,
    "tanh": np.tanh,
    "abs": np.abs,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    positive = op in ("sqrt", "recip", "log")
    got, (x,), _ = run_layer(op, [(3, 7, 50)], (3, 7, 50), target=TINY, positive=positive)
    close(got, UNARY[op](x))


def test_clip_with_fused_relu():
    attrs = {"min": -0.5, "max": 0.7, "act": "relu"}
    got, (x,), _ = run_layer("clip", [(2, 9, 11)], (2, 9, 11), attrs)
    close(got, np.clip(x, 0, 0.7))


# ------------------------------------------------------------------------- pool


def ref_pool(x, op, kernel, strides, pads, dil, include_pad, out_hw):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = kernel, strides, dil, pads
    oh, ow = out_hw
    y = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            rows = [i * sh - pt + a * dh for a in range(kh)]
            cols = [j * sw - pl + b * dw for b in range(kw)]
            taps = [(r, q) for r in rows for q in cols]
            valid = [(r, q) for r, q in taps if 0 <= r < h and 0 <= q < w]
            vals = np.stack([x[:, :, r, q] for r, q in valid], -1)
            if op == "maxpool":
                y[:, :, i, j] = vals.max(-1)
            else:
                inpad = [(r, q) for r, q in taps if -pt <= r < h + pb and -pl <= q < w + pr]
                y[:, :, i, j] = vals.sum(-1) / (len(inpad) if include_pad else len(valid))
    return y


def out_size(size, k, s, d, p0, p1):
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


POOLS = [
    # shape, kernel, strides, pads (t,l,b,r), dilations
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 4, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
    ((1, 2, 10, 7), (3, 2), (1, 2), (0, 1, 2, 1), (1, 1)),  # asymmetric, ceil-style pads
    ((1, 2, 12, 12), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    ((2, 5, 13, 13), (5, 5), (3, 3), (2, 2, 3, 3), (1, 1)),
]


@pytest.mark.parametrize("op,include_pad", [("maxpool", 0), ("avgpool", 0), ("avgpool", 1)])
@pytest.mark.parametrize("case", POOLS)
@pytest.mark.parametrize("target", [TARGET, TINY], ids=["ub", "tiny"])
def test_pool(op, include_pad, case, target):
    shape, kernel, strides, pads, dil = case
    oh = out_size(shape[2], kernel[0], strides[0], dil[0], pads[0], pads[2])
    ow = out_size(shape[3], kernel[1], strides[1], dil[1], pads[1], pads[3])
    attrs = dict(
        kernel=kernel, strides=strides, pads=pads, dilations=dil, count_include_pad=include_pad
    )
    got, (x,), _ = run_layer(op, [shape], (*shape[:2], oh, ow), attrs, target=target)
    close(got, ref_pool(x, op, kernel, strides, pads, dil, include_pad, (oh, ow)))


def test_pool_wide_rows_tile_columns():
    target = TARGET.with_capacity(UB=1024)  # 128 elements per tile
    shape, attrs = (1, 1, 4, 200), dict(kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))
    got, (x,), _ = run_layer("maxpool", [shape], shape, attrs, target=target)
    close(got, ref_pool(x, "maxpool", (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0, (4, 200)))


def test_a_stride_one_pool_is_pooled_by_columns_then_rows():
    # 3 x 3 windows at stride 1: 2 vbinary max over the window rows, then 2 over the output
    # rows (about 4 lanes of work per output pixel instead of one vreduce's 9)
    shape, attrs = (1, 64, 28, 28), dict(kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))
    got, (x,), program = run_layer("maxpool", [shape], shape, attrs)
    close(got, ref_pool(x, "maxpool", (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0, (28, 28)))
    nodes = program.cores[0].graph.nodes
    opcodes = [n.instr.opcode for n in nodes if n.pipe == "VECTOR" and n.instr is not None]
    assert "vreduce" not in opcodes and opcodes.count("vbinary") >= 4


def test_a_pool_of_an_onchip_tensor_is_priced_by_its_l1_copies():
    # a stem's 3x3 stride-2 max pool in bands of 2 output rows over 64 planes: from DDR its
    # loads bind either way; read from L1 (MTE1) and stored to L1 (on VECTOR), the vector
    # unit binds and the separable pool's fewer lanes pay
    ctx = LowerContext(None, None, None, TARGET)  # type: ignore[arg-type]
    g = PoolGeom(64, 111, 111, 55, 55, 3, 3, 2, 2, 1, 1, (0, 0, 0, 0))
    ddr = [_pool_cost(ctx, g, sep, (64, 2, 55)) for sep in (False, True)]
    onchip = [_pool_cost(ctx, g, sep, (64, 2, 55), (True, True)) for sep in (False, True)]
    assert ddr[0] == ddr[1] and onchip[1] < onchip[0] < ddr[0]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_separable_pools_agree_with_onnxruntime(op):
    extra = {"count_include_pad": 0} if op == "AveragePool" else {}
    node = helper.make_node(
        op, ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], **extra
    )
    agrees_with_onnxruntime(node, (1, 48, 17, 17))


def agrees_with_onnxruntime(node, shape):
    """Compile a one-node ONNX model (x -> y, both `shape`), run it and compare with
    onnxruntime; the interpreted makespan is the predicted one."""
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in "xy"]
    graph = helper.make_graph([node], "one", info[:1], info[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = npucc.compile(model, TARGET)
    inputs = random_inputs(program.inputs, 0, model)
    result = program.execute(inputs)
    assert all(c.ok for c in compare(result.outputs, run_onnxruntime(model, inputs)))
    assert result.makespan == program.stats["predicted_makespan"]


def test_pool_kernel_too_big_raises():
    target = TARGET.with_capacity(UB=256)  # 32 elements per tile
    attrs = dict(kernel=(7, 7), strides=(1, 1), pads=(0, 0, 0, 0))
    with pytest.raises(NpuccError, match="UB too small"):
        run_layer("maxpool", [(1, 1, 9, 9)], (1, 1, 3, 3), attrs, target=target)


@pytest.mark.parametrize("op", ["globalavgpool", "globalmaxpool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 60, 60), (3, 70, 2, 2)])
def test_global_pool(op, shape):
    got, (x,), _ = run_layer(op, [shape], (*shape[:2], 1, 1), target=TINY)
    fn = np.mean if op == "globalavgpool" else np.max
    close(got, fn(x, axis=(2, 3), keepdims=True))


# ------------------------------------------------------------------------- reduce


def ref_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize(
    "shape,axis,target",
    [
        ((2, 10), 1, TARGET),
        ((2, 3, 4, 5), 1, TARGET),
        ((2, 3, 4, 5), 3, TARGET),
        ((3, 700, 2), 1, TINY),  # inner tiled
        ((2, 3000), 1, TINY),  # axis streamed in chunks
        ((2, 3000, 3), 1, TINY),  # axis streamed, inner > 1
        ((40, 30), 0, TINY),
    ],
)
def test_softmax(shape, axis, target):
    got, (x,), _ = run_layer("softmax", [shape], shape, {"axis": axis}, target=target)
    close(got, ref_softmax(x, axis))


def ref_lrn(x, size, alpha, beta, bias):
    c = x.shape[1]
    sq = x**2
    s = np.zeros_like(x)
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c, ch + math.ceil((size - 1) / 2) + 1)
        s[:, ch] = sq[:, lo:hi].sum(1)
    return x / (bias + alpha / size * s) ** beta


@pytest.mark.parametrize("size", [1, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("shape,target", [((2, 7, 5, 6), TARGET), ((1, 300, 4, 4), TINY)])
def test_lrn(size, shape, target):
    attrs = dict(size=size, alpha=1e-2, beta=0.75, bias=2.0)
    got, (x,), _ = run_layer("lrn", [shape], shape, attrs, target=target)
    close(got, ref_lrn(x, size, 1e-2, 0.75, 2.0))


@pytest.mark.parametrize("size,adds", [(5, 3), (7, 4), (8, 3)])
def test_an_lrn_window_is_summed_by_doubling(size, adds):
    # windows of 2, 4 (, 8) channels, then the narrower terms: 5 = 4 + 1, 7 = 4 + 2 + 1
    shape, attrs = (1, 64, 14, 14), dict(size=size, alpha=1e-2, beta=0.75, bias=2.0)
    got, (x,), program = run_layer("lrn", [shape], shape, attrs)
    close(got, ref_lrn(x, size, 1e-2, 0.75, 2.0))
    nodes = program.cores[0].graph.nodes
    vector = [n.instr for n in nodes if n.pipe == "VECTOR" and n.instr is not None]
    assert not any(i.opcode == "vreduce" for i in vector)
    tiles = sum(1 for i in vector if i.opcode == "vunary" and i.op == "square")
    assert sum(1 for i in vector if i.opcode == "vbinary" and i.op == "add") == adds * tiles


def test_an_lrn_agrees_with_onnxruntime():
    node = helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-3, beta=0.75, bias=1.0)
    agrees_with_onnxruntime(node, (1, 40, 9, 9))


# ------------------------------------------------------------------------- layout


@pytest.mark.parametrize(
    "shapes,axis",
    [([(2, 3, 4), (2, 5, 4)], 1), ([(1, 3), (4, 3), (2, 3)], 0), ([(3, 40, 30), (3, 40, 9)], 2)],
)
def test_concat(shapes, axis):
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    got, xs, _ = run_layer("concat", shapes, out, {"axis": axis}, consts={1}, target=TINY)
    close(got, np.concatenate(xs, axis))


@pytest.mark.parametrize(
    "shape,perm",
    [((2, 3, 4, 5), (0, 2, 3, 1)), ((30, 50), (1, 0)), ((4, 5, 6), (2, 1, 0)), ((7,), (0,))],
)
def test_transpose(shape, perm):
    out = tuple(shape[p] for p in perm)
    got, (x,), _ = run_layer("transpose", [shape], out, {"perm": perm}, target=TINY)
    close(got, np.transpose(x, perm))
