"""Suite-wide test configuration: how the tests share the two workers of the README's command.

The README runs the suite on two pytest-xdist workers with `--dist loadgroup`. Every test runs
in the group of its module (a module's tests on one worker, so its module-scoped fixtures are
made once), except the tests marked `xdist_group("whole-model")`: the compiles and
interpretations of whole networks that take hundreds of MB to GB each, which run one at a time
on one worker so that two of them never add up. The heaviest of those (a light zoo network
checked against onnxruntime) run their body in a fresh interpreter (tests/apart.py), so that
the worker does not keep what they leave behind.

A test's compile uses one process (NPUCC_JOBS=1, unless set): on the two workers the CPUs are
busy already, so a compile's own workers (npucc.parallel) would only add their forks' cost, and
a test's defaults do not depend on the machine's CPUs; the tests that compile with jobs=2 say
so (tests/e2e/test_jobs.py).
"""

from __future__ import annotations

import os

import pytest

from npucc.parallel import JOBS_ENV


def pytest_configure(config: pytest.Config) -> None:
    """Compiles default to one process (NPUCC_JOBS), unless the environment says otherwise."""
    os.environ.setdefault(JOBS_ENV, "1")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test without an xdist group into its module's group."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
