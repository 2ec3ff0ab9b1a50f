"""The transforms tests share the frontend tests' helpers (tiny models, the ORT comparison)."""

from __future__ import annotations

import sys
from pathlib import Path

# NOTE: test helper modules are found on sys.path (pytest's rootdir-relative "prepend" import)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "frontend"))
