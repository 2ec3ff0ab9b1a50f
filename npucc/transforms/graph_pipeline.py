"""The graph-level pipeline: the frontend's import and legalize passes and the rewrites."""

from __future__ import annotations

from npucc.frontend.legalize import LegalizeOnnx
from npucc.frontend.onnx_import import ImportOnnx, InputShapes, ModelSource
from npucc.frontend.onnx_qdq import ImportInt8
from npucc.ir.graph import Graph
from npucc.passes import CompileContext, Pass, PassManager
from npucc.target import load_target
from npucc.transforms.drop_identity import DropIdentity
from npucc.transforms.fold_batchnorm import FoldBatchnorm
from npucc.transforms.fold_constants import FoldConstants
from npucc.transforms.fold_conv_affine import FoldConvAffine
from npucc.transforms.fold_matmul_bias import FoldMatmulBias
from npucc.transforms.fuse_activations import FuseActivations
from npucc.transforms.fuse_attention import FuseAttention
from npucc.transforms.fuse_gelu import FuseGelu
from npucc.transforms.fuse_layernorm import FuseLayerNorm
from npucc.transforms.fuse_residual import FuseResidual
from npucc.transforms.fuse_shortcut import FuseShortcut
from npucc.transforms.gather_index_views import GatherIndexViews
from npucc.transforms.prune_unused import PruneUnused
from npucc.transforms.sink_pools import SinkPools
from npucc.transforms.sink_views import SinkViews
from npucc.transforms.split_concat_conv import SplitConcatConv

DEFAULT_TARGET = "davinci-core"


def frontend_passes(input_shapes: InputShapes | None = None, fallback: str = "error") -> list[Pass]:
    """The graph-level pipeline: fresh instances of its passes, in order (`fallback` "host":
    what npucc cannot lower becomes host layers, npucc.frontend.host_fallback)."""
    return [
        ImportOnnx(input_shapes, fallback),
        ImportInt8(),
        FoldConstants(),
        DropIdentity(),
        GatherIndexViews(),
        FoldBatchnorm(),
        LegalizeOnnx(fallback),
        FoldConvAffine(),
        FuseAttention(),
        FoldMatmulBias(),
        FuseLayerNorm(),
        FuseGelu(),
        SinkViews(),
        FuseActivations(),
        FuseResidual(),
        FuseShortcut(),
        SinkPools(),
        SplitConcatConv(),
        PruneUnused(),
    ]


def import_model(
    model_or_path: ModelSource, input_shapes: InputShapes | None = None, fallback: str = "error"
) -> Graph:
    """Run the whole graph-level pipeline: load, check, import, canonicalise and rewrite,
    for no particular target: without fuse-shortcut, a one-core decision (HyperCut's mesh
    plans and `npucc inspect` read this graph)."""
    ctx = CompileContext(load_target(DEFAULT_TARGET))
    passes = [p for p in frontend_passes(input_shapes, fallback) if not isinstance(p, FuseShortcut)]
    return PassManager(passes).run(model_or_path, ctx)
