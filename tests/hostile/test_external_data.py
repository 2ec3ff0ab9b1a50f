"""External data is read only from inside the model's own folder."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from hostile_util import MODELS, assert_clean_error, npucc

from npucc.errors import NpuccError
from npucc.frontend.onnx_import import load_model

SMALL_CNN = MODELS / "small_cnn.onnx"


def _external_model(folder: Path, data_file: str = "weights.bin") -> Path:
    """small_cnn saved in `folder` with every initializer in `folder/data_file`."""
    (folder / data_file).parent.mkdir(parents=True, exist_ok=True)
    m = onnx.load(str(SMALL_CNN))
    path = folder / "model.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location=data_file, size_threshold=0)
    return path


def _relocate(path: Path, location: str) -> None:
    """Point every external tensor of the model at `path` to `location`."""
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(m, str(path))


@pytest.fixture
def outside(tmp_path) -> Path:
    """A valid weights file outside the model's folder (it would load if it were reached)."""
    _external_model(tmp_path / "elsewhere")
    return tmp_path / "elsewhere" / "weights.bin"


def test_external_data_inside_the_folder_loads(tmp_path):
    path = _external_model(tmp_path / "m", "sub/weights.bin")
    model = load_model(path)
    assert all(t.data_location == onnx.TensorProto.DEFAULT for t in model.graph.initializer)
    proc = npucc(path, "-o", tmp_path / "o.cmd")
    assert proc.returncode == 0, proc.stderr


def test_absolute_location_is_refused(tmp_path, outside):
    path = _external_model(tmp_path / "m")
    _relocate(path, str(outside))
    error = assert_clean_error(npucc(path, "-o", tmp_path / "o.cmd"), "external data of tensor")
    assert "must be a relative path inside the model's folder" in error


ESCAPES = [
    "../elsewhere/weights.bin",
    "sub/../../elsewhere/weights.bin",
    "weights.bin/../weights.bin",  # stays inside, but '..' is refused outright
    "..\\elsewhere\\weights.bin",
]


@pytest.mark.parametrize("location", ESCAPES)
def test_parent_components_are_refused(tmp_path, outside, location):
    path = _external_model(tmp_path / "m")
    _relocate(path, location)
    with pytest.raises(NpuccError, match="must be a relative path inside the model's folder"):
        load_model(path)


def test_parent_component_through_the_cli(tmp_path, outside):
    path = _external_model(tmp_path / "m")
    _relocate(path, "../elsewhere/weights.bin")
    assert_clean_error(npucc(path, "-o", tmp_path / "o.cmd"), "relative path inside")


@pytest.mark.parametrize("link", ["file", "folder"])
def test_symlinks_leaving_the_folder_are_refused(tmp_path, outside, link):
    path = _external_model(tmp_path / "m")
    if link == "file":
        os.symlink(outside, tmp_path / "m" / "link.bin")
        _relocate(path, "link.bin")
    else:
        os.symlink(outside.parent, tmp_path / "m" / "linked")
        _relocate(path, "linked/weights.bin")
    error = assert_clean_error(npucc(path, "-o", tmp_path / "o.cmd"), "symlink leads outside")
    assert str(outside) not in error


def test_missing_and_short_external_files_are_clean_errors(tmp_path):
    path = _external_model(tmp_path / "m")
    _relocate(path, "absent.bin")
    with pytest.raises(NpuccError, match="no such file in the model's folder"):
        load_model(path)
    _relocate(path, "weights.bin")
    data = tmp_path / "m" / "weights.bin"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(NpuccError, match="cannot read external data"):
        load_model(path)


def test_external_data_in_a_model_not_read_from_a_file_is_refused(tmp_path):
    path = _external_model(tmp_path / "m")
    unloaded = onnx.load(str(path), load_external_data=False)
    with pytest.raises(NpuccError, match="not read from a file"):
        load_model(unloaded)
    with pytest.raises(NpuccError, match="not read from a file"):
        load_model(unloaded.SerializeToString())
