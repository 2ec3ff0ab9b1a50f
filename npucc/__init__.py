"""npucc: an ONNX model compiler for tiled neural processing units."""

from typing import Any

from npucc.errors import CheckFailed, NpuccError

__all__ = [
    "CheckFailed",
    "CompileOptions",
    "NpuccError",
    "Program",
    "Target",
    "compile",
    "compile_until",
    "load",
    "load_target",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """Import the compiler lazily so that `import npucc.<submodule>` stays light."""
    if name in ("compile", "compile_until", "load", "Program"):
        from npucc import compiler

        return getattr(compiler, name)
    if name == "CompileOptions":
        from npucc.options import CompileOptions

        return CompileOptions
    if name in ("Target", "load_target"):
        from npucc import target

        return getattr(target, name)
    raise AttributeError(f"module 'npucc' has no attribute {name!r}")
