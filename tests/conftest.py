"""Suite-wide test configuration: how the tests share the two workers of the README's command.

The README runs the suite on two pytest-xdist workers with `--dist loadgroup`. Every test runs
in the group of its module (a module's tests on one worker, so its module-scoped fixtures are
made once), except the tests marked `xdist_group("whole-model")`: the compiles and
interpretations of whole networks that take hundreds of MB to GB each, which run one at a time
on one worker so that two of them never add up. The heaviest of those (a light zoo network
checked against onnxruntime) run their body in a fresh interpreter (tests/apart.py), so that
the worker does not keep what they leave behind.

The groups are handed to the workers heaviest first (tests/group_weights.json, the seconds of
each group in a recorded run; a group not in it comes after those that are), so that no long
group starts last while the other worker idles. `--record-group-weights FILE` writes the
seconds of the run's groups (run it with the README's command to refresh the file).

A test's compile uses one process (NPUCC_JOBS=1, unless set): on the two workers the CPUs are
busy already, so a compile's own workers (npucc.parallel) would only add their forks' cost, and
a test's defaults do not depend on the machine's CPUs; the tests that compile with jobs=2 say
so (tests/e2e/test_jobs.py).

Under PYTHONDONTWRITEBYTECODE every Python process of the run (the workers, each `python -m
npucc` a CLI test starts, each fresh interpreter of tests/apart.py) would compile npucc and
its dependencies' sources again; the run keeps their byte code in a temporary directory of
its own instead (PYTHONPYCACHEPREFIX), removed at its end, and still writes none beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from npucc.parallel import JOBS_ENV

WEIGHTS = Path(__file__).with_name("group_weights.json")
_RECORDED: defaultdict[str, float] = defaultdict(float)


def pytest_addoption(parser: pytest.Parser) -> None:
    """--record-group-weights FILE: write each xdist group's seconds in this run to FILE."""
    parser.addoption(
        "--record-group-weights",
        metavar="FILE",
        help="write the seconds of each test group of this (-n) run to FILE",
    )


def pytest_configure(config: pytest.Config) -> None:
    """One process a compile (NPUCC_JOBS), the run's byte code kept, the groups in order."""
    os.environ.setdefault(JOBS_ENV, "1")
    if hasattr(config, "workerinput"):
        return  # NOTE: a worker inherited the controller's environment
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        if not os.environ.get("PYTHONPYCACHEPREFIX"):
            prefix = tempfile.mkdtemp(prefix="npucc-tests-pyc-")
            os.environ["PYTHONPYCACHEPREFIX"] = prefix
            config.add_cleanup(lambda: shutil.rmtree(prefix, ignore_errors=True))
            sys.pycache_prefix = prefix
        sys.dont_write_bytecode = False
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # NOTE: the order is the weights' (below)


def _group(item: pytest.Item) -> str:
    """The xdist group of a test."""
    marker = item.get_closest_marker("xdist_group")
    assert marker is not None
    return str(marker.args[0] if marker.args else marker.kwargs["name"])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test without an xdist group into its module's group; heaviest groups first."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    weights = json.loads(WEIGHTS.read_text())
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        first.setdefault(_group(item), i)
    # NOTE: a stable sort: the tests of a group keep their order; the same order on every
    # worker (xdist requires identical collections)
    items.sort(key=lambda item: (-weights.get(_group(item), 0.0), first[_group(item)]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add the report's seconds to its group (under xdist the controller sees `id@group`)."""
    if "@" in report.nodeid:
        _RECORDED[report.nodeid.rsplit("@", 1)[1]] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the groups' seconds where --record-group-weights says (the controller only)."""
    path = session.config.getoption("record_group_weights")
    if path and not hasattr(session.config, "workerinput") and _RECORDED:
        weights = {group: round(s, 1) for group, s in sorted(_RECORDED.items())}
        Path(path).write_text(json.dumps(weights, indent=0) + "\n")
