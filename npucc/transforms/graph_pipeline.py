"""The graph-level pipeline: the frontend's import and legalize passes and the rewrites."""

from __future__ import annotations

from npucc.frontend import legalize  # noqa: F401  (registers legalize-onnx)
from npucc.frontend.onnx_import import InputShapes, ModelSource
from npucc.ir.graph import Graph
from npucc.passes import PASSES, CompileContext, Pass, PassManager
from npucc.target import load_target
from npucc.transforms import (  # noqa: F401  (each module registers its pass)
    drop_identity,
    fold_batchnorm,
    fold_constants,
    fuse_activations,
    fuse_attention,
    fuse_gelu,
    fuse_layernorm,
    gather_index_views,
    prune_unused,
)

FRONTEND_PIPELINE = (
    "import-onnx",
    "fold-constants",
    "drop-identity",
    "gather-index-views",
    "fold-batchnorm",
    "legalize-onnx",
    "fuse-attention",
    "fuse-layernorm",
    "fuse-gelu",
    "fuse-activations",
    "prune-unused",
)
DEFAULT_TARGET = "davinci-core"


def frontend_passes() -> list[Pass]:
    """Fresh instances of the graph-level pipeline's passes, in order."""
    return [PASSES[name]() for name in FRONTEND_PIPELINE]


def import_model(model_or_path: ModelSource, input_shapes: InputShapes | None = None) -> Graph:
    """Run the whole graph-level pipeline: load, check, import, canonicalise and rewrite."""
    ctx = CompileContext(load_target(DEFAULT_TARGET), {"input_shapes": input_shapes})
    return PassManager(frontend_passes()).run(model_or_path, ctx)
