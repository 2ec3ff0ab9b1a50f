"""Design-space exploration: sweeps of targets x models x options, one Ray task per point."""

from npucc.explore.results import pareto_front, read_rows, summary
from npucc.explore.runner import SweepRun, run_sweep
from npucc.explore.sweep import Axis, Model, Point, Sweep, load_sweep

__all__ = [
    "Axis",
    "Model",
    "Point",
    "Sweep",
    "SweepRun",
    "load_sweep",
    "pareto_front",
    "read_rows",
    "run_sweep",
    "summary",
]
