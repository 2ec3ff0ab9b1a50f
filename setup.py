"""The build's compiled part: npucc's per-node kernels (MPAS's order, CPE's list and budgeted
orders, the linear scan, the estimate's per-core timing), Cython pure-Python-mode modules (the
rest is pyproject.toml's). Without the build they run as plain Python: slow, the same results."""

from Cython.Build import cythonize
from setuptools import setup

KERNELS = [
    "npucc/backend/schedule/dan/mpas_kernel.py",
    "npucc/backend/schedule/dan/cpe_kernel.py",
    "npucc/backend/schedule/dan/moves_kernel.py",
    "npucc/backend/schedule/scan_kernel.py",
    "npucc/backend/estimate/timing_kernel.py",
    "npucc/codegen/flags_kernel.py",
]

setup(ext_modules=cythonize(KERNELS, language_level=3))
