"""`python -m npucc`."""

from npucc.tools.cli import run

run()
