"""gc_paused: the cyclic collector is off inside the block and back as it was after it;
release_memory gives freed heap pages back to the OS."""

import gc

import pytest

from npucc.gcpause import _malloc_trim, gc_paused, release_memory, trim_heap


def test_paused_inside_and_restored_after() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_what_the_block_built_is_not_pending_collection() -> None:
    gc.enable()
    with gc_paused():
        built = [[i] for i in range(50_000)]  # tracked containers, counted by generation 0
    # moved to the oldest generation untraversed (not promoted by collections one by one)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(built[0]) in oldest and id(built[-1]) in oldest
    assert gc.get_freeze_count() == 0


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


def _rss() -> int:
    """This process's resident bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(_malloc_trim() is None, reason="no glibc malloc_trim")
def test_release_memory_returns_the_free_pages_inside_the_heap() -> None:
    blocks = [bytearray(8192) for _ in range(8192)]  # 64 MiB of heap blocks, all touched
    kept = blocks[::64]  # one block in 64 stays: the heap cannot just shrink from its top
    del blocks
    before = _rss()
    release_memory()
    assert _rss() < before - (32 << 20)
    assert len(kept) == 128


@pytest.mark.skipif(_malloc_trim() is None, reason="no glibc malloc_trim")
def test_trim_heap_returns_the_free_pages_inside_the_heap() -> None:
    blocks = [bytearray(8192) for _ in range(8192)]
    kept = blocks[::64]
    del blocks
    before = _rss()
    trim_heap()
    assert _rss() < before - (32 << 20)
    assert len(kept) == 128
