"""TiledProgram: the tiled IR of a whole model (one TileGraph per core plus DDR tensors)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from npucc.errors import NpuccError
from npucc.ir.dtypes import HOST_DTYPES, INDEX_BYTES, INDEX_DTYPE
from npucc.ir.onchip import OnChip
from npucc.ir.tiled import TileGraph
from npucc.ir.tiled_text import tiled_to_text
from npucc.target import Target


@dataclass(slots=True)
class DdrTensor:
    """A region of DDR: a constant in the image, a model input, or program scratch (or a tensor
    kept on chip: role onchip, in the NOC address space)."""

    key: str  # unique key (the graph tensor name it was created for)
    role: str  # const | input | temp | onchip
    shape: tuple[int, ...]  # logical shape (f32 elements)
    data: np.ndarray | None = None  # contents of a const
    dtype: str = "f32"  # the target dtype; i64 (an input of indices) or a HOST_DTYPES input
    quant: tuple[float, int] | None = None  # an int8 input's host quantization (scale, zp)

    @property
    def elems(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    def nbytes(self, elem_bytes: int) -> int:
        """Bytes the tensor occupies (`elem_bytes`: the target dtype's)."""
        return self.elems * (INDEX_BYTES if self.dtype == INDEX_DTYPE else elem_bytes)

    def stream_dtype(self, target: Target) -> str:
        """The type its stream `tensor` line declares: an input's model type (the host converts
        it to the storage type on load), else the target's storage type."""
        return self.dtype if self.role == "input" else target.dtype


@dataclass(slots=True)
class Core:
    """One core of the mesh and its DAG."""

    row: int  # mesh row
    col: int  # mesh column
    graph: TileGraph  # the core's tiled IR


@dataclass(slots=True)
class IoBinding:
    """A model input or output and the DDR tensor holding it."""

    kind: str  # input | output
    name: str  # the model's tensor name
    key: str  # DdrTensor key
    shape: tuple[int, ...]  # shape the model declares
    dtype: str = "f32"  # the model's element type: f32, i64 (inputs) or HOST_DTYPES
    quant: tuple[float, int] | None = None  # int8 program: the host's (scale, zp) conversion


@dataclass(frozen=True, slots=True)
class LayerWork:
    """A graph layer the tiled nodes name by index (`TileNode.layer`), and the least work it
    asks of any program: the roofline's and the per-layer table's inputs."""

    name: str  # the graph layer's name
    op: str  # its canonical op
    macs: int = 0  # multiply-accumulates the layer's math needs (depthwise: no zero blocks)
    vector: int = 0  # elements the vector unit must process at least
    weights: int = 0  # elements of the constants it is the first layer to read
    # the ONNX nodes it computes (`Layer.src`), for the debug map: provenance, not in the text
    # form and not compared (a layer read back from text equals the one printed)
    sources: tuple[str, ...] = field(default=(), compare=False)


class TiledProgram:
    """DDR tensors, I/O bindings and per-core DAGs of a lowered model.

    NOTE: `tensors` keeps creation order, which fixes the DDR layout byte for byte.
    """

    __slots__ = (
        "name", "target", "tensors", "aliases", "slices", "io", "cores", "cross_edges", "onchip",
        "layers",
    )  # fmt: skip

    def __init__(self, name: str, target: Target) -> None:
        self.name = name  # model graph name
        self.target = target
        self.tensors: dict[str, DdrTensor] = {}
        self.aliases: dict[str, str] = {}  # view tensor name -> key of the tensor it views
        # NOTE: lowering only (DdrRefs carry key and offset; not in the text form): a sub-batch
        # slice's name -> (key of the tensor it is part of, element offset in it)
        self.slices: dict[str, tuple[str, int]] = {}
        self.io: list[IoBinding] = []
        self.cores: list[Core] = []
        # (src core, src node, dst core, dst node): orders nodes of different cores
        self.cross_edges: list[tuple[int, int, int, int]] = []
        self.onchip: dict[str, OnChip] = {}  # key of a tensor kept on chip -> its homes
        self.layers: list[LayerWork] = []  # graph layers in order (TileNode.layer indexes them)

    def add_tensor(
        self,
        key: str,
        role: str,
        shape: tuple[int, ...],
        data: np.ndarray | None = None,
        dtype: str = "f32",
        quant: tuple[float, int] | None = None,
    ) -> DdrTensor:
        """Create a DDR tensor (a const needs `data` of that shape; only inputs may be i64 or
        HOST_DTYPES)."""
        if key in self.tensors or key in self.aliases:
            raise ValueError(f"duplicate DDR tensor {key!r}")
        if dtype not in ("f32", INDEX_DTYPE, *HOST_DTYPES) or (dtype != "f32" and role != "input"):
            raise NpuccError(f"tensor '{key}': unsupported {role} element type {dtype}")
        nbytes = math.prod(shape) * (
            INDEX_BYTES if dtype == INDEX_DTYPE else self.target.elem_bytes
        )
        if nbytes > self.target.memory.DDR:
            raise NpuccError(
                f"tensor '{key}' needs {nbytes} bytes, more than DDR's "
                f"{self.target.memory.DDR} bytes"
            )
        if data is not None:
            data = np.ascontiguousarray(data, dtype=np.float32).reshape(shape)
        tensor = DdrTensor(key, role, tuple(shape), data, dtype, quant)
        self.tensors[key] = tensor
        return tensor

    def add_alias(self, name: str, of: str) -> None:
        """Make tensor `name` a view of the DDR tensor holding `of` (reshape, identity)."""
        self.aliases[name] = self.key(of)

    def add_slice(self, name: str, of: str, offset: int) -> None:
        """Make tensor `name` the part of the DDR tensor holding `of` from element `offset`."""
        self.slices[name] = (self.key(of), self.offset(of) + offset)

    def key(self, name: str) -> str:
        """The DDR tensor key that holds graph tensor `name`."""
        part = self.slices.get(name)
        return self.aliases.get(name, name) if part is None else part[0]

    def offset(self, name: str) -> int:
        """The element offset of graph tensor `name` in its DDR tensor (a slice's; else 0)."""
        part = self.slices.get(name)
        return 0 if part is None else part[1]

    def tensor(self, name: str) -> DdrTensor:
        """The DDR tensor holding graph tensor `name`."""
        return self.tensors[self.key(name)]

    def to_text(self) -> str:
        """The tiled text form (see npucc.ir.tiled_text); it parses back."""
        return tiled_to_text(self)

    def verify(self) -> None:
        """Check that every core's DAG is acyclic and every buffer is allocated and freed once."""
        for core in self.cores:
            g = core.graph
            if len(g.alloc_of) != len(g.buffers) or len(g.free_of) != len(g.buffers):
                raise ValueError(f"core {core.row},{core.col}: a buffer lacks its ALLOC or FREE")
            for src, outs in enumerate(g.succs):  # g.edges(), a source's least target first
                if outs and min(outs) <= src:
                    dst = next(d for d in outs if d <= src)
                    raise ValueError(f"core {core.row},{core.col}: edge {src}->{dst} goes back")
            layers = {node.layer for node in g.nodes}
            if layers and not -1 <= min(layers) <= max(layers) < len(self.layers):
                raise ValueError(f"core {core.row},{core.col}: a node names an unknown layer")
