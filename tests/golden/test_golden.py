"""The compiler's outputs equal the recorded fixture (tests/golden/golden.json).

A redesign that must change no output is checked against the whole fixture with
`python tests/golden/record.py --check`; the suite checks the shipped models' streams on
davinci-core and DAN's schedules of the six bench workloads. An intended change of output is
re-recorded with `record.py --write --only KEY` and said in its commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import record  # noqa: E402

GOLDEN = json.loads(record.FIXTURE.read_text())
ENTRIES = {
    key: fn
    for key, fn in record.entries(quick=True)
    if key.startswith("stream/davinci-core/") or key.endswith("/dan")
}


@pytest.mark.parametrize("key", sorted(ENTRIES))
def test_output_equals_the_fixture(key: str) -> None:
    assert json.loads(json.dumps(ENTRIES[key]())) == GOLDEN[key]
