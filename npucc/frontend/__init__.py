"""ONNX frontend: load, check, import and canonicalise a model into the graph IR."""

from npucc.frontend.onnx_import import (
    SUPPORTED_OPS,
    frontend_passes,
    import_model,
    load_model,
    model_to_graph,
)

__all__ = [
    "SUPPORTED_OPS",
    "frontend_passes",
    "import_model",
    "load_model",
    "model_to_graph",
]
