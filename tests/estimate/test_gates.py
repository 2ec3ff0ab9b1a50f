"""The estimate's write gates on on-chip tensors (npucc.backend.estimate.gates)."""

from __future__ import annotations

from npucc.backend.estimate.gates import Gates, gate_keys
from npucc.ir.onchip import OnChip

HOME = ((0, 0), (0, 1))


def test_a_reused_slot_waits_for_the_readers_of_its_previous_slice():
    slot = OnChip(HOME, chunk=64, slot=32, slots=2, live=(0, 9))
    gates = Gates({"h": slot}, elem_bytes=4)
    gates.note(3, layer=5, keys=["h"], slices=["h"], j=0)  # layer 5 read slice 0
    gates.note(4, layer=6, keys=["h"], slices=["h"], j=1)
    assert gates.waits(["h"], j=2, n=4) == {3}  # slice 2 takes slice 0's slot
    assert gates.waits(["h"], j=3, n=4) == {4}
    assert gates.waits(["h"], j=1, n=4) == set()  # a slot's first use: nothing before it


def test_bytes_reused_after_a_life_wait_for_every_layer_that_touched_them():
    onchip = {
        "a": OnChip(HOME, chunk=16, at=0, live=(0, 2)),
        "b": OnChip(HOME, chunk=16, at=0, live=(3, 5)),  # a's bytes after its life
        "c": OnChip(HOME, chunk=16, at=64, live=(3, 5)),  # other bytes
        "d": OnChip(((1, 1),), chunk=16, at=0, live=(3, 5)),  # another home
    }
    gates = Gates(onchip, elem_bytes=4)
    gates.note(0, layer=0, keys=["a"], slices=[], j=0)  # wrote a
    gates.note(1, layer=1, keys=["a"], slices=[], j=0)  # read a
    gates.note(2, layer=1, keys=["a"], slices=[], j=1)  # the layer's later run: it ends last
    assert gates.waits(["b"], j=0, n=1) == {0, 2}
    assert gates.waits(["c"], j=0, n=1) == set()
    assert gates.waits(["d"], j=0, n=1) == set()
    assert gates.waits(["a"], j=0, n=1) == set()  # its own life is not before it


def test_gate_keys_split_outputs_and_read_slices():
    lookups = ((0, "x"), (1, "w@chip0"), (2, "y"))  # inputs x, w (staged), output y
    assert gate_keys(("x", "w"), lookups, 2, 0) == (("x", "w@chip0", "y"), ("y",), ("x",))
    assert gate_keys(("x", "w"), lookups, 1, 0)[2] == ()  # unsplit: no slices read
