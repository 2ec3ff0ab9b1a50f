"""The compiled kernels' source run as plain Python, for the tests comparing it with the build."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def plain_source(kernel: ModuleType) -> ModuleType:
    """A fresh module from `kernel`'s .py file, run as plain Python whether or not the
    installed `kernel` is its build (the file is valid Python: Cython's pure-Python mode)."""
    short = kernel.__name__.rpartition(".")[2]
    spec = importlib.util.spec_from_file_location(
        f"{short}_py", Path(kernel.__file__).parent / f"{short}.py"
    )
    assert spec is not None and spec.loader is not None
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    return plain
