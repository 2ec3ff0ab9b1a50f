"""The build's compiled part: MPAS's order kernel, a Cython pure-Python-mode module (the rest is
pyproject.toml's). Without the build it runs as plain Python: slow, the same orders."""

from Cython.Build import cythonize
from setuptools import setup

setup(ext_modules=cythonize(["npucc/backend/schedule/dan/mpas_kernel.py"], language_level=3))
