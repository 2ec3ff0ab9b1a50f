"""The build's compiled part: the DAN kernels (MPAS's order loop, CPE's list and budgeted
orders), Cython pure-Python-mode modules (the rest is pyproject.toml's). Without the build they
run as plain Python: slow, the same orders."""

from Cython.Build import cythonize
from setuptools import setup

KERNELS = [
    "npucc/backend/schedule/dan/mpas_kernel.py",
    "npucc/backend/schedule/dan/cpe_kernel.py",
]

setup(ext_modules=cythonize(KERNELS, language_level=3))
