"""Differential checking against onnxruntime: seeded inputs and weights, error figures."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from npucc.frontend.onnx_import import view_sources
from npucc.ir.dtypes import HOST_INTS

# NOTE: the documented tolerance of `npucc check`: max |error| <= RTOL * max |reference| + ATOL.
RTOL = 1e-4
ATOL = 1e-6
VACUOUS_SCALE = 10  # a reference below VACUOUS_SCALE * ATOL makes a comparison that tests little


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
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _materialize_constant_of_shape(out)
    rng = np.random.default_rng(seed)
    role: dict[str, str] = {}
    for node in out.graph.node:
        if node.op_type == "BatchNormalization":
            for index, name in enumerate(node.input[1:5], start=1):
                role[name] = ("", "scale", "shift", "shift", "var")[index]
    for init in out.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT:
            continue
        shape = tuple(init.dims)
        kind = role.get(init.name, "weight")
        if kind == "scale":
            data = rng.uniform(0.2, 0.6, shape)
        elif kind == "var":
            data = rng.uniform(0.5, 1.5, shape)
        elif kind == "shift" or len(shape) <= 1:
            data = rng.normal(0.0, 0.1, shape)
        else:
            fan_in = max(1, math.prod(shape[1:]))
            data = rng.normal(0.0, math.sqrt(2.0 / fan_in), shape)
        init.CopyFrom(numpy_helper.from_array(data.astype(np.float32), init.name))
    return out


def _materialize_constant_of_shape(model: onnx.ModelProto) -> None:
    """Replace ConstantOfShape nodes fed by an initializer shape with the initializer they make."""
    inits = {i.name: i for i in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            value = np.zeros(1, np.float32)
            for attr in node.attribute:
                if attr.name == "value":
                    value = numpy_helper.to_array(attr.t)
            data = np.full(shape, value.reshape(-1)[0], dtype=value.dtype)
            model.graph.initializer.append(numpy_helper.from_array(data, node.output[0]))
            if model.ir_version < 4:  # initializers must also be graph inputs before IR 4
                elem = onnx.helper.np_dtype_to_tensor_dtype(data.dtype)
                info = onnx.helper.make_tensor_value_info(node.output[0], elem, shape)
                model.graph.input.append(info)
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)


def run_onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of the model under onnxruntime's CPU provider, by output name."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


@dataclass(slots=True)
class Comparison:
    """Error figures of one output."""

    name: str
    max_abs: float  # max |npucc - reference|
    max_ref: float  # max |reference|

    @property
    def rel(self) -> float:
        """max_abs relative to max |reference|."""
        return self.max_abs / self.max_ref if self.max_ref else self.max_abs

    @property
    def ok(self) -> bool:
        """Within the documented tolerance."""
        return self.max_abs <= RTOL * self.max_ref + ATOL

    @property
    def vacuous(self) -> bool:
        """The reference is so close to zero that the absolute tolerance lets almost anything
        pass (a zero-initialised head, activations that vanish through a deep network)."""
        return self.max_ref < VACUOUS_SCALE * ATOL


def compare(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> list[Comparison]:
    """One Comparison per reference output (a missing or misshapen output fails with inf)."""
    result = []
    for name, expected in ref.items():
        expected = np.asarray(expected, dtype=np.float64)
        actual = got.get(name)
        if actual is None or np.shape(actual) != expected.shape:
            result.append(Comparison(name, math.inf, float(np.max(np.abs(expected), initial=0))))
            continue
        diff = np.abs(np.asarray(actual, dtype=np.float64) - expected)
        max_abs = float(np.max(diff, initial=0.0)) if np.all(np.isfinite(diff)) else math.inf
        result.append(Comparison(name, max_abs, float(np.max(np.abs(expected), initial=0.0))))
    return result
