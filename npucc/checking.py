"""Differential checking against onnxruntime: seeded inputs and weights, error figures."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from npucc.frontend.onnx_import import view_sources
from npucc.frontend.weights_apart import external_weights
from npucc.ir.dtypes import HOST_INTS

# NOTE: the documented tolerance of `npucc check`: max |error| <= RTOL * max |reference| + ATOL.
RTOL = 1e-4
ATOL = 1e-6
_DRAW_BLOCK = 1 << 20  # random weights are drawn this many values at a time
EXTERNAL_BYTES = 1024  # `model_file` writes an initializer this big or bigger apart
VACUOUS_SCALE = 10  # a reference below VACUOUS_SCALE * ATOL makes a comparison that tests little
# NOTE: at fp16 (docs/precision.md) the tolerance against onnxruntime's float32 run is
# max |error| <= FP16_ULPS * FP16_U * sqrt(L) * max |reference| + ATOL, L the model's longest
# reduction (`reduction_length`): each rounding to fp16 (weights, inputs, every stored result)
# adds a relative error of at most FP16_U, and a sum of L such errors grows like sqrt(L).
FP16_U = 2.0**-11  # unit roundoff of float16 (half an ulp at 1.0)
FP16_ULPS = 2.0  # rounding steps of headroom: a deep network compounds its layers' errors
# ops whose output element sums over some input axes, and the inputs/axes that sum (see
# `reduction_length`)
_REDUCING = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Softmax", "LogSoftmax",
             "LayerNormalization", "GlobalAveragePool", "AveragePool", "ReduceMean",
             "ReduceSum", "ReduceL2", "LRN", "InstanceNormalization", "Einsum",
             "ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ReduceProd",
             "GroupNormalization", "RMSNormalization", "MeanVarianceNormalization",
             "LpNormalization", "LpPool", "GlobalLpPool", "Attention", "RNN", "GRU", "LSTM",
             "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "CumSum", "CumProd",
             "Resize")  # fmt: skip


def random_inputs(
    shapes: Mapping[str, tuple[int, ...]], seed: int = 0, model: onnx.ModelProto | None = None
) -> dict[str, np.ndarray]:
    """Seeded inputs, one generator seeded once, in the given name order.

    Float inputs are standard normal float32. With `model`, an integer input that feeds Gather
    indices gets uniform valid indices in [0, n) (n: the smallest size of the data axis among
    the Gathers it feeds), another integer or boolean input uniform 0s and 1s (a mask), both
    of the input's declared type, and a FLOAT16, BFLOAT16 or DOUBLE input gets its standard
    normal values rounded to that type.
    """
    rng = np.random.default_rng(seed)
    bounds = gather_index_bounds(model) if model is not None else {}
    floats = float_input_types(model) if model is not None else {}
    ints = integer_input_types(model) if model is not None else {}
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        if name in bounds:
            high, dtype = bounds[name]
            out[name] = rng.integers(0, high, shape).astype(dtype)
        elif name in ints:
            out[name] = rng.integers(0, 2, shape).astype(ints[name])
        else:
            values = rng.standard_normal(shape).astype(np.float32)
            out[name] = values.astype(floats.get(name, values.dtype))
    return out


def integer_input_types(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """The numpy type of each integer or BOOL graph input (the types npucc.ir.dtypes holds)."""
    ints = tuple(onnx.helper.np_dtype_to_tensor_dtype(t) for t in HOST_INTS.values())
    return _input_types(model, ints)


def float_input_types(model: onnx.ModelProto) -> dict[str, np.dtype]:
    """The numpy type of each FLOAT16, BFLOAT16 or DOUBLE graph input."""
    others = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)
    return _input_types(model, others)


def _input_types(model: onnx.ModelProto, elem_types: tuple[int, ...]) -> dict[str, np.dtype]:
    """The numpy type of each graph input whose element type is one of `elem_types`."""
    return {
        v.name: np.dtype(onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
        for v in model.graph.input
        if v.type.tensor_type.elem_type in elem_types
    }


def gather_index_bounds(model: onnx.ModelProto) -> dict[str, tuple[int, np.dtype]]:
    """Integer graph inputs used as Gather indices: (exclusive bound, numpy dtype) per name."""
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    types = {
        v.name: v.type.tensor_type.elem_type
        for v in graph.input
        if v.name not in inits and v.type.tensor_type.elem_type
    }
    ints = {n for n, t in types.items() if t in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
    sources = view_sources(graph)

    def source(name: str) -> str:
        """The tensor `name` is a (chain of) order-keeping view(s) of."""
        return sources.get(name, name)

    gathers = [n for n in graph.node if n.op_type == "Gather" and source(n.input[1]) in ints]
    if not gathers:
        return {}
    inferred = onnx.shape_inference.infer_shapes(model)
    dims: dict[str, tuple[int, ...]] = {i.name: tuple(i.dims) for i in graph.initializer}
    for v in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if v.name not in dims and v.type.tensor_type.HasField("shape"):
            dims[v.name] = tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
    bounds: dict[str, tuple[int, np.dtype]] = {}
    for node in gathers:
        shape = dims.get(node.input[0])
        if not shape:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        size = shape[axis % len(shape)]
        if size <= 0:
            continue
        ids = source(node.input[1])
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(types[ids]))
        bounds[ids] = (min(size, bounds.get(ids, (size, dtype))[0]), dtype)
    return bounds


def randomize_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy whose float weights are seeded random values of the same shapes.

    Weights are the float initializers, including those the model zoo files build with
    ConstantOfShape from a constant shape (they are turned into initializers first).

    Weights get He-scaled normals (std sqrt(2 / fan_in)); BatchNormalization variances are
    uniform in [0.5, 1.5], its scales in [0.2, 0.6] and its means and biases small, so that the
    activations of deep networks stay in a sensible range.
    """
    out = _without_float_weights(model)
    for init, values in _random_weights(out, seed):
        data = values.tobytes()
        del values  # NOTE: freed before the message copies `data`: a weight held twice at most
        init.raw_data = data
        del data
    return out


