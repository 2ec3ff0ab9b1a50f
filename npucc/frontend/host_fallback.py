"""Host fallback (`--fallback host`): a node npucc cannot lower becomes a `host` layer.

The layer holds the original ONNX node as canonical JSON (`host_spec`): its op type, domain,
the domain's opset version and the model's default opset, its attributes typed as ONNX
types them, its input list (absent optional inputs "") and the ONNX element type of each
operand; constant inputs stay graph constants (the lowering puts them in the image). The
lowering makes every operand a DDR tensor and codegen writes one `host` record, which the
interpreter runs with onnxruntime (docs/command-stream.md, "Host segments").
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from npucc.errors import NpuccError
from npucc.ir.dtypes import IR_INTS
from npucc.ir.graph import Graph, Layer
from npucc.ir.graph_schema import HOST_OP

FALLBACKS = ("error", "host")  # --fallback: refuse the model, or run the node on the host
HOST_TYPES = ("f32", *IR_INTS)  # operand types a host segment reads and writes (held as f32)


def typed_attrs(attrs: dict[str, Any]) -> dict[str, list[Any]]:
    """The import's attribute values (npucc.frontend.onnx_import) as {name: [ONNX type, value]}.

    An empty list is dropped: its type cannot be told, and every ONNX default for one is
    "absent" (as fold-constants does).
    """
    typed: dict[str, list[Any]] = {}
    for name, value in sorted(attrs.items()):
        many = isinstance(value, tuple)
        items = value if many else (value,)
        if not items:
            continue
        kinds = {_kind(v, name) for v in items}
        if kinds == {"INT", "FLOAT"}:  # a float list whose values print as integers
            kinds = {"FLOAT"}
        if len(kinds) != 1:
            raise NpuccError(f"attribute '{name}' mixes value types")
        kind = kinds.pop()
        data = [_encode(v, kind) for v in items]
        typed[name] = [f"{kind}S", data] if many else [kind, data[0]]
    return typed


def _kind(value: Any, name: str) -> str:
    if isinstance(value, bool | np.bool_ | int | np.integer):
        return "INT"
    if isinstance(value, float | np.floating):
        return "FLOAT"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, np.ndarray):
        return "TENSOR"
    raise NpuccError(f"attribute '{name}' of type {type(value).__name__} cannot go to the host")


def _encode(value: Any, kind: str) -> Any:
    if kind == "TENSOR":
        return base64.b64encode(numpy_helper.from_array(value).SerializeToString()).decode()
    if kind == "INT":
        return int(value)
    if kind == "FLOAT":
        return float(value)
    return value


def make_attributes(typed: dict[str, list[Any]]) -> list[onnx.AttributeProto]:
    """ONNX attributes back from `typed_attrs`' form (the interpreter builds its node so)."""
    protos = []
    for name, (kind, value) in typed.items():
        if kind in ("TENSOR", "TENSORS"):
            values = [onnx.TensorProto.FromString(base64.b64decode(v)) for v in
                      (value if kind == "TENSORS" else [value])]  # fmt: skip
            value = values if kind == "TENSORS" else values[0]
        attr_type = onnx.AttributeProto.AttributeType.Value(kind)
        protos.append(onnx.helper.make_attribute(name, value, attr_type=attr_type))
    return protos


def host_spec(
    g: Graph, layer_name: str, op: str, domain: str, version: int, attrs: dict[str, Any],
    inputs: list[str], outputs: list[str],
) -> str:  # fmt: skip
    """The canonical JSON of a host node (see the module doc); NpuccError naming the node if an
    operand's type cannot go to the host."""
    where = f"host segment '{layer_name}' ({op})"
    types = []
    for t in (*(t for t in inputs if t), *outputs):
        dtype = g.tensors[t].dtype
        if dtype not in HOST_TYPES:
            raise NpuccError(f"{where}: tensor '{t}' is {dtype}; the host takes f32 and integers")
        types.append(dtype)
    present = sum(1 for t in inputs if t)
    try:
        typed = typed_attrs(attrs)
    except NpuccError as exc:
        raise NpuccError(f"{where}: {exc}") from None
    spec = {
        "op": op,
        "domain": domain,
        "version": version,
        "opset": g.opset,
        "attrs": typed,
        "inputs": [
            f"in{sum(1 for x in inputs[:i] if x)}" if t else "" for i, t in enumerate(inputs)
        ],  # fmt: skip
        "in_types": types[:present],
        "out_types": types[present:],
    }
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def host_layer(
    g: Graph, name: str, op: str, domain: str, version: int, attrs: dict[str, Any],
    inputs: list[str], outputs: list[str],
) -> Layer:  # fmt: skip
    """A `host` layer running ONNX node `op` (of `domain` at `version`) on the host."""
    spec = host_spec(g, name, op, domain, version, attrs, inputs, outputs)
    return Layer(name, HOST_OP, [t for t in inputs if t], list(outputs), {"host": spec}, (name,))


def host_of(g: Graph, layer: Layer) -> Layer:
    """The host layer replacing a not-legalised ai.onnx layer (`onnx.<Op>`) of `g`."""
    op = layer.op.split(".", 1)[1]
    return host_layer(g, layer.name, op, "", g.opset, layer.attrs, layer.inputs, layer.outputs)


def describe(layer: Layer) -> str:
    """`Op` or `domain.Op` of a host layer, for messages and listings."""
    spec = json.loads(layer.attrs["host"])
    return f"{spec['domain']}.{spec['op']}" if spec["domain"] else spec["op"]
