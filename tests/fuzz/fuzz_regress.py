"""Saved fuzzing failures: a minimised model and target pair per file stem under regressions/.

`<stem>.onnx` is the model, `<stem>.toml` the target (a file `npucc --target` reads); the
scheduler the example used is the TOML's first line, a comment `# schedule = NAME`.
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
from fuzz_targets import to_toml

from npucc.target import Target, load_target

REGRESSIONS = Path(__file__).resolve().parent / "regressions"


def save_regression(
    model: onnx.ModelProto,
    target: Target,
    schedule: str,
    name: str,
    directory: Path = REGRESSIONS,
) -> Path:
    """Write `<name>.onnx` and `<name>.toml` (the target) into `directory`; the .onnx path."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.onnx"
    path.write_bytes(model.SerializeToString())
    text = f"# schedule = {schedule}\n{to_toml(target)}"
    (directory / f"{stem}.toml").write_text(text, encoding="utf-8")
    return path


def regressions(directory: Path = REGRESSIONS) -> list[str]:
    """Stems of the saved pairs, sorted."""
    return sorted(p.stem for p in directory.glob("*.onnx") if p.with_suffix(".toml").exists())


def load_regression(
    stem: str, directory: Path = REGRESSIONS
) -> tuple[onnx.ModelProto, Target, str]:
    """The model, target and scheduler saved under `stem`."""
    model = onnx.load(str(directory / f"{stem}.onnx"))
    path = directory / f"{stem}.toml"
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = re.fullmatch(r"# schedule = ([\w-]+)", first)
    return model, load_target(path), match[1] if match else "dan"
