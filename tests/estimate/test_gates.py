"""The estimate's write gates on on-chip tensors (npucc.backend.estimate.gates); that an unsplit
plan priced from its placements (`Tenants`) prices as `Gates` do is tests/estimate/test_prefix.py's
(transformer_encoder's search waits so in about half its plans)."""

from __future__ import annotations

from npucc.backend.estimate.gates import Gates, Tenants, gate_keys
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


def test_unsplit_tenants_wait_for_the_touchers_not_behind_every_data_input():
    # 0: in -> x0; 1: x0 -> x1; 2: x0 -> x2; 3: x1, x2 -> x3; 4: x3 -> out
    origin = ((None,), (0,), (0,), (1, 2), (3,))
    data = ((1,), (1,), (1,), (1, 2), (1,))
    whole = (
        (("x0", 16, (1, 2), 2),),
        (("x1", 16, (3,), 3),),
        (("x2", 16, (3,), 3),),
        (("x3", 16, (4,), 4),),
        (),
    )
    tenants = Tenants(origin, data, whole)
    assert tenants.of(3) == (("x0", (1, 2)),)  # 0 is behind both inputs of 3; 1 and 2 not
    assert tenants.of(4) == ()  # everything dead before 4 is behind its input
    placed = [
        (0, 64, 0, 2, 0b11, None, ()),  # x0 on cores 0, 1
        (64, 128, 1, 3, 0b11, None, ()),
        (128, 192, 2, 3, 0b11, None, ()),
        (0, 64, 3, 4, 0b01, None, ()),  # x3 in x0's bytes on core 0
    ]
    names = ["x0", "x1", "x2", "x3"]
    assert tenants.waits(placed, names, 3) == {3: {1, 2}}
    placed[3] = (0, 64, 3, 4, 0b100, None, ())  # another core
    assert tenants.waits(placed, names, 3) == {}
    placed[3] = (192, 256, 3, 4, 0b01, None, ())  # other bytes
    assert tenants.waits(placed, names, 3) == {}
