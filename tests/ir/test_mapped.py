"""Arrays mapped from a file: the values as they lie, read-only, copied out page by page."""

from __future__ import annotations

import io
import mmap
from pathlib import Path

import numpy as np
import pytest

from npucc.ir import mapped
from npucc.ir.mapped import map_array, write_array


def _file(tmp_path: Path, values: np.ndarray, skip: int) -> Path:
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(skip)) + values.tobytes())
    return path


@pytest.mark.parametrize("skip", [0, 3, 70000])  # inside and beyond the first mapping unit
def test_a_mapped_array_holds_the_values_at_its_offset_read_only(tmp_path: Path, skip: int) -> None:
    values = np.arange(6 * 5000, dtype="<f4").reshape(6, 5000)
    array = map_array(str(_file(tmp_path, values, skip % 256)), skip % 256, values.dtype,
                      values.shape)  # fmt: skip
    assert array is not None and not array.flags.writeable
    np.testing.assert_array_equal(array, values)


def test_a_file_too_short_maps_nothing(tmp_path: Path) -> None:
    values = np.ones(100, "<f4")
    assert map_array(str(_file(tmp_path, values, 0)), 8, values.dtype, values.shape) is None


def test_writing_a_mapped_array_gives_its_pages_back_and_writes_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mapped, "COPY_CHUNK", 1 << 14)  # several chunks
    monkeypatch.setattr(mmap, "mmap", _Spy)
    values = np.random.default_rng(0).standard_normal(100_003).astype("<f4")
    array = map_array(str(_file(tmp_path, values, 5)), 5, values.dtype, values.shape)
    assert array is not None
    out = io.BytesIO()
    write_array(out, array)
    assert out.getvalue() == values.tobytes()
    given = _Spy.given
    assert len(given) > 1 and given[0][1] == 0  # from the mapping's start, in whole pages
    pairs = zip(given, given[1:], strict=False)
    assert all(start == prev[1] + prev[2] for prev, (_, start, _n) in pairs)
    assert all(op == mmap.MADV_DONTNEED and n % mmap.PAGESIZE == 0 for op, _s, n in given)
    np.testing.assert_array_equal(array, values)  # pages given back are read again


def test_an_array_in_memory_is_written_as_it_is() -> None:
    out = io.BytesIO()
    write_array(out, np.arange(10, dtype="<i4"))
    assert out.getvalue() == np.arange(10, dtype="<i4").tobytes()


class _Spy(mmap.mmap):
    """A mapping that records its madvise calls, then makes them."""

    given: list[tuple[int, int, int]] = []

    def madvise(self, option: int, start: int = 0, length: int = 0) -> None:
        """Record, then advise."""
        self.given.append((option, start, length))
        super().madvise(option, start, length)
