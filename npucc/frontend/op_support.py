"""Which ONNX operators npucc supports: the one table `npucc ops`, `npucc inspect` and
docs/operators.md (`npucc conformance --markdown`) are made from."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import onnx

from npucc.frontend import onnx_control
from npucc.frontend.graph_edit import foldable
from npucc.frontend.legalize import LIMITATIONS
from npucc.frontend.onnx_import import SUPPORTED_OPS

LOWERS, FOLDS, REFUSES = "lowers", "folds", "refuses"  # what npucc does with an operator
HOST = "host"  # a node's status under --fallback host when npucc would refuse it
_LIMITS = {**LIMITATIONS, **onnx_control.LIMITATIONS}


@dataclass(frozen=True, slots=True)
class OpSupport:
    """One ONNX operator: whether npucc lowers it, only folds it, or refuses it, and its limits."""

    op: str
    status: str  # LOWERS (runs on the NPU), FOLDS (only with constant inputs), REFUSES
    opsets: str  # the accepted opset versions, or why there are none
    limits: str  # the constraints npucc puts on it ('' for none)

    def to_json(self) -> dict[str, str]:
        """The row as JSON-ready data."""
        return {"op": self.op, "status": self.status, "opsets": self.opsets, "limits": self.limits}


@cache
def op_support(op: str) -> OpSupport:
    """The support of standard (ai.onnx) operator `op`."""
    if op in SUPPORTED_OPS:
        return OpSupport(op, LOWERS, _opsets(op), _LIMITS.get(op, ""))
    if foldable(op):
        return OpSupport(op, FOLDS, "only folded (constant inputs)", _LIMITS.get(op, ""))
    return OpSupport(op, REFUSES, "not supported", _LIMITS.get(op, ""))


def all_operators() -> list[OpSupport]:
    """Every operator this onnx version defines (ai.onnx.ml and training ones too), by name."""
    names = {s.name for s in onnx.defs.get_all_schemas()}
    return [op_support(op) for op in sorted(names | SUPPORTED_OPS)]


def _opsets(op: str) -> str:
    """The opset versions of `op` npucc accepts (7 to the newest), as the schema's versions."""
    newest = onnx.defs.onnx_opset_version()
    versions = sorted(
        {onnx.defs.get_schema(op, v).since_version for v in range(7, newest + 1) if _has(op, v)}
    )
    return f"7-{newest} (versions {', '.join(map(str, versions))})" if versions else "-"


def _has(op: str, version: int) -> bool:
    try:
        onnx.defs.get_schema(op, version)
        return True
    except Exception:  # introduced later, or not a default-domain operator
        return False
