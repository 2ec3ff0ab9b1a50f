"""gc_paused: the cyclic collector is off inside the block and back as it was after it."""

import gc

import pytest

from npucc.gcpause import gc_paused


def test_paused_inside_and_restored_after() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_exception() -> None:
    gc.enable()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_left_disabled_when_it_was() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
