"""Load, validate and import an ONNX model into the graph IR (`onnx.<Op>` layers)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any, ClassVar

import numpy as np
import onnx
import onnx.inliner
from onnx import external_data_helper, numpy_helper

from npucc.errors import NpuccError
from npucc.frontend.graph_edit import (
    ORDER_KEEPING_VIEWS,
    foldable,
    infer_shapes,
    node_names,
    one_line,
    unsupported,
    value_type,
)
from npucc.frontend.host_fallback import host_layer
from npucc.frontend.legalize import LOWERED
from npucc.frontend.onnx_control import CONTROL_OPS, expand_control_flow, live_nodes, tensors_read
from npucc.frontend.onnx_order import topologically_sorted
from npucc.frontend.weights_apart import (
    Weights,
    load_embedded,
    mapped_weight,
    restore_places,
    split_weights,
    with_weights,
)
from npucc.ir.dtypes import dtype_name
from npucc.ir.graph import Graph, Layer, Tensor
from npucc.ir.graph_schema import ONNX_PREFIX
from npucc.passes import CompileContext, IRType, Pass

ModelSource = str | Path | bytes | onnx.ModelProto
InputShapes = Mapping[str, tuple[int, ...]]

# ops the pre-legalisation passes remove (fold-batchnorm, drop-identity) or import turns into data
_HANDLED = ("BatchNormalization", "Constant", "Dropout", "Identity")
# ops npucc runs (If, Loop, Scan: expanded on import); any other standard operator is compiled
# only when it folds to a constant
SUPPORTED_OPS = frozenset(LOWERED) | frozenset(_HANDLED) | frozenset(CONTROL_OPS)


def read_model(
    source: ModelSource, external_data: bool = True, copy: bool = True
) -> onnx.ModelProto:
    """The model at `source` (a copy of a ModelProto), its external data loaded if asked.

    `copy=False`: a ModelProto without external data is returned itself, not copied.
    """
    return _read_model(source, external_data, copy, mapped=False)[0]


def _read_model(
    source: ModelSource, external_data: bool, copy: bool, mapped: bool
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """`read_model`; with `mapped`, also the big initializers mapped from their files rather
    than loaded: from their external data files (`weights_apart.mapped_weight`; they stay
    external) or from the model file itself (`weights_apart.load_embedded`: a protobuf file's
    big raw data neither read nor parsed)."""
    if isinstance(source, onnx.ModelProto):
        if not copy and not (external_data and _external_tensors(source)):
            return source, {}
        model = onnx.ModelProto()
        model.CopyFrom(source)
        if external_data:
            _load_external_data(model, None)
        return model, {}
    where = "" if isinstance(source, bytes) else f" ({source!s})"
    embedded: dict[str, np.ndarray] = {}
    try:
        if isinstance(source, bytes):
            model = onnx.load_from_string(source)
        else:
            loaded = load_embedded(Path(source)) if mapped and _protobuf(source) else None
            if loaded is None:
                model = onnx.load(str(source), load_external_data=False)
            else:
                model, embedded = loaded
    except OSError as exc:
        raise NpuccError(f"cannot read model: {exc.strerror or one_line(exc)}{where}") from None
    except Exception as exc:  # protobuf DecodeError and friends
        raise NpuccError(
            f"cannot read model: not an ONNX model ({one_line(exc)}); expected an ONNX "
            f"protobuf file (.onnx){where}"
        ) from None
    if not model.graph.node and not model.graph.output:
        raise NpuccError(
            f"cannot read model: not an ONNX model (no graph); expected an ONNX "
            f"protobuf file (.onnx){where}"
        )
    if not external_data:
        return model, {}
    if isinstance(source, bytes):
        return model, _load_external_data(model, None)
    arrays = _load_external_data(model, Path(source).parent, mapped)
    arrays.update(embedded)  # NOTE: the weights stored in the file itself: mapped from it
    return model, arrays


def _protobuf(path: str | os.PathLike[str]) -> bool:
    """Whether onnx reads the file `path` as a binary protobuf (by its extension, as onnx.load
    does: the text formats' files are parsed by onnx)."""
    fmt = onnx.serialization.registry.get_format_from_file_extension(os.path.splitext(path)[1])
    return fmt in (None, "protobuf")


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in a graph: initializers, sparse parts, attributes, subgraphs."""
    yield from graph.initializer
    yield from _sparse_parts(graph.sparse_initializer)
    yield from _node_tensors(graph.node)


def _node_tensors(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in the attributes of `nodes`, subgraphs included."""
    for node in nodes:
        for attr in node.attribute:
            # an unset message field reads as an empty default: no external data, no nodes
            yield from (attr.t, *attr.tensors)
            yield from _sparse_parts((attr.sparse_tensor, *attr.sparse_tensors))
            for sub in (attr.g, *attr.graphs):
                yield from _graph_tensors(sub)


def _sparse_parts(sparse: Iterable[onnx.SparseTensorProto]) -> Iterator[onnx.TensorProto]:
    """The values and indices tensors of sparse tensors."""
    for s in sparse:
        yield from (s.values, s.indices)


def _external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every tensor of `model` whose data is external."""
    return [
        t
        for t in (
            *_graph_tensors(model.graph),
            *_node_tensors(n for f in model.functions for n in f.node),
        )
        if t.data_location == onnx.TensorProto.EXTERNAL
    ]


def _load_external_data(
    model: onnx.ModelProto, folder: Path | None, mapped: bool = False
) -> dict[str, np.ndarray]:
    """Load every tensor's external data; refuse a location outside the model's folder.

    `mapped`: the big initializers `mapped_weight` maps are not loaded but returned by name.
    """
    tensors = _external_tensors(model)
    if not tensors:
        return {}
    if folder is None:
        raise NpuccError(
            f"tensor '{tensors[0].name}' has external data, but the model was not read from a file"
        )
    root = folder.resolve()
    for t in tensors:
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        where = f"external data of tensor '{t.name}' at '{location}'"
        parts = PureWindowsPath(location)  # splits on both '/' and '\\'
        if not location or "\0" in location or parts.anchor or ".." in parts.parts:
            raise NpuccError(f"{where}: must be a relative path inside the model's folder ({root})")
        path = (root / location).resolve()
        if not path.is_relative_to(root):
            raise NpuccError(f"{where}: a symlink leads outside the model's folder ({root})")
        if not path.is_file():
            raise NpuccError(f"{where}: no such file in the model's folder ({root})")
    arrays: dict[str, np.ndarray] = {}
    # NOTE: the graph's own initializers come first in `tensors`
    own = sum(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer)
    try:
        for index, t in enumerate(tensors):
            array = mapped_weight(t, root) if mapped and index < own else None
            if array is None:
                external_data_helper.load_external_data_for_tensor(t, str(root))
            else:
                arrays[t.name] = array
    except Exception as exc:  # OSError, ValueError (offset/length beyond the file), ...
        raise NpuccError(f"cannot read external data: {one_line(exc)}") from None
    return arrays


def _suggest(name: str, dims: list[onnx.TensorShapeProto.Dimension]) -> str:
    shape = "x".join(str(d.dim_value) if d.HasField("dim_value") else "1" for d in dims)
    return f"pass --input-shape {name}={shape or '1'}"


# input types npucc holds as float32 (legalize-onnx lets only Cast read the float types but
# FLOAT; integers and booleans are exact while |value| <= 2**24, see npucc.ir.dtypes)
INPUT_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.DOUBLE, onnx.TensorProto.BOOL, onnx.TensorProto.INT64,
    onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
    onnx.TensorProto.UINT16, onnx.TensorProto.UINT8,
}  # fmt: skip


def view_sources(graph: onnx.GraphProto) -> dict[str, str]:
    """Each output of a chain of order-keeping views and the tensor the chain starts from."""
    views = {n.output[0]: n.input[0] for n in graph.node if n.op_type in ORDER_KEEPING_VIEWS}
    sources = {}
    for name in views:
        source = name
        while source in views:
            source = views[source]
        sources[name] = source
    return sources


def _fix_input_shapes(
    model: onnx.ModelProto, input_shapes: InputShapes, held: Weights | None = None
) -> None:
    """Fix the shapes of the graph inputs (not the initializers, nor those `held` apart)."""
    graph = model.graph
    inits = {i.name for i in graph.initializer} | set(held or ())
    inputs = [v for v in graph.input if v.name not in inits]
    known = [v.name for v in inputs]
    for name in input_shapes:
        if name not in known:
            raise NpuccError(f"input shape given for unknown input '{name}' (inputs: {known})")
    for v in inputs:
        if not v.type.HasField("tensor_type"):
            raise NpuccError(f"input '{v.name}' is not a tensor")
        tt = v.type.tensor_type
        if tt.elem_type not in INPUT_TYPES:
            elem = onnx.TensorProto.DataType.Name(tt.elem_type)
            raise NpuccError(
                f"input '{v.name}' has element type {elem}; npucc supports FLOAT (FLOAT16, "
                "BFLOAT16 and DOUBLE read by Cast), BOOL, INT64, INT32, INT16, INT8, UINT16 "
                "and UINT8"
            )
        dims = list(tt.shape.dim)
        if v.name in input_shapes:
            shape = tuple(int(d) for d in input_shapes[v.name])
            if tt.HasField("shape") and len(dims) != len(shape):
                raise NpuccError(
                    f"input '{v.name}' has rank {len(dims)} but the given shape has {len(shape)}"
                )
            for i, (d, n) in enumerate(zip(dims, shape, strict=False)):
                if n < 0 or (d.HasField("dim_value") and d.dim_value != n):
                    declared = "x".join(
                        str(e.dim_value) if e.HasField("dim_value") else (e.dim_param or "?")
                        for e in dims
                    )
                    fixed = f"is {d.dim_value}" if d.HasField("dim_value") else "must be >= 0"
                    raise NpuccError(
                        f"input '{v.name}' dimension {i} cannot be {n}: it {fixed} "
                        f"(the model declares {v.name}={declared})"
                    )
            tt.shape.Clear()
            for n in shape:
                tt.shape.dim.add().dim_value = n
            continue
        if not tt.HasField("shape"):
            raise NpuccError(f"input '{v.name}' has no shape; {_suggest(v.name, dims)}")
        for d in dims:  # a zero-size input is valid: fold-constants reads it as an empty constant
            if not d.HasField("dim_value") or d.dim_value < 0:
                raise NpuccError(
                    f"input '{v.name}' has symbolic dimension '{d.dim_param or '?'}'; "
                    f"{_suggest(v.name, dims)}"
                )


def load_model(
    path_or_model: ModelSource, input_shapes: InputShapes | None = None, fallback: str = "error"
) -> onnx.ModelProto:
    """Read, check and shape-infer a model; `input_shapes` fixes the inputs' symbolic dims.

    With `fallback` "host", operators npucc cannot run are left for `model_to_graph` to make
    host segments of.
    """
    return with_weights(*load_model_apart(path_or_model, input_shapes, fallback))


def load_model_apart(
    path_or_model: ModelSource,
    input_shapes: InputShapes | None = None,
    fallback: str = "error",
    mapped: bool = False,
) -> tuple[onnx.ModelProto, Weights]:
    """`load_model`, its big initializers held apart (npucc.frontend.weights_apart): the model
    with their placeholders, and them by name (the source's own messages; with `mapped`, those
    with external data numpy reads as it lies are arrays mapped from their files instead)."""
    source, arrays = _read_model(path_or_model, True, False, mapped)
    model, weights = split_weights(source, arrays)
    inputs = len(source.graph.input)
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    if fallback != "host":
        _check_ops(model)
    model = topologically_sorted(model)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # ValidationError or InferenceError
        raise NpuccError(f"invalid ONNX model: {one_line(exc)}") from None
    _fix_input_shapes(model, input_shapes or {}, weights)
    # declared intermediate and output shapes may name the dims just fixed: infer them afresh
    return restore_places(infer_shapes(model), source, weights, inputs), weights


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, list):
        return tuple(_plain(v) for v in value)
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, int | float | str):
        return value
    raise NpuccError(f"unsupported attribute value of type {type(value).__name__}")


def _constant(attrs: dict[str, Any], node: str) -> np.ndarray:
    for key, dtype in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise NpuccError(f"node '{node}' (Constant): unsupported value attribute {sorted(attrs)}")


def _refused(node: onnx.NodeProto) -> bool:
    """Whether npucc can neither run, fold nor expand `node` (another domain, an operator ONNX
    does not define)."""
    domain = node.domain or "ai.onnx"
    return domain != "ai.onnx" or (node.op_type not in SUPPORTED_OPS and not foldable(node.op_type))


def _check_ops(model: onnx.ModelProto) -> None:
    """Raise the unsupported-operator error for the first node `_refused` refuses."""
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    for name, node in zip(node_names(model.graph), model.graph.node, strict=True):
        if _refused(node):
            domain = node.domain or "ai.onnx"
            op = node.op_type if domain == "ai.onnx" else f"{domain}.{node.op_type}"
            raise unsupported(op, name, opsets.get(domain, 0))


def model_to_graph(
    model: onnx.ModelProto, fallback: str = "error", weights: Weights | None = None
) -> Graph:
    """Translate a checked, shape-inferred model into a Graph of `onnx.<Op>` layers.

    Shapes the ONNX inference left open (they depend on values only folding computes) hold -1.
    With `fallback` "host", a node `_refused` refuses becomes a host layer. `weights` are the
    initializers held apart (their placeholders' values).
    """
    graph = model.graph
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    g = Graph(graph.name or "main", opsets.get("ai.onnx", 0))
    if graph.sparse_initializer:
        raise NpuccError("sparse initializers are not supported")
    held = weights or {}
    for init in graph.initializer:
        value = held.get(init.name, init)
        data = value if isinstance(value, np.ndarray) else numpy_helper.to_array(value)
        try:
            g.add_tensor(Tensor(init.name, tuple(data.shape), dtype_name(data.dtype), data))
        except NpuccError as exc:
            raise NpuccError(f"initializer '{init.name}': {exc}") from None
    values = {v.name: v for v in (*graph.input, *graph.value_info, *graph.output)}
    for v in graph.input:
        if v.name not in g.tensors:
            g.add_tensor(Tensor(v.name, *value_type(v)))
            g.inputs.append(v.name)
    graph_outputs = {v.name for v in graph.output}
    live = live_nodes(graph.node, graph_outputs)
    read = graph_outputs.union(t for t in tensors_read(live) if t)
    if fallback != "host":
        _check_ops(model)
    for name, node in zip(node_names(graph), graph.node, strict=True):
        if not any(out in read for out in node.output):
            continue  # dead code: no live node and no graph output reads what it computes
        attrs = {a.name: _attr_value(a) for a in node.attribute}
        if node.op_type == "Constant":
            data = _constant(attrs, name)
            g.add_tensor(Tensor(node.output[0], tuple(data.shape), dtype_name(data.dtype), data))
            continue
        outputs = list(node.output)
        while outputs and outputs[-1] not in read:  # unused optional outputs (masks, indices)
            outputs.pop()
        # an absent optional output before a present one gets a name nothing reads
        outputs = [out or f"{name}.unused{i}" for i, out in enumerate(outputs)]
        for out in outputs:  # open dims are resolved by fold-constants
            shape, dtype = value_type(values.get(out))  # zero-size ones fold to constants
            g.add_tensor(Tensor(out, shape, dtype))
        if fallback == "host" and _refused(node):
            version = opsets.get(node.domain or "ai.onnx", 0)
            g.add_layer(host_layer(g, name, node.op_type, node.domain, version, attrs,
                                   list(node.input), outputs))  # fmt: skip
            continue
        g.add_layer(
            Layer(name, ONNX_PREFIX + node.op_type, list(node.input), outputs, attrs, (name,))
        )
    g.outputs = [v.name for v in graph.output]
    return g


@dataclass(frozen=True, slots=True)
class ImportOnnx(Pass):
    """Load a model (path, bytes or ModelProto) and import it as `onnx.<Op>` layers."""

    name: ClassVar[str] = "import-onnx"
    input_ir: ClassVar[IRType] = (str, os.PathLike, bytes, onnx.ModelProto)  # a ModelSource
    output_ir: ClassVar[IRType] = Graph
    input_shapes: InputShapes | None = None  # fixes the shapes of these model inputs
    fallback: str = "error"  # "host": refused nodes become host layers (host_fallback)

    def run(self, ir: ModelSource, ctx: CompileContext) -> Graph:
        """Load with `input_shapes`, expand control flow and translate to a Graph.

        NOTE: big weights in an external data file are mapped, not read (npucc.ir.mapped):
        they come into memory only when codegen copies them into the image (VGG-19: 548 MB
        not held from import to codegen).
        """
        model, weights = load_model_apart(ir, self.input_shapes, self.fallback, mapped=True)
        if any(n.op_type in CONTROL_OPS for n in model.graph.node):  # expanded on a whole model
            return model_to_graph(expand_control_flow(with_weights(model, weights)), self.fallback)
        return model_to_graph(model, self.fallback, weights)
