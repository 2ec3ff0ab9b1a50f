"""The build's compiled part: MPAS's order kernel and the estimate's per-core timing kernel, Cython
pure-Python-mode modules (the rest is pyproject.toml's). Without the build they run as plain
Python: slow, the same orders and timings."""

from Cython.Build import cythonize
from setuptools import setup

setup(
    ext_modules=cythonize(
        [
            "npucc/backend/schedule/dan/mpas_kernel.py",
            "npucc/backend/estimate/timing_kernel.py",
        ],
        language_level=3,
    )
)
