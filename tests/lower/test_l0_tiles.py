"""The L0 tiles' search: of the tiles that fit, the ones no other contains."""

from __future__ import annotations

import itertools
import random

from npucc.backend.lower.l0_tiles import _contains, _maximal


def test_the_maximal_tiles_are_those_no_other_contains_in_their_order():
    rng = random.Random(0)
    for count in (1, 2, 7, 60, 400):
        tiles = [tuple(rng.randint(1, 8) for _ in range(3)) for _ in range(count)]
        tiles += tiles[: count // 3]  # repeats: a tile equal to another contains it not
        every = [t for t in tiles if not any(_contains(o, t) for o in tiles)]
        assert _maximal(tiles) == every  # type: ignore[arg-type]


def test_a_grid_of_tiles_has_its_one_largest_tile_left():
    grid = list(itertools.product((16, 32), (16, 64), (8, 16, 32)))
    assert _maximal(grid) == [(32, 64, 32)]
