"""The build's compiled part: MPAS's order kernel and the linear scan's kernel, Cython
pure-Python-mode modules (the rest is pyproject.toml's). Without the build they run as plain
Python: slow, the same orders and plans."""

from Cython.Build import cythonize
from setuptools import setup

KERNELS = [
    "npucc/backend/schedule/dan/mpas_kernel.py",
    "npucc/backend/schedule/scan_kernel.py",
]

setup(ext_modules=cythonize(KERNELS, language_level=3))