def _random_weights(
    out: onnx.ModelProto, seed: int
) -> Iterator[tuple[onnx.TensorProto, np.ndarray]]:
    """Each FLOAT initializer of `out` (from `_without_float_weights`; ConstantOfShape weights
    made initializers first) with its drawn values as little-endian float32, in order: the
    rule of `randomize_weights`."""
    _materialize_constant_of_shape(out, unfilled=True)  # their values are drawn below
    rng = np.random.default_rng(seed)
    role: dict[str, str] = {}
    for node in out.graph.node:
        if node.op_type == "BatchNormalization":
            for index, name in enumerate(node.input[1:5], start=1):
                role[name] = ("", "scale", "shift", "shift", "var")[index]
    for init in out.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT:
            continue
        name, shape = init.name, tuple(init.dims)
        kind = role.get(name, "weight")
        if kind == "scale":
            draw = partial(rng.uniform, 0.2, 0.6)
        elif kind == "var":
            draw = partial(rng.uniform, 0.5, 1.5)
        elif kind == "shift" or len(shape) <= 1:
            draw = partial(rng.normal, 0.0, 0.1)
        else:
            draw = partial(rng.normal, 0.0, math.sqrt(2.0 / max(1, math.prod(shape[1:]))))
        init.Clear()  # the old values go before the new are drawn
        init.name, init.data_type = name, onnx.TensorProto.FLOAT
        init.dims.extend(shape)
        yield init, _drawn(draw, math.prod(shape)).astype("<f4", copy=False)


