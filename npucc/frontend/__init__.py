"""ONNX frontend: load, check, import and canonicalise a model into the graph IR."""

from npucc.frontend import (  # noqa: F401  (each module registers its pass)
    drop_identity,
    fold_batchnorm,
    fold_constants,
    fuse_activations,
    fuse_attention,
    fuse_gelu,
    fuse_layernorm,
    gather_index_views,
    legalize,
    prune_unused,
)
from npucc.frontend.onnx_import import (
    FRONTEND_PIPELINE,
    SUPPORTED_OPS,
    frontend_passes,
    import_model,
    load_model,
    model_to_graph,
)

__all__ = [
    "FRONTEND_PIPELINE",
    "SUPPORTED_OPS",
    "frontend_passes",
    "import_model",
    "load_model",
    "model_to_graph",
]
