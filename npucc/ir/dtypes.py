"""Element types at the host boundary: the model types npucc holds as float32 in DDR.

The graph IR, the tiled IR and the command stream spell a graph input or output of one of these
types by its key here (`int64[2,8]`); the tensor is float32 in DDR (4 bytes an element) and the
host (interpreter, CLI, Python API) converts it on load and read. Integers and booleans are
exact in float32 while |value| <= 2**24: an input beyond that is refused, and an output that is
not such an integer within its type's range is an error, never a wrong number.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import ml_dtypes
import numpy as np

from npucc.errors import NpuccError

EXACT_INT = 1 << 24  # float32 holds every integer of magnitude up to 2**24
# storage type -> the largest magnitude up to which it holds every integer (fp16: 2**11)
EXACT_INTS = {"f32": EXACT_INT, "f16": 1 << 11}
INDEX_DTYPE = "i64"  # raw int64 index inputs (8 bytes an element), read only by `gather`
INDEX_BYTES = 8
# float types converted at the boundary (float16 and bfloat16 exactly; a double rounds)
HOST_FLOATS: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f64": np.dtype(np.float64),
}
# integer and boolean types held as float32 values (booleans as 1.0/0.0)
HOST_INTS: dict[str, np.dtype] = {
    name: np.dtype(name) for name in ("int64", "int32", "int16", "int8", "uint16", "uint8", "bool")
}
HOST_DTYPES = {**HOST_FLOATS, **HOST_INTS}
_FLOAT_NAMES = {"f32": "float32", "f16": "float16"}
# graph IR dtype of an integer or boolean tensor -> its host type
IR_INTS = {"i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "u16": "uint16",
           "u8": "uint8", "bool": "bool"}  # fmt: skip


def int_range(host: str, storage: str = "f32") -> tuple[int, int]:
    """The values a HOST_INTS type holds exactly as `storage` values: its range within
    +-2**24 (float32) or +-2**11 (float16)."""
    if host == "bool":
        return 0, 1
    info, exact = np.iinfo(HOST_INTS[host]), EXACT_INTS[storage]
    return max(int(info.min), -exact), min(int(info.max), exact)


def _first(bad: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), bad.shape))


def quantize_host(value: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """ONNX QuantizeLinear to int8 as onnxruntime computes it: x / scale in float32, rounded
    half to even, plus the zero point, saturated to [-128, 127] (a NaN gives -128)."""
    with np.errstate(all="ignore"):
        q = np.rint(value.astype(np.float32) / np.float32(scale)).astype(np.float64) + zero_point
    return np.clip(np.nan_to_num(q, nan=-128.0), -128, 127).astype(np.int8)


def dequantize_host(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """ONNX DequantizeLinear of int8 values: (q - zero point) * scale, one float32 rounding."""
    return (q.astype(np.int32) - zero_point).astype(np.float32) * np.float32(scale)


def host_dtype(dtype: str) -> np.dtype:
    """The numpy type a user gives (and gets) for a stream input or output of `dtype`."""
    if dtype == INDEX_DTYPE:
        return np.dtype(np.int64)
    return HOST_DTYPES.get(dtype, np.dtype(np.float32))


def to_device(name: str, value: np.ndarray, dtype: str, storage: str = "f32") -> np.ndarray:
    """The float32 values of input `name` of host type `dtype`; NpuccError if not exact (as
    `storage` values)."""
    label = f"input {json.dumps(name)}"
    want = HOST_DTYPES[dtype]
    if dtype in HOST_FLOATS and value.dtype != want:
        raise NpuccError(f"{label} has dtype {value.dtype}, expected {want}")
    if dtype in HOST_INTS:
        if value.dtype.kind not in "biu":
            raise NpuccError(f"{label} has dtype {value.dtype}, expected {dtype}")
        lo, hi = int_range(dtype, storage)
        bad = (value < lo) | (value > hi)
        if bad.any():
            at = _first(bad)
            raise NpuccError(
                f"{label}: value {value[at]} at {at} is not an exact {dtype} for npucc "
                f"(integers are held as {_FLOAT_NAMES[storage]}: [{lo}, {hi}])"
            )
    return value.astype(np.float32)


def to_host(name: str, data: np.ndarray, dtype: str, storage: str = "f32") -> np.ndarray:
    """Output `name`'s float32 `data` as host type `dtype` (a copy); NpuccError when an
    integer output holds a value that is not an integer of its type (an integer overflow) or
    beyond the integers `storage` holds exactly."""
    if dtype in HOST_INTS:
        lo, hi = int_range(dtype, storage)
        with np.errstate(invalid="ignore"):
            bad = ~((data >= lo) & (data <= hi) & (data == np.trunc(data)))
        if bad.any():
            at = _first(bad)
            raise NpuccError(
                f"output {json.dumps(name)}: value {data[at]} at {at} is not an exact {dtype} "
                f"(integer overflow: npucc computes integers as {_FLOAT_NAMES[storage]}, exact "
                f"within [{lo}, {hi}])"
            )
    return data.astype(HOST_DTYPES.get(dtype, np.dtype(np.float32)))


# IR element type -> the numpy type of constant data (and of host values)
NUMPY_DTYPES: dict[str, type[np.generic]] = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "i64": np.int64,
    "i32": np.int32,
    "i16": np.int16,
    "i8": np.int8,
    "u16": np.uint16,
    "u8": np.uint8,
    "bool": np.bool_,
}
_DTYPE_NAMES = {np.dtype(v).name: k for k, v in NUMPY_DTYPES.items()}


class ZeroData(np.ndarray):
    """Zero-filled, read-only stand-in for constant data parsed from text; keeps its digest."""

    digest: str


def dtype_name(dtype: Any) -> str:
    """Short IR name of a numpy dtype (f32, i64, ...); NpuccError for other types."""
    name = _DTYPE_NAMES.get(np.dtype(dtype).name)
    if name is None:
        raise NpuccError(f"unsupported element type {np.dtype(dtype).name}")
    return name


def data_digest(data: np.ndarray) -> str:
    """sha256 of a constant's bytes (C order), or the digest a parsed constant remembers."""
    digest = getattr(data, "digest", None)
    if digest is not None:
        return digest
    return hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()


def zero_data(dtype: str, shape: tuple[int, ...], digest: str) -> ZeroData:
    """Read-only zeros of `dtype` and `shape` standing in for constant data with `digest`."""
    data = np.zeros(shape, NUMPY_DTYPES[dtype]).view(ZeroData)
    data.digest = digest
    data.setflags(write=False)
    return data
