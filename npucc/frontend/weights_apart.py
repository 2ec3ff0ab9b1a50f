"""A model's big initializers held apart while it is checked and shape-inferred.

The ONNX checker and shape inference serialize the whole model and parse it again (in C++,
then back into Python): for VGG-19's 548 MB of weights that held four copies at once. They
need a weight's type and shape, not its values, so they run on a copy in which each big
initializer is a graph input of its type instead; the values stay in the source model's own
messages (no copy), and the result keeps a placeholder (name, type, dims, no data) in each
one's place, so the initializers keep their order. A model read from a file with its weights in
an external data file (`npucc check` writes it so) holds them mapped from that file instead
(`mapped_weight`), as does one whose weights lie in the model file itself (`load_embedded`: the
rest of the file parsed without them): not in memory until codegen copies them into the image.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx.external_data_helper import ExternalDataInfo

from npucc.frontend.embedded import RawData, WireError, without_raw_data
from npucc.ir.mapped import map_array

# elements from which an initializer is held apart: shapes, pads, indices and the other values
# shape inference reads are far smaller
BIG = 4096
# element types whose external data numpy maps as it lies (raw little-endian values)
_MAPPED_TYPES = frozenset({
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
    onnx.TensorProto.UINT16, onnx.TensorProto.INT32, onnx.TensorProto.UINT32,
    onnx.TensorProto.INT64, onnx.TensorProto.UINT64,
})  # fmt: skip

# a held-apart initializer: the source's own message, or its values mapped from a file
Weights = Mapping[str, onnx.TensorProto | np.ndarray]


def _mappable(tensor: onnx.TensorProto) -> np.dtype | None:
    """The little-endian element type of a big initializer whose bytes numpy maps as they lie,
    or None where it is smaller than BIG elements or of another type."""
    return _storage(tensor.data_type, tuple(tensor.dims))


def _storage(data_type: int, dims: tuple[int, ...]) -> np.dtype | None:
    """`_mappable` of an initializer of this element type and these dims."""
    if data_type not in _MAPPED_TYPES or math.prod(dims) < BIG:
        return None
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).newbyteorder("<")


def mapped_weight(tensor: onnx.TensorProto, root: Path) -> np.ndarray | None:
    """A big initializer's external data (its location checked to lie inside `root`) mapped
    read-only from its file (npucc.ir.mapped), or None where it is not of a type numpy maps,
    smaller than BIG elements, or not exactly its bytes (then it is loaded, as ONNX does)."""
    shape, dtype = tuple(tensor.dims), _mappable(tensor)
    if dtype is None:
        return None
    info = ExternalDataInfo(tensor)
    offset, nbytes = info.offset or 0, math.prod(shape) * dtype.itemsize
    if info.length is not None and info.length != nbytes:
        return None
    path = root / info.location
    if info.length is None and path.stat().st_size - offset != nbytes:
        return None
    return map_array(str(path), offset, dtype, shape)


def _embedded_type(place: RawData) -> np.dtype | None:
    """`_mappable` of an initializer in a model file whose raw data there is exactly its
    values, else None."""
    dtype = _storage(place.data_type, place.dims)
    if place.raw is None or dtype is None or place.raw[1] != math.prod(place.dims) * dtype.itemsize:
        return None
    return dtype


def load_embedded(path: Path) -> tuple[onnx.ModelProto, dict[str, np.ndarray]] | None:
    """The model file `path` parsed without the raw data of its big initializers, and those
    by name, each mapped read-only from the file (npucc.frontend.embedded); None where the file
    does not read as a model here (parse it whole).

    NOTE: the file is neither read nor parsed whole (Keras ResNet-50: 0.12 CPU s and two
    copies of its 98 MiB saved). One mapping each (freed with its array: a weight a transform
    copies does not stay resident), so one file descriptor each: where the process has none
    left, the rest are read into their messages, as parsing gives them.
    """
    with open(path, "rb") as f:
        try:
            data, places = without_raw_data(f, lambda place: _embedded_type(place) is not None)
        except WireError:
            return None
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:  # protobuf's DecodeError and friends: parsed whole, it is reported
            return None
        inits = model.graph.initializer
        read = [(i.name, tuple(i.dims), i.data_type) for i in inits]
        if read != [(place.name, place.dims, place.data_type) for place in places]:
            return None  # NOTE: the walk read names, dims or types unlike protobuf: parse whole
        arrays, descriptors = {}, True
        for init, place in zip(inits, places, strict=True):
            dtype = _embedded_type(place)
            if dtype is None:
                continue
            assert place.raw is not None  # NOTE: `_embedded_type` says so
            offset, nbytes = place.raw
            array = None
            if descriptors:
                try:
                    array = map_array(str(path), offset, dtype, place.dims)
                except OSError:  # no file descriptor (or mapping) left
                    descriptors = False
            if array is None:
                f.seek(offset)
                init.raw_data = f.read(nbytes)
            else:
                arrays[init.name] = array
    return model, arrays


def split_weights(
    model: onnx.ModelProto, mapped: Mapping[str, np.ndarray] | None = None
) -> tuple[onnx.ModelProto, dict[str, onnx.TensorProto | np.ndarray]]:
    """A copy of `model` whose big initializers are graph inputs of their type and shape, and
    those initializers by name (`model`'s own messages, or their `mapped` values)."""
    mapped = mapped or {}
    held = [i for i in model.graph.initializer if i.name in mapped or _big(i)]
    weights = {i.name: mapped.get(i.name, i) for i in held}
    skeleton = _without_initializers(model)
    skeleton.graph.initializer.extend(i for i in model.graph.initializer if i.name not in weights)
    inputs = {v.name for v in model.graph.input}
    skeleton.graph.input.extend(
        onnx.helper.make_tensor_value_info(i.name, i.data_type, tuple(i.dims))
        for i in held
        if i.name not in inputs
    )
    return skeleton, weights


def external_weights(
    model: onnx.ModelProto,
) -> tuple[onnx.ModelProto, dict[str, onnx.TensorProto]]:
    """A copy of `model` whose big initializers refer to external data named after themselves
    (for onnxruntime's in-memory external initializers), and those initializers by name."""
    weights = big_initializers(model)
    copy = _without_initializers(model)
    for init in model.graph.initializer:
        if init.name in weights:
            ref = copy.graph.initializer.add(name=init.name, dims=init.dims)
            ref.data_type = init.data_type
            ref.data_location = onnx.TensorProto.EXTERNAL
            ref.external_data.add(key="location", value=init.name)
        else:
            copy.graph.initializer.append(init)
    return copy, weights


def big_initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """The initializers of `model` held apart (at least BIG elements, data in the model)."""
    return {i.name: i for i in model.graph.initializer if _big(i)}


def _big(init: onnx.TensorProto) -> bool:
    """At least BIG elements, its data in the model."""
    return math.prod(init.dims) >= BIG and init.data_location != onnx.TensorProto.EXTERNAL


def _without_initializers(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` without its graph's initializers."""
    copy = onnx.ModelProto()
    for fd, value in model.ListFields():
        if fd.name != "graph":
            _copy_field(copy, fd, value)
    for fd, value in model.graph.ListFields():
        if fd.name != "initializer":
            _copy_field(copy.graph, fd, value)
    return copy


def _copy_field(dst: Any, fd: Any, value: Any) -> None:
    """Copy one set field `fd` (a protobuf FieldDescriptor) of a message into `dst`."""
    if fd.is_repeated:
        getattr(dst, fd.name).extend(value)
    elif fd.message_type is not None:
        getattr(dst, fd.name).CopyFrom(value)
    else:
        setattr(dst, fd.name, value)


def restore_places(
    model: onnx.ModelProto, source: onnx.ModelProto, weights: Weights, inputs: int
) -> onnx.ModelProto:
    """`model` (made from `split_weights(source)`) with its first `inputs` graph inputs and
    its initializers in `source`'s order, a placeholder in place of each held-apart one."""
    del model.graph.input[inputs:]
    own = {i.name: i for i in model.graph.initializer}
    ordered = []
    for init in source.graph.initializer:
        copy = onnx.TensorProto()
        if init.name in weights:
            copy.name, copy.data_type = init.name, init.data_type
            copy.dims.extend(init.dims)
        else:
            copy.CopyFrom(own.pop(init.name))
        ordered.append(copy)
    for init in own.values():  # any the loading added come after the source's
        copy = onnx.TensorProto()
        copy.CopyFrom(init)
        ordered.append(copy)
    del model.graph.initializer[:]
    model.graph.initializer.extend(ordered)
    return model


def with_weights(model: onnx.ModelProto, weights: Weights) -> onnx.ModelProto:
    """`model` with the values of its held-apart initializers copied into their placeholders."""
    if weights:
        for init in model.graph.initializer:
            value = weights.get(init.name)
            if isinstance(value, np.ndarray):  # mapped: as ONNX loads external data
                init.raw_data = value.tobytes()
                init.data_location = onnx.TensorProto.DEFAULT
            elif value is not None:
                init.CopyFrom(value)
    return model
