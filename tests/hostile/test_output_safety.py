"""Outputs are replaced whole or not at all, and the input model is never overwritten."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_util import MODELS, assert_clean_error, npucc

import npucc as api
from npucc.errors import NpuccError

SMALL_CNN = MODELS / "small_cnn.onnx"


class _Interrupted(BaseException):
    """Stands for a kill or Ctrl-C arriving in the middle of a write."""


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("which", [0, 1])  # interrupt the .bin write or the stream write
def test_an_interrupted_save_leaves_the_old_outputs_whole(tmp_path, monkeypatch, which):
    out = tmp_path / "out.cmd"
    out.write_text("old stream\n")
    Path(f"{out}.bin").write_bytes(b"old image")
    program = api.compile(SMALL_CNN)
    real_fdopen, calls = os.fdopen, []

    class HalfWriter:
        """A file that writes half of the data, then is interrupted."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise _Interrupted

    def fdopen(fd, *args, **kwargs):
        f = real_fdopen(fd, *args, **kwargs)
        calls.append(fd)
        return HalfWriter(f) if len(calls) - 1 == which else f

    monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.raises(_Interrupted):
        program.save(out)
    files = _listing(tmp_path)
    assert set(files) == {"out.cmd", "out.cmd.bin"}  # no temporary file left behind
    assert files["out.cmd"] == b"old stream\n"  # never half-written
    assert files["out.cmd.bin"] in (b"old image", program.image)


def test_a_failed_write_is_a_clean_error(tmp_path):
    (tmp_path / "out.cmd").mkdir()
    assert_clean_error(npucc(SMALL_CNN, "-o", tmp_path / "out.cmd"), "cannot write")
    with pytest.raises(NpuccError, match="cannot write"):
        api.compile(SMALL_CNN).save(tmp_path / "absent" / "out.cmd")


def test_outputs_get_ordinary_permissions(tmp_path):
    assert npucc(SMALL_CNN, "-o", tmp_path / "out.cmd").returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    for name in ("out.cmd", "out.cmd.bin"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "bin"])
def test_the_input_model_is_never_overwritten(tmp_path, spelling):
    model = tmp_path / ("model.cmd.bin" if spelling == "bin" else "model.onnx")
    model.write_bytes(SMALL_CNN.read_bytes())
    out = {
        "same": model,
        "dotted": tmp_path / "sub" / ".." / "model.onnx",
        "symlink": tmp_path / "link.onnx",
        "bin": tmp_path / "model.cmd",  # would write model.cmd.bin
    }[spelling]
    (tmp_path / "sub").mkdir()
    if spelling == "symlink":
        out.symlink_to(model)
    assert_clean_error(npucc(model, "-o", out), "would overwrite the input model")
    assert model.read_bytes() == SMALL_CNN.read_bytes()
