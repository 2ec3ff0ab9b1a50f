"""Differential fuzzing in the suite: random models on random targets, and the saved failures.

The property (fuzz_check.check_example): a compile succeeds or is refused with a true one-line
capacity claim; a compiled program runs in the strict interpreter, matches onnxruntime,
predicts its makespan exactly and compiles to the same bytes twice. The random run is
derandomized (fixed examples, no database), so it is deterministic; a failure is shrunk by
hypothesis and, with NPUCC_FUZZ_SAVE=DIR set, saved there as a model + target pair that
becomes a regression test when moved to tests/fuzz/regressions/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuzz_check import check_example
from fuzz_models import models
from fuzz_regress import load_regression, regressions, save_regression
from fuzz_targets import schedules, targets
from hypothesis import HealthCheck, given, settings

EXAMPLES = 200


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(models(), targets(), schedules())
def test_random_models_on_random_targets(model, target, schedule):
    out = check_example(model, target, schedule)
    if not out.ok and os.environ.get("NPUCC_FUZZ_SAVE"):  # the last call is the shrunk example
        save_regression(
            model, target, out.failure.replace(":", "-"), Path(os.environ["NPUCC_FUZZ_SAVE"])
        )
    assert out.ok, f"{out.failure}: {out.detail}"


# NOTE: a stem starting "open-" is a failure found and not yet fixed: it must still fail
# (strict xfail), so the fix that makes it pass also renames it to a regression
OPEN = pytest.mark.xfail(strict=True, reason="an open fuzz failure, not yet fixed")


@pytest.mark.parametrize(
    "stem", [pytest.param(s, marks=OPEN) if s.startswith("open-") else s for s in regressions()]
)
def test_saved_regression(stem):
    model, target, schedule = load_regression(stem)
    out = check_example(model, target, schedule)
    assert out.ok, f"{out.failure}: {out.detail}"
