"""The shapes and window parameters of a conv2d layer (the cube's and the vector's lowering)."""

from __future__ import annotations

from dataclasses import dataclass

from npucc.backend.lower.context import LowerContext, quant_epilogue, window_extent
from npucc.frontend.graph_edit import single_user
from npucc.ir.graph import Graph, Layer
from npucc.target import Target


@dataclass(slots=True, unsafe_hash=True)
class ConvGeom:
    """Shapes and window parameters of one conv2d layer.

    NOTE: a value, never assigned to (equal and hashed by its fields), not declared frozen: a
    frozen class's `__init__` sets each field through `object.__setattr__` (3-5x the cost),
    and the lowering makes one per conv it looks at (`conv_geometry`), per load its `_Image`s
    and per image and group its `_ConvOps` (as `blocking.MTile`)."""

    n: int
    c: int
    h: int
    w: int
    co: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pad_t: int
    pad_l: int
    group: int

    @property
    def cg(self) -> int:
        """Input channels per group."""
        return self.c // self.group

    @property
    def cog(self) -> int:
        """Output channels per group."""
        return self.co // self.group

    @property
    def taps(self) -> int:
        """Kernel positions."""
        return self.kh * self.kw

    def in_rows(self, out_rows: int) -> int:
        """Input rows a band of `out_rows` output rows reads."""
        return window_extent(out_rows, self.sh, self.kh, self.dh)

    def in_cols(self, out_cols: int) -> int:
        """Input columns a band of `out_cols` output columns reads."""
        return window_extent(out_cols, self.sw, self.kw, self.dw)


def second_image(layer: Layer) -> str:
    """A conv's second image (input 4, fuse-shortcut), "" when it has none."""
    return layer.inputs[4] if len(layer.inputs) > 4 else ""


def conv_geometry(ctx: LowerContext, layer: Layer) -> ConvGeom:
    """The ConvGeom of a conv2d layer (`c`: its input channels, a second image's included)."""
    n, c, h, w = ctx.shape(layer.inputs[0])
    co, _, kh, kw = ctx.shape(layer.inputs[1])
    if second_image(layer):  # fuse-shortcut: K is x's channels, then s's
        c += ctx.shape(layer.inputs[4])[1]
    _, _, oh, ow = ctx.shape(layer.outputs[0])
    a = layer.attrs
    sh, sw = a.get("strides", (1, 1))
    dh, dw = a.get("dilations", (1, 1))
    pads = a.get("pads", (0, 0, 0, 0))
    return ConvGeom(
        n, c, h, w, co, oh, ow, kh, kw, sh, sw, dh, dw, pads[0], pads[1], a.get("group", 1)
    )


def _global_mean(graph: Graph, layer: Layer) -> bool:
    """Whether float `layer` is the mean of each [h, w] plane of its NCHW input, without a
    fused activation: a global average pool, or an average pool whose unpadded window is the
    whole plane. NOTE: a reduce mean over axes 2 and 3 is one too, but computed so it made
    MobileNet v2 slower (1,053,264 -> 1,067,759 cycles: the classifier gemm after it, bound
    by its 5 MB weight stream, ended 21 K cycles later under DAN's order), so it stays a layer.
    """
    a = layer.attrs
    if a.get("act") or a.get("q"):
        return False
    if layer.op == "globalavgpool":
        return True
    shape = graph.tensors[layer.inputs[0]].shape
    whole = layer.op == "avgpool" and tuple(a["kernel"]) == tuple(shape[2:])
    return whole and not any(a.get("pads", ())) and tuple(a.get("dilations", (1, 1))) == (1, 1)


def _sole_reader(graph: Graph, layer: Layer, target: Target) -> Layer | None:
    """The one layer that reads float conv `layer`'s output (not a graph output), on one core
    (a mesh plans the handoff of the conv's output), else None: the pool an epilogue may
    compute (`epilogue_pool`, `epilogue_cols`)."""
    y = layer.outputs[0]
    if layer.op != "conv2d" or target.cores > 1 or quant_epilogue(layer) or "qzp" in layer.attrs:
        return None
    return graph.users(y)[0] if single_user(graph, y) else None


def epilogue_pool(graph: Graph, layer: Layer, target: Target) -> Layer | None:
    """The global average pool (`_global_mean`) that alone reads float conv `layer`'s output,
    which the conv's epilogue may compute (its output tiles whole images:
    conv.lower_cube_conv), else None. One core only (`_sole_reader`)."""
    pool = _sole_reader(graph, layer, target)
    return pool if pool is not None and _global_mean(graph, pool) else None


def expand_depthwise(graph: Graph, layer: Layer, target: Target) -> Layer | None:
    """The float depthwise conv that alone reads float 1x1 conv `layer`'s output (stride 1,
    no padding, one group, no residual, a relu or clip at most), which may compute `layer`'s
    output itself, band by band into its windows (dwfuse.py), else None. One core only."""
    d = _sole_reader(graph, layer, target)
    a = layer.attrs
    if d is None or d.op != "conv2d" or "qzp" in d.attrs or len(layer.inputs) > 3:
        return None
    if graph.tensors[layer.inputs[1]].shape[2:] != (1, 1) or a.get("group", 1) != 1:
        return None
    if tuple(a.get("strides", (1, 1))) != (1, 1) or any(a.get("pads", (0, 0, 0, 0))):
        return None
    if a.get("act", "") not in ("", "relu", "clip") or d.inputs.index(layer.outputs[0]) != 0:
        return None
    w = graph.tensors[d.inputs[1]].shape
    return d if w[1] == 1 and d.attrs.get("group", 1) == w[0] > 1 and not second_image(d) else None


def epilogue_cols(graph: Graph, layer: Layer, target: Target) -> Layer | None:
    """The float max pool that alone reads float conv `layer`'s output, whose column pass (a
    window of kw > 1 columns, none of them padding) the conv's epilogue may compute on its
    output tiles of whole rows (conv.lower_cube_conv), else None. One core only."""
    pool = _sole_reader(graph, layer, target)
    if pool is None:
        return None
    a = pool.attrs
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    if pool.op != "maxpool" or a.get("q") or a["kernel"][1] < 2 or pads[1] or pads[3]:
        return None
    return pool