def _without_float_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose FLOAT initializers have their names, types and dims, no values.

    NOTE: not a whole copy whose weights are then replaced: a protobuf's arena keeps what a
    message held until it dies, so the copy would hold the old weights beside the drawn ones
    (VGG-19: `randomize_weights`' peak 2,031 -> 1,483 MiB, the copy it returns 1,171 -> 623 MiB).
    """
    out = onnx.ModelProto()
    _copy_fields(model, out, skip="graph")
    _copy_fields(model.graph, out.graph, skip="initializer")
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            out.graph.initializer.add(name=init.name, dims=init.dims, data_type=init.data_type)
        else:
            out.graph.initializer.append(init)
    return out


def _copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Copy every field of protobuf message `src` that is set into `dst`, but `skip`."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(dst, field.name).extend(value)
        elif field.cpp_type == field.CPPTYPE_MESSAGE:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _drawn(draw: Callable[[int], np.ndarray | float], size: int) -> np.ndarray:
    """`size` float32 values of `draw`, drawn in blocks: the same values as one draw of
    `size`, without its float64 copy of a big weight."""
    out = np.empty(size, np.float32)
    for start in range(0, size, _DRAW_BLOCK):
        out[start : start + _DRAW_BLOCK] = draw(min(_DRAW_BLOCK, size - start))
    return out


def _materialize_constant_of_shape(model: onnx.ModelProto, unfilled: bool = False) -> None:
    """Replace ConstantOfShape nodes fed by an initializer shape with the initializer they make.

    `unfilled`: a FLOAT one gets its dims but no values (the caller sets them): a protobuf's
    arena keeps what it held until the model dies, so filling it twice would hold it twice.
    """
    inits = {i.name: i for i in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            value = np.zeros(1, np.float32)
            for attr in node.attribute:
                if attr.name == "value":
                    value = numpy_helper.to_array(attr.t)
            if unfilled and value.dtype == np.float32:
                made = model.graph.initializer.add(name=node.output[0], dims=shape)
                made.data_type = onnx.TensorProto.FLOAT
            else:
                filled = np.full(shape, value.reshape(-1)[0], dtype=value.dtype)
                made = numpy_helper.from_array(filled, node.output[0])
                del filled  # freed before the tensor is copied into the graph
                model.graph.initializer.append(made)
            if model.ir_version < 4:  # initializers must also be graph inputs before IR 4
                elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
                info = onnx.helper.make_tensor_value_info(node.output[0], elem, shape)
                model.graph.input.append(info)
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def model_file(
    model: onnx.ModelProto, folder: str | os.PathLike[str], seed: int | None = None
) -> Path:
    """Write `model` as FOLDER/model.onnx, its weights in an external data file beside it
    (`model`'s weights become references to that file); its path. With `seed`, the weights
    written are `randomize_weights(model, seed)`'s (`model` is left as it is).

    NOTE: a big check holds its model this way, not in memory: the compile reads it from the
    file and drops it after import, and onnxruntime maps the weights file rather than copying
    it (VGG-19: 548 MB not held while it compiles and interprets, and onnxruntime's run adds
    0.6 GB, not 1.25 GB).
    NOTE: with `seed`, each big weight goes to the data file as it is drawn, never into a
    message (VGG-19's `--random-weights` check: its peak before the compile 1,483 MiB with
    `randomize_weights` then `model_file`, ~1,150 with this, the model's load).
    """
    path = Path(folder) / "model.onnx"
    location = "model.onnx.data"
    if seed is not None:
        model = _without_float_weights(model)
        with open(path.with_name(location), "wb") as data:
            for init, values in _random_weights(model, seed):
                if values.nbytes < EXTERNAL_BYTES:
                    init.raw_data = values.tobytes()  # the rest is left to save_model's rule
                    continue
                offset = data.tell()
                data.write(values.data)
                del values  # (before the next is drawn)
                init.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", location), ("offset", offset),
                                   ("length", data.tell() - offset)):  # fmt: skip
                    init.external_data.add(key=key, value=str(value))
    # NOTE: save_model appends the weights not yet apart to the data file
    onnx.save_model(model, os.fspath(path), save_as_external_data=True, location=location,
                    size_threshold=EXTERNAL_BYTES)  # fmt: skip
    return path


def holds_weights_apart(path: str | os.PathLike[str]) -> bool:
    """Whether the model file at `path` holds its weights as `model_file` writes them: every
    initializer of EXTERNAL_BYTES or more in an external data file, and no subgraph (whose
    initializers `model_file` would move out too)."""
    try:
        graph = onnx.load(os.fspath(path), load_external_data=False).graph
    except Exception:  # NOTE: unreadable: the frontend says why
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for node in graph.node for a in node.attribute):  # fmt: skip
        return False
    external = onnx.TensorProto.EXTERNAL
    return all(t.data_location == external or t.ByteSize() < EXTERNAL_BYTES
               for t in graph.initializer)  # fmt: skip


def run_onnxruntime(
    model: onnx.ModelProto | Path, inputs: dict[str, np.ndarray], optimized: bool = False
) -> dict[str, np.ndarray]:
    """Outputs of the model (or the model file at a path) under onnxruntime's CPU provider,
    by output name: its nodes as written (ORT_DISABLE_ALL), or with every graph optimization
    (`optimized`: a QDQ model's nodes fused into onnxruntime's integer kernels)."""
    import onnxruntime as ort

    if isinstance(model, Path):  # its external weights are mapped, not copied
        cpu = ["CPUExecutionProvider"]
        return _session_outputs(ort.InferenceSession(os.fspath(model), _ort_options(optimized),
                                                     providers=cpu), inputs)  # fmt: skip
    # NOTE: the big weights reach onnxruntime as numpy arrays it uses in place, not inside the
    # serialized model it would parse into copies of its own (VGG-19: 1.5 GB more, not 0.55)
    session, values = _weights_apart_session(*external_weights(model), optimized)
    outputs = _session_outputs(session, inputs)
    del session, values  # NOTE: the session uses the arrays: they outlive it
    return outputs


def _ort_options(optimized: bool) -> Any:
    """onnxruntime's session options: every graph optimization or none, quiet."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    level = ort.GraphOptimizationLevel
    options.graph_optimization_level = level.ORT_ENABLE_ALL if optimized else level.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return options


def _weights_apart_session(
    apart: onnx.ModelProto, weights: dict[str, onnx.TensorProto], optimized: bool = False
) -> tuple[Any, list[Any]]:
    """A session of `apart` (`external_weights`'s copy) given `weights` as numpy arrays it uses
    in place, and those arrays (to outlive the session)."""
    import onnxruntime as ort

    options = _ort_options(optimized)
    names = list(weights)
    values = [ort.OrtValue.ortvalue_from_numpy(numpy_helper.to_array(weights[n])) for n in names]
    if names:
        options.add_external_initializers(names, values)
    cpu = ["CPUExecutionProvider"]
    return ort.InferenceSession(apart.SerializeToString(), options, providers=cpu), values


def _session_outputs(session: Any, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """An onnxruntime session's outputs on `inputs`, by output name."""
    outputs = [o.name for o in session.get_outputs()]
    return dict(zip(outputs, session.run(outputs, inputs), strict=True))


def fp16_rtol(reduction: int) -> float:
    """The relative tolerance at fp16 for a model whose longest reduction sums `reduction`
    terms (the NOTE at FP16_U)."""
    return FP16_ULPS * FP16_U * math.sqrt(max(1, reduction))


def reduction_length(model: onnx.ModelProto) -> int:
    """The most terms any one output element of the model sums (1 for none): a Conv's
    C/group*kh*kw, a MatMul's or Gemm's K, a pool's window, a normalisation's or reduction's
    reduced axes, an attention's or recurrence's inner products, a loss's classes and mean, an
    interpolation's taps; the nodes of subgraphs (If, Loop, Scan bodies) count too. 0 from
    `_terms` is an unknown dimension."""
    graph = onnx.shape_inference.infer_shapes(model).graph
    return _longest(graph, {})


def _longest(graph: onnx.GraphProto, outer: dict[str, tuple[int, ...]]) -> int:
    """`reduction_length` of the nodes of `graph`, whose enclosing graphs' shapes are `outer`."""
    dims = dict(outer)
    dims.update((i.name, tuple(i.dims)) for i in graph.initializer)
    for v in (*graph.input, *graph.value_info, *graph.output):
        if v.type.tensor_type.HasField("shape"):
            dims.setdefault(v.name, tuple(d.dim_value for d in v.type.tensor_type.shape.dim))
    # NOTE: shape inference leaves some shapes unknown (a subgraph's tensors) or some dimensions
    # (0: a Reshape to a computed shape); a reduction over such a tensor is bounded by the
    # largest tensor of known shape
    bound = max((math.prod(d) for d in dims.values()), default=1)
    longest = 1
    for node in graph.node:
        x = dims.get(node.input[0]) if node.input else ()
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in _REDUCING and x != ():
            terms = _terms(node, x, dims, attrs) if x else 0
            longest = max(longest, terms if terms else bound)
        for value in attrs.values():
            for sub in value if isinstance(value, list) else [value]:
                if isinstance(sub, onnx.GraphProto):
                    longest = max(longest, _longest(sub, dims))
    return longest


def _terms(
    node: onnx.NodeProto, x: tuple[int, ...], dims: dict[str, tuple[int, ...]], attrs: dict
) -> int:
    """Terms one output element of a `_REDUCING` node sums (`x`: its first input's shape)."""
    op = node.op_type
    w = dims.get(node.input[1], ()) if len(node.input) > 1 else ()
    if op in ("Conv", "ConvTranspose"):
        return math.prod(w[1:]) * (w[0] // attrs.get("group", 1) if op == "ConvTranspose" else 1)
    if op == "Gemm":
        return x[-2] if attrs.get("transA", 0) else x[-1]
    if op == "MatMul":
        return x[-1] or (w[-2] if len(w) >= 2 else 0)
    if op == "Einsum":
        return x[-1]
    if op in ("GlobalAveragePool", "InstanceNormalization", "GlobalLpPool"):
        return math.prod(x[2:])
    if op in ("AveragePool", "LpPool"):
        return math.prod(attrs.get("kernel_shape", (1,)))
    if op == "LRN":
        return int(attrs.get("size", 1))
    if op in ("LayerNormalization", "RMSNormalization"):
        return math.prod(x[attrs.get("axis", -1) :])
    if op == "GroupNormalization":
        return math.prod(x[1:]) // max(1, int(attrs.get("num_groups", 1)))
    if op == "MeanVarianceNormalization":
        return math.prod(x[a] for a in attrs.get("axes", (0, 2, 3)) if a < len(x))
    if op in ("Softmax", "LogSoftmax", "LpNormalization"):
        return x[attrs.get("axis", -1)]
    if op in ("CumSum", "CumProd"):  # the axis is an input: the longest axis bounds it
        return max(x)
    if op == "Attention":  # Q's head size (3-D: hidden size) and the key sequence length
        k = dims.get(node.input[1], ())
        return max(x[-1], k[-2] if len(k) >= 3 else 1)
    if op in ("RNN", "GRU", "LSTM"):  # each of the T steps sums X W^T and H R^T (I + H terms)
        steps = x[1] if attrs.get("layout", 0) else x[0]
        return steps * (x[-1] + int(attrs.get("hidden_size", 1)))
    if op in ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"):
        classes = x[1] if op == "SoftmaxCrossEntropyLoss" and len(x) > 1 else 1
        mean = attrs.get("reduction", b"mean") not in (b"none", "none")
        return max(classes, math.prod(x) // max(1, x[1] if len(x) > 1 else 1) if mean else 1)
    if op == "Resize":
        y = dims.get(node.output[0], ())
        mode = attrs.get("mode", b"nearest")
        taps = {b"linear": 2, b"cubic": 4, "linear": 2, "cubic": 4}.get(mode, 1)
        resized = sum(a != b for a, b in zip(x, y, strict=False)) if len(y) == len(x) else len(x)
        return taps**resized
    axes = attrs.get("axes")  # Reduce*: the attribute (older opsets), else every axis (a bound)
    return math.prod(x[a] for a in axes) if axes else math.prod(x)


def fp16_reference(
    model: onnx.ModelProto, inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray] | str:
    """Onnxruntime's outputs for the model converted to float16 by onnxconverter-common (float32
    inputs and outputs kept, as an fp16 deployment runs it), or why there are none (the
    converter or onnxruntime refused the converted model)."""
    from onnxconverter_common import float16

    plain = onnx.ModelProto()
    plain.CopyFrom(model)
    # NOTE: before IR 4 initializers are graph inputs too; the converter makes the initializers
    # fp16 but not those inputs, which onnxruntime then refuses: drop them (IR 4 allows it)
    inits = {i.name for i in plain.graph.initializer}
    kept = [v for v in plain.graph.input if v.name not in inits]
    del plain.graph.input[:]
    plain.graph.input.extend(kept)
    plain.ir_version = max(plain.ir_version, 4)
    try:
        with warnings.catch_warnings():  # it warns of every constant it clamps to fp16's range
            warnings.simplefilter("ignore")
            half = float16.convert_float_to_float16(
                plain, keep_io_types=True, disable_shape_infer=True, check_fp16_ready=False
            )
        return run_onnxruntime(half, inputs)
    except Exception as exc:  # noqa: BLE001 - the converter's and onnxruntime's own errors
        text = " ".join(str(exc).split())
        return text if len(text) <= 240 else f"...{text[-240:]}"  # the reason ends the message


@dataclass(slots=True)
class Comparison:
    """Error figures of one output."""

    name: str
    max_abs: float  # max |npucc - reference|
    max_ref: float  # max |reference|
    rtol: float = RTOL  # the relative tolerance (RTOL, or `fp16_rtol` at fp16)

    @property
    def rel(self) -> float:
        """max_abs relative to max |reference|."""
        return self.max_abs / self.max_ref if self.max_ref else self.max_abs

    @property
    def ok(self) -> bool:
        """Within the documented tolerance."""
        return self.max_abs <= self.rtol * self.max_ref + ATOL

    @property
    def vacuous(self) -> bool:
        """The reference is so close to zero that the absolute tolerance lets almost anything
        pass (a zero-initialised head, activations that vanish through a deep network)."""
        return self.max_ref < VACUOUS_SCALE * ATOL


def compare(
    got: dict[str, np.ndarray], ref: dict[str, np.ndarray], rtol: float = RTOL
) -> list[Comparison]:
    """One Comparison per reference output (a missing or misshapen output fails with inf)."""
    result = []
    for name, expected in ref.items():
        expected = np.asarray(expected, dtype=np.float64)
        actual = got.get(name)
        if actual is None or np.shape(actual) != expected.shape:
            result.append(
                Comparison(name, math.inf, float(np.max(np.abs(expected), initial=0)), rtol)
            )
            continue
        diff = np.abs(np.asarray(actual, dtype=np.float64) - expected)
        max_abs = float(np.max(diff, initial=0.0)) if np.all(np.isfinite(diff)) else math.inf
        result.append(Comparison(name, max_abs, float(np.max(np.abs(expected), initial=0.0)), rtol))
    return result


# NOTE: at int8 (docs/precision.md) npucc's outputs are compared with onnxruntime running the
# same quantized model (its QDQ nodes as written, ORT_DISABLE_ALL) in quantization steps of each
# output's scale: the verdict asks at least INT8_EXACT of the elements equal and none more
# than INT8_STEPS steps apart.
INT8_EXACT = 0.999
INT8_STEPS = 1


@dataclass(slots=True)
class StepComparison:
    """Agreement of one int8 program's output, in quantization steps of its scale."""

    name: str
    equal: int  # elements equal to the reference
    elements: int
    max_steps: float  # the largest difference, in steps (inf: missing, misshapen or NaN)
    scale: float

    @property
    def exact(self) -> float:
        """The fraction of elements equal to the reference."""
        return self.equal / self.elements if self.elements else 1.0

    @property
    def ok(self) -> bool:
        """Within the documented int8 verdict."""
        return self.exact >= INT8_EXACT and self.max_steps <= INT8_STEPS


def compare_steps(
    got: dict[str, np.ndarray], ref: dict[str, np.ndarray], scales: Mapping[str, float]
) -> list[StepComparison]:
    """One StepComparison per reference output, `scales` its quantization step."""
    result = []
    for name, expected in ref.items():
        expected = np.asarray(expected, dtype=np.float64)
        actual = got.get(name)
        scale = float(scales[name])
        if actual is None or np.shape(actual) != expected.shape:
            result.append(StepComparison(name, 0, expected.size, math.inf, scale))
            continue
        steps = np.rint(np.abs(np.asarray(actual, np.float64) - expected) / scale)
        worst = float(steps.max(initial=0.0)) if np.all(np.isfinite(steps)) else math.inf
        result.append(StepComparison(name, int(np.sum(steps == 0)), expected.size, worst, scale))
    return result


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


CALIBRATION_SAMPLES = 8  # random inputs `quantize` calibrates with


def quantize(model: onnx.ModelProto, seed: int = 0, qoperator: bool = False) -> onnx.ModelProto:
    """The model quantized by onnxruntime's `quantize_static` (docs/precision.md, int8): after
    its `quant_pre_process` (which folds BatchNormalization and affine Mul/Add into convs), int8
    activations and per-channel int8 weights, calibrated on CALIBRATION_SAMPLES inputs of
    `random_inputs` (seeds `seed`, `seed` + 1, ...); QDQ form, or QOperator with `qoperator`.
    A model below opset 13 (per-axis DequantizeLinear's) is converted to 13 (IR 7) first, and
    a Sum of two inputs becomes the Add it is (the quantizer knows Add, not Sum: it would leave
    a Sum's result in float). The caller's model is not changed."""
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in model.graph.input
        if v.name not in {i.name for i in model.graph.initializer}
    }
    feeds = iter([random_inputs(shapes, seed + i, model) for i in range(CALIBRATION_SAMPLES)])

    class _Reader(CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(feeds, None)

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    model = onnx.version_converter.convert_version(model, 13) if opset < 13 else _copy(model)
    model.ir_version = max(model.ir_version, 7 if opset < 13 else 4)
    # NOTE: initializers listed as graph inputs too (before IR 4) are not constants to
    # onnxruntime's optimizer, which then folds no BatchNormalization: drop those inputs
    for node in model.graph.node:
        if node.op_type == "Sum" and len(node.input) == 2:
            node.op_type = "Add"
    inits = {i.name for i in model.graph.initializer}
    kept = [v for v in model.graph.input if v.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    with tempfile.TemporaryDirectory() as tmp:
        pre, out = Path(tmp) / "pre.onnx", Path(tmp) / "q.onnx"
        quant_pre_process(model, str(pre))
        fmt = QuantFormat.QOperator if qoperator else QuantFormat.QDQ
        quantize_static(str(pre), str(out), _Reader(), quant_format=fmt, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
        return onnx.load(str(out))


PERTURBATIONS = 8  # onnxruntime runs on rounding-perturbed inputs, when a comparison fails
SPREAD_MARGIN = 2.0  # how many times the reference's own spread a difference may reach


def reference_spread(
    model: onnx.ModelProto,
    inputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Per output, how far onnxruntime's own result moves, element by element, when every
    float input element moves by one rounding step of its type and every float32 or float16
    value a node computes by up to one (random signs, PERTURBATIONS draws): the result's
    sensitivity to rounding, which no compiler can be asked to beat.

    NOTE: the nodes' values are perturbed too because another correct evaluation order rounds
    them differently: inputs alone miss it where equal values cancel (a LayerNormalization of
    near-equal values: only its input's own rounding noise is normalized)."""
    rng = np.random.default_rng(seed)
    spread = {name: np.zeros(np.shape(v)) for name, v in reference.items()}
    apart, weights = external_weights(model)
    _round_node_values(apart, seed)
    session, values = _weights_apart_session(apart, weights)
    for _ in range(PERTURBATIONS):
        moved = {}
        for name, x in inputs.items():
            x = np.asarray(x)
            if np.issubdtype(x.dtype, np.floating):
                toward = np.where(rng.random(x.shape) < 0.5, -np.inf, np.inf).astype(x.dtype)
                x = np.nextafter(x, toward)
            moved[name] = x
        for name, value in _session_outputs(session, moved).items():
            change = np.abs(np.asarray(value, np.float64) - np.asarray(reference[name], np.float64))
            spread[name] = np.maximum(spread[name], np.nan_to_num(change, nan=np.inf))
    del session, values  # NOTE: the session uses the arrays: they outlive it
    return spread


_ROUNDED: dict[int, type[np.floating]] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
}


def _round_node_values(model: onnx.ModelProto, seed: int) -> None:
    """Multiply each float32 or float16 value a top-level node computes by a random factor
    within one machine epsilon of 1 (onnxruntime's RandomUniformLike, seeded; each run of a
    session draws anew), in place: the value moves by up to one rounding step."""
    graph = model.graph
    typed = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in (*typed.value_info, *typed.output)}  # fmt: skip
    taken = {v for node in graph.node for v in (*node.input, *node.output)}
    taken |= {v.name for v in (*graph.input, *graph.output, *graph.initializer)}

    def fresh(name: str) -> str:
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    nodes = list(graph.node)
    del graph.node[:]
    for node in nodes:
        rounding = []
        for i, out in enumerate(node.output):
            dtype = _ROUNDED.get(types.get(out, 0))
            if not out or dtype is None:
                continue
            exact, factor = fresh(f"{out}.exact"), fresh(f"{out}.rounding")
            node.output[i] = exact
            eps = float(np.finfo(dtype).eps)
            rounding += [
                onnx.helper.make_node("RandomUniformLike", [exact], [factor], low=1.0 - eps,
                                      high=1.0 + eps, seed=float(seed * 7919 + len(taken))),
                onnx.helper.make_node("Mul", [exact, factor], [out]),
            ]  # fmt: skip
        graph.node.extend([node, *rounding])  # NOTE: appends copies: `node` is edited first


def ill_conditioned(c: Comparison, spread: np.ndarray) -> bool:
    """The reference itself moves by more than the tolerance under rounding-level input
    changes (e.g. a saturated softmax, a sum of cancelling terms)."""
    return float(np.max(spread, initial=0.0)) > c.rtol * c.max_ref + ATOL


def within_spread(
    c: Comparison, actual: np.ndarray | None, expected: np.ndarray, spread: np.ndarray
) -> bool:
    """Every element of `actual` is within the tolerance plus SPREAD_MARGIN times the
    reference's own spread at that element: the difference is what rounding explains.

    NOTE: elementwise, so an error where the reference is stable is still a mismatch.
    """
    if actual is None or np.shape(actual) != np.shape(expected):
        return False
    diff = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    allowed = c.rtol * c.max_ref + ATOL + SPREAD_MARGIN * spread
    return bool(np.all(np.isfinite(diff)) and np.all(diff <= allowed))
